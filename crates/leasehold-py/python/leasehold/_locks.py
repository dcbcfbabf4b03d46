"""Lockers, requests as context managers, and the loss policies."""

from __future__ import annotations

import asyncio
import ctypes
import threading
from datetime import timedelta
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from . import _native
from ._native import Lease, LeaseholdError, LockLost, NotHeld

#: Seconds (``int`` or ``float``) or a ``datetime.timedelta``.
Duration = Union[int, float, timedelta]

_ON_LOSS = ("raise", "check")


class StaleFence(LeaseholdError):
    """A fence number lower than one the resource has already admitted: its holder's lock
    was taken over since, so its write must be refused."""


class Leader(NamedTuple):
    """An election's current leader."""

    id: str
    term: int


class LeaderWatch:
    """The changes of an election's leadership (``Locker.watch_leader``): iterate it (each
    item the new ``Leader``, or ``None`` when nobody leads), with ``for`` or ``async for``, or
    call ``changed()`` / ``await changed_async()``. A renewal is not a change; a new term is."""

    def __init__(self, native: _native.LeaderWatch) -> None:
        self._native = native

    @property
    def current(self) -> Optional[Leader]:
        """The leader as last seen (``None``: nobody, or not read yet)."""
        found = self._native.current
        return Leader(*found) if found is not None else None

    def changed(self) -> Optional[Leader]:
        """Waits (GIL released, Ctrl-C cancels) for the next change; the new leader."""
        found = self._native.changed()
        return Leader(*found) if found is not None else None

    async def changed_async(self) -> Optional[Leader]:
        """``changed()`` for asyncio."""
        found = await self._native.changed_async()
        return Leader(*found) if found is not None else None

    def __iter__(self) -> Iterator[Optional[Leader]]:
        while True:
            yield self.changed()

    async def __aiter__(self) -> AsyncIterator[Optional[Leader]]:
        while True:
            yield await self.changed_async()


class FenceGate:
    """The protected resource's side of fencing, in one process: admits a fence number only
    if no higher number was admitted before. Thread-safe.

    A resource in a database keeps the highest number in the row and compares in the write
    itself (``UPDATE ... SET fence = %s WHERE fence <= %s``); this class is that comparison
    for an in-process resource, and the reference for what the comparison must do.
    """

    def __init__(self, highest: int = 0) -> None:
        self._lock = threading.Lock()
        self._highest = highest

    @property
    def highest(self) -> int:
        """The highest number admitted so far."""
        with self._lock:
            return self._highest

    def admit(self, fence: Optional[int]) -> None:
        """Admits ``fence`` (a lease's ``fence``) or raises ``StaleFence``. Equal numbers are
        admitted (the same holder writing twice)."""
        if fence is None or isinstance(fence, bool) or not isinstance(fence, int):
            raise TypeError("fence must be an int (take the lock with fencing=True)")
        with self._lock:
            if fence < self._highest:
                raise StaleFence(
                    f"fence {fence} is older than {self._highest}, already admitted"
                )
            self._highest = fence


def _set_async_exc(thread_id: int, exc: Optional[type]) -> None:
    """Raises ``exc`` in thread ``thread_id`` at its next Python instruction (``None``
    withdraws one not yet raised). CPython's documented ``PyThreadState_SetAsyncExc``."""
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]
    set_exc.restype = ctypes.c_int
    set_exc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else ctypes.py_object())


class _Watch:
    """One ``with`` block's watch over its lease: on loss, interrupts the block (a thread:
    ``LockLost`` raised in it; a task: cancelled), but only while the block runs."""

    def __init__(
        self,
        lease: Lease,
        interrupt: bool,
        task: Optional[asyncio.Task[Any]] = None,
        loop: Optional[asyncio.AbstractEventLoop] = None,
    ) -> None:
        self.lease = lease
        self._lock = threading.Lock()
        self._inside = True
        self.armed = False
        self.cancelled = False
        self._thread = threading.get_ident()
        self._task = task
        self._loop = loop
        if interrupt:
            lease.on_lost(self._fire)

    def _fire(self) -> None:
        with self._lock:
            if not self._inside:
                return
            self.armed = True
            if self._task is None:
                _set_async_exc(self._thread, LockLost)
                return
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:
            pass  # the loop is closed: nothing runs in the block any more

    def _cancel(self) -> None:
        # On the loop's thread, like leave() for a task: no race with the block's end.
        if self._inside and self._task is not None:
            self.cancelled = True
            self._task.cancel("leasehold: lock lost")

    def leave(self) -> None:
        """The block ends: no interruption from now on (one still pending is withdrawn)."""
        with self._lock:
            self._inside = False
            if self.armed and self._task is None:
                _set_async_exc(self._thread, None)


