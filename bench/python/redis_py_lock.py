#!/usr/bin/env python3
"""leasehold benchmark adapter for redis-py's Lock (redis.Redis.lock), PyPI `redis>=8,<9`.

    redis_py_lock.py --url redis://127.0.0.1:PORT/ --workload W1|W2|W3|W4 [--tuned]
                     [--key-prefix P] [--urls URL,...] [--duration S] [--cycles N]

Acquire: SET key token NX PX ttl (token uuid1). Release: a Lua script (GET == token -> DEL),
run with EVALSHA. Waiting: a fixed sleep between tries, `sleep=0.1` s by default
(`--tuned`: 0.01 s); blocking_timeout=None waits forever. W4 is skipped (single node only).
See bench/README.md.
"""

import sys
from importlib.metadata import version

sys.dont_write_bytecode = True  # keep __pycache__ out of the repository

import redis

from benchcommon import Peer, main

DEFAULT_SLEEP_S = 0.1  # redis.lock.Lock.__init__(sleep=0.1)
TUNED_SLEEP_S = 0.01


def make_client(url):
    return redis.Redis.from_url(url)


def acquire(client, key, ttl_s, wait_forever, tuned):
    lock = client.lock(
        key,
        timeout=ttl_s,
        sleep=TUNED_SLEEP_S if tuned else DEFAULT_SLEEP_S,
        blocking=wait_forever,
        blocking_timeout=None,
    )
    return lock if lock.acquire() else None


def release(lock):
    lock.release()


def retry_settings(tuned):
    s = TUNED_SLEEP_S if tuned else DEFAULT_SLEEP_S
    return {
        "sleep_s": s,
        "delay_distribution": f"fixed {s * 1000:g} ms between tries, no jitter",
        "default": "sleep=0.1 s (fixed)",
        "waiting": "Lock.acquire(blocking=True, blocking_timeout=None): tries SET NX, sleeps, "
        "forever; W1/W2 use blocking=False on fresh keys",
    }


if __name__ == "__main__":
    sys.exit(
        main(
            Peer(
                system="redis-py",
                version=version("redis"),
                make_client=make_client,
                acquire=acquire,
                release=release,
                retry_settings=retry_settings,
                extra={"api": "redis.Redis.lock(name, timeout=10, sleep=...) -> acquire()/release()"},
            )
        )
    )
