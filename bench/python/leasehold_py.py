#!/usr/bin/env python3
"""leasehold benchmark adapter for leasehold-py, the Python package of this repository
(crates/leasehold-py: the Rust library under PyO3), built in release mode and installed into
the bench venv by bench/install-peers.

    leasehold_py.py --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned]
                    [--key-prefix P] [--urls URL,...] [--duration S] [--cycles N]

Acquire: the Rust library's acquisition (SET NX PX; with fencing off, one round trip), run on
its tokio runtime with the GIL released while it waits for the reply. W3 waits with fair=True:
waiters queue on the server and a release hands the lock to the next one (no retry delay to
tune, so `--tuned` W3 is skipped). Release: DELEX IFEQ on Redis >= 8.4 (else a Lua script).
One Locker shared by all threads (the library's multiplexed connection). W4 is skipped.
See bench/README.md.
"""

import sys
from importlib.metadata import version

sys.dont_write_bytecode = True  # keep __pycache__ out of the repository

import leasehold

from benchcommon import Peer, main

FOREVER_S = 24 * 3600.0


def make_client(url):
    return leasehold.Locker(url)


def acquire(locks, key, ttl_s, wait_forever, tuned):
    request = locks.lock(
        key,
        ttl=ttl_s,
        wait=FOREVER_S if wait_forever else None,
        fair=wait_forever,
    )
    try:
        return request.acquire()
    except leasehold.NotAcquired:
        return None


def release(lease):
    lease.release()


def retry_settings(tuned):
    return {
        "delay_distribution": "none in W3: fair=True queues the waiter on the server and the "
        "release hands the lock over (a pub/sub wake-up); W1/W2: one try (wait=None)",
        "default": "wait=None (one try); fair=False",
        "waiting": "W3: wait=24 h, fair=True",
    }


if __name__ == "__main__":
    sys.exit(
        main(
            Peer(
                system="leasehold-py",
                version=version("leasehold"),
                make_client=make_client,
                acquire=acquire,
                release=release,
                retry_settings=retry_settings,
                tuned_unsupported="leasehold-py's W3 is fair: waiters are handed the lock in "
                "order by the release, there is no retry delay to tune",
                extra={
                    "client": "leasehold.Locker (the Rust library's multiplexed connection, "
                    "tokio runtime; GIL released during each round trip)",
                    "api": "Locker(url).lock(key, ttl=10, wait=..., fair=...).acquire() -> "
                    "lease.release()",
                    "key_naming": "<key> (and {<key>}:queue, the fair waiters)",
                },
            )
        )
    )