def _lost_error(lease: Lease) -> LockLost:
    err = LockLost(
        f"lock {lease.key!r} was lost while held ({lease.loss_reason or 'lost'})"
    )
    err.key = lease.key
    err.reason = lease.loss_reason
    return err


def _injected(exc: Optional[BaseException]) -> bool:
    """Whether ``exc`` is the bare ``LockLost`` a watch raised in the block."""
    return isinstance(exc, LockLost) and not exc.args


def _block_ends(watch: _Watch, exc: Optional[BaseException]) -> bool:
    """A ``with`` block ends: stops its watch, and raises ``LockLost`` if the lease was lost
    and no other error is on its way out (the interruption the watch caused is replaced by
    it). True if the lease is to be released."""
    watch.leave()
    if watch.cancelled:
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()
    if not watch.lease.lost:
        return True
    interrupted = _injected(exc) or (
        watch.cancelled and isinstance(exc, asyncio.CancelledError)
    )
    if exc is None or interrupted:
        raise _lost_error(watch.lease) from None
    return False  # another error is on its way out; lease.lost tells the loss


class LockRequest:
    """What to take and how; take it with ``with``, ``async with``, ``acquire()`` or
    ``await acquire_async()``. One request may be used any number of times, also by several
    threads or tasks at once (each ``with`` holds its own lease)."""

    def __init__(self, native: _native.Request, on_loss: str) -> None:
        if on_loss not in _ON_LOSS:
            raise _native.InvalidArgument(
                f"invalid on_loss: {on_loss!r} (one of {', '.join(_ON_LOSS)})"
            )
        self._native = native
        self._on_loss = on_loss
        self._holds: Dict[Tuple[int, int], List[_Watch]] = {}
        self._holds_lock = threading.Lock()

    @property
    def key(self) -> str:
        """The key, or the primitive's name."""
        return self._native.key

    def acquire(self) -> Lease:
        """Takes it (blocking, GIL released), waiting up to ``wait``. Raises ``NotAcquired``
        (``Busy``) if it is still taken then. Release the lease with ``lease.release()``."""
        return self._native.acquire()

    async def acquire_async(self) -> Lease:
        """``acquire()`` for asyncio. Cancelling it gives up the wait (never leaving the lock
        held)."""
        return await self._native.acquire_async()

    # -- context managers ------------------------------------------------------------------

    def _who(self) -> Tuple[int, int]:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        return (threading.get_ident(), id(task) if task is not None else 0)

    def _push(self, watch: _Watch) -> None:
        with self._holds_lock:
            self._holds.setdefault(self._who(), []).append(watch)

    def _pop(self) -> _Watch:
        who = self._who()
        with self._holds_lock:
            stack = self._holds[who]
            watch = stack.pop()
            if not stack:
                del self._holds[who]
            return watch

    def __enter__(self) -> Lease:
        lease = self._native.acquire()
        self._push(_Watch(lease, self._on_loss == "raise"))
        return lease

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        watch = self._pop()
        if _block_ends(watch, exc):
            try:
                watch.lease.release()
            except NotHeld:
                if exc is None:
                    raise _lost_error(watch.lease) from None
        return None

    async def __aenter__(self) -> Lease:
        lease = await self._native.acquire_async()
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        self._push(_Watch(lease, self._on_loss == "raise", task, loop))
        return lease

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        watch = self._pop()
        if _block_ends(watch, exc):
            try:
                await watch.lease.release_async()
            except NotHeld:
                if exc is None:
                    raise _lost_error(watch.lease) from None
        return None


