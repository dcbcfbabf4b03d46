#!/usr/bin/env python3
"""leasehold benchmark adapter for python-redis-lock (PyPI `python-redis-lock>=4,<5`, module
`redis_lock`), on a redis-py client.

    python_redis_lock.py --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned]
                         [--key-prefix P] [--urls URL,...] [--duration S] [--cycles N]

Acquire: GET lock:NAME (the "already held by me?" check), then SET lock:NAME id NX EX ttl; while
busy, BLPOP lock-signal:NAME with a timeout of `expire` seconds (10 s here) and try again.
Release: one Lua script that DELs the key and LPUSHes a token onto the signal list (expiring
after signal_expire=1000 ms), which wakes one waiter. There is no retry delay to tune, so
`--tuned` W3 prints {"skipped": ...}; W4 is skipped too (single node only). Keys are the given
names with the library's "lock:" prefix. See bench/README.md.
"""

import sys
from importlib.metadata import version

sys.dont_write_bytecode = True  # keep __pycache__ out of the repository

import redis
import redis_lock

from benchcommon import Peer, main


def make_client(url):
    return redis.StrictRedis.from_url(url)


def acquire(client, key, ttl_s, wait_forever, tuned):
    lock = redis_lock.Lock(client, key, expire=ttl_s)
    return lock if lock.acquire(blocking=wait_forever) else None


def release(lock):
    lock.release()


def retry_settings(tuned):
    return {
        "delay_distribution": "none: a waiter blocks in BLPOP on the lock's signal list and "
        "retries when a release pushes a token (or after the BLPOP timeout = expire = 10 s)",
        "default": "no retry delay; BLPOP wake-up on release, signal_expire=1000 ms",
        "waiting": "Lock.acquire(blocking=True, timeout=None): forever; W1/W2 use "
        "blocking=False on fresh keys",
    }


if __name__ == "__main__":
    sys.exit(
        main(
            Peer(
                system="python-redis-lock",
                version=version("python-redis-lock"),
                make_client=make_client,
                acquire=acquire,
                release=release,
                retry_settings=retry_settings,
                tuned_unsupported="python-redis-lock has no retry delay to tune: waiters block "
                "in BLPOP and are woken by the release (see the default W3 run)",
                extra={
                    "api": "redis_lock.Lock(client, name, expire=10) -> acquire()/release()",
                    "key_naming": "lock:<key> and lock-signal:<key>",
                },
            )
        )
    )
