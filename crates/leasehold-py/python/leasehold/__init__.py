"""Distributed locks on Redis, Valkey, etcd and PostgreSQL, done right.

The Python face of the Rust library ``leasehold``: the same protocol (keys, scripts, fencing
counters), so a lock taken here excludes one taken by a Rust service or the ``leasehold`` CLI.

    import leasehold

    locks = leasehold.Locker("redis://127.0.0.1:6379/")   # or redlock://, etcd://, postgres://
                                                          # (?lock=lease), file://, memory://
    with locks.lock("reports:daily", ttl=30, wait=5, fencing=True, auto_extend=True) as lease:
        db.write(..., fence=lease.fence)        # the resource refuses older fence numbers

    async with locks.lock("k", ttl=10) as lease:  # asyncio: the same options
        ...

Durations are seconds (``int`` or ``float``) or ``datetime.timedelta``. Every wait and round
trip runs with the GIL released. A lock lost while its ``with`` block runs never passes
silently: by default the block's thread gets ``LockLost`` raised in it (an asyncio task is
cancelled, and ``LockLost`` comes out of ``async with``); with ``on_loss="check"`` the block
runs on and ``LockLost`` is raised at its end. See the README's Python section.
"""

from __future__ import annotations

from ._locks import (
    FenceGate,
    Leader,
    LeaderWatch,
    LockRequest,
    Locker,
    StaleFence,
    cleanups_settled,
)
from ._native import (
    AuthenticationFailed,
    BackendNotCompiled,
    Busy,
    Conflict,
    ConnectionFailed,
    ExpiredOnArrival,
    FencingExhausted,
    ForkedProcess,
    InvalidArgument,
    Lease,
    LeaseholdError,
    LockLost,
    NoQuorum,
    NotAcquired,
    NotHeld,
    NotReplicated,
    PermissionDenied,
    ServerError,
    TopologyError,
    UnexpectedReply,
    Unsupported,
    __version__,
)

__all__ = [
    "AuthenticationFailed",
    "BackendNotCompiled",
    "Busy",
    "Conflict",
    "ConnectionFailed",
    "ExpiredOnArrival",
    "FenceGate",
    "FencingExhausted",
    "ForkedProcess",
    "InvalidArgument",
    "Leader",
    "LeaderWatch",
    "Lease",
    "LeaseholdError",
    "LockLost",
    "LockRequest",
    "Locker",
    "NoQuorum",
    "NotAcquired",
    "NotHeld",
    "NotReplicated",
    "PermissionDenied",
    "ServerError",
    "StaleFence",
    "TopologyError",
    "UnexpectedReply",
    "Unsupported",
    "__version__",
    "cleanups_settled",
]