class Locker:
    """A connection to one lock backend, by URL: ``redis://``, ``rediss://``,
    ``redis-sentinel://``, ``redis-cluster://``, ``redlock://``, ``etcd://``, ``etcds://``,
    ``postgres://``, ``memory://`` (one process) or ``file:///dir`` (one machine).

    Connecting blocks (GIL released) until the backend answers; ``await Locker.connect(url)``
    does it without blocking an event loop. Share one Locker between threads and tasks.
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: Optional[Duration] = None,
        response_timeout: Optional[Duration] = None,
        tls_ca_file: Optional[str] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        history: bool = False,
        _native_locker: Optional[_native.Locker] = None,
    ) -> None:
        if _native_locker is not None:
            self._native = _native_locker
            return
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        self._native = _native.Locker(
            url,
            connect_timeout=connect_timeout,
            response_timeout=response_timeout,
            tls_ca_file=tls_ca_file,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            history=history,
        )

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        connect_timeout: Optional[Duration] = None,
        response_timeout: Optional[Duration] = None,
        tls_ca_file: Optional[str] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        history: bool = False,
    ) -> "Locker":
        """Connects without blocking the running event loop."""
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        native = await _native.connect_async(
            url,
            connect_timeout=connect_timeout,
            response_timeout=response_timeout,
            tls_ca_file=tls_ca_file,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            history=history,
        )
        return cls(url, _native_locker=native)

    @property
    def backend(self) -> str:
        """``"redis"``, ``"redlock"``, ``"etcd"``, ``"postgres"``, ``"memory"`` or ``"file"``."""
        return self._native.backend

    def _request(self, kind: str, key: str, on_loss: str, **options: Any) -> LockRequest:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        return LockRequest(self._native.request(kind, key, **options), on_loss)

    def lock(
        self,
        key: str,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        fencing: bool = False,
        auto_extend: bool = False,
        fair: bool = False,
        max_hold: Optional[Duration] = None,
        min_hold: Optional[Duration] = None,
        renew_every: Optional[Duration] = None,
        owner_label: Optional[str] = None,
        on_loss: str = "raise",
    ) -> LockRequest:
        """A lock on ``key``.

        ``ttl``: how long the lock lives unless extended (``auto_extend=True`` renews it while
        held). ``wait``: how long to wait for a busy lock (``None``: one try). ``fencing``:
        issue a fence number (``lease.fence``), strictly increasing per key. ``fair``: waiters
        are served in arrival order. ``max_hold``: stop renewing after this long.
        ``min_hold``: keep the lock after release until this long after its acquisition (by
        the server's clock: once-per-period jobs). ``on_loss``: ``"raise"`` interrupts the
        ``with`` block when the lock is lost; ``"check"`` lets it run and raises ``LockLost``
        at its end.
        """
        return self._request(
            "lock",
            key,
            on_loss,
            ttl=ttl,
            wait=wait,
            fencing=fencing,
            auto_extend=auto_extend,
            fair=fair,
            max_hold=max_hold,
            min_hold=min_hold,
            renew_every=renew_every,
            owner_label=owner_label,
        )

    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        auto_extend: bool = False,
        fair: bool = False,
        on_loss: str = "raise",
    ) -> LockRequest:
        """One of ``permits`` permits of semaphore ``name`` (every holder must agree on
        ``permits``)."""
        if isinstance(permits, bool) or not isinstance(permits, int):
            raise TypeError("permits must be an int")
        if permits < 1:
            raise _native.InvalidArgument(f"invalid permits: {permits} (at least 1)")
        return self._request(
            "semaphore",
            name,
            on_loss,
            permits=permits,
            ttl=ttl,
            wait=wait,
            auto_extend=auto_extend,
            fair=fair,
        )

    def read_lock(
        self,
        name: str,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        auto_extend: bool = False,
        on_loss: str = "raise",
    ) -> LockRequest:
        """A shared hold of read-write lock ``name`` (a waiting writer keeps later readers
        out)."""
        return self._request(
            "read", name, on_loss, ttl=ttl, wait=wait, auto_extend=auto_extend
        )

    def write_lock(
        self,
        name: str,
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        fencing: bool = False,
        auto_extend: bool = False,
        on_loss: str = "raise",
    ) -> LockRequest:
        """The exclusive hold of read-write lock ``name``."""
        return self._request(
            "write",
            name,
            on_loss,
            ttl=ttl,
            wait=wait,
            fencing=fencing,
            auto_extend=auto_extend,
        )

    def multi_lock(
        self,
        keys: Sequence[str],
        *,
        ttl: Duration = 30.0,
        wait: Optional[Duration] = None,
        auto_extend: bool = False,
        on_loss: str = "raise",
    ) -> LockRequest:
        """All of ``keys`` at once, or none (``redis://`` only; the keys must share a hash
        slot on a cluster)."""
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise TypeError("keys must be a sequence of str")
        return self._request(
            "multi",
            ",".join(keys),
            on_loss,
            keys=list(keys),
            ttl=ttl,
            wait=wait,
            auto_extend=auto_extend,
        )

    def campaign(
        self,
        name: str,
        id: str,
        *,
        ttl: Duration = 10.0,
        wait: Optional[Duration] = None,
        on_loss: str = "raise",
    ) -> LockRequest:
        """Leadership of election ``name`` as ``id``, kept (renewed) while held; the lease's
        ``fence`` is the term. ``wait``: how long to campaign (``None``: until it wins, as
        in Rust and the CLI; ``0``: one try)."""
        if not isinstance(id, str):
            raise TypeError("id must be a str")
        return self._request(
            "campaign",
            name,
            on_loss,
            id=id,
            ttl=ttl,
            wait=wait,
            auto_extend=True,
        )

    def leader(self, name: str) -> Optional[Leader]:
        """The current leader of election ``name``, or ``None``."""
        found = self._native.leader(name)
        return Leader(*found) if found is not None else None

    def watch_leader(self, name: str, every: Duration = 1.0) -> LeaderWatch:
        """Follows the leadership of election ``name``: told at once of an election or a
        resignation where the backend announces them, and read at least every ``every``."""
        return LeaderWatch(self._native.watch_leader(name, every))

    def raise_fencing_counter(self, key: str, at_least: int) -> int:
        """Raises ``key``'s fencing counter to at least ``at_least`` (after a restore, or a
        move to another server, so that no number is issued twice); returns the counter."""
        return self._native.raise_fencing_counter(key, at_least)

    def inspect(self, key: str) -> Dict[str, Any]:
        """What the server says about ``key``: ``holder`` (the holder's token, in full, as
        ``leasehold inspect`` shows it: whoever has it can release the lock), ``ttl``
        (seconds), ``fencing_counter``, ``owner``."""
        return self._native.inspect(key)

    def list(self, pattern: str = "*") -> List[Dict[str, Any]]:
        """The locks whose keys match ``pattern`` (``*``/``?`` globs), as ``leasehold ls``
        shows them: ``key``, ``kind``, ``holders`` (``holder`` redacted, ``owner``, ``ttl``),
        ``ttl``, ``fencing_counter``, ``waiters``, ``permits``."""
        return self._native.list(pattern)

    def history(self, key: str, limit: int = 20) -> List[Dict[str, Any]]:
        """The last ``limit`` events of ``key``, newest first (recorded by Lockers made with
        ``history=True``): ``at`` (epoch seconds), ``kind``, ``fencing``, ``holder``,
        ``owner``, ``detail``."""
        return self._native.history(key, limit)

    def release(self, key: str, token: str, *, fair: bool = False) -> None:
        """Releases ``key`` held with ``token`` (a lease's ``token``, handed over); ``fair``:
        a fair lock, handed to its longest waiter (``leasehold release --fair``)."""
        self._native.release(key, token, fair)

    def extend(self, key: str, token: str, ttl: Duration) -> None:
        """Sets the validity of ``key``, held with ``token`` (handed over), to ``ttl`` from
        now (``leasehold extend``). Raises ``NotHeld`` if the token no longer holds it."""
        self._native.extend(key, token, ttl)

    def force_release(self, key: str, reason: str) -> Optional[int]:
        """Removes ``key``'s holder whatever its token, bumps its fencing counter (the old
        holder's numbers are then refused) and records ``reason``. Returns the counter."""
        return self._native.force_release(key, reason)

    def __repr__(self) -> str:
        return f"<leasehold.Locker {self.backend}>"


def cleanups_settled(timeout: Duration = 5.0) -> bool:
    """Waits (GIL released) until no background clean-up of an abandoned wait is running in
    this process, at most ``timeout``; returns whether they settled. What an interrupted or
    cancelled wait took (a place in a fair queue, a lock granted as it was given up) is given
    back by then: a process about to exit right after giving up a wait calls it first, or what
    the clean-up did not finish waits out its TTL."""
    return _native.cleanups_settled(timeout)
