"""Shared driver for the Python peer adapters of the leasehold benchmarks.

An adapter describes its library with a `Peer` (how to make a client, acquire and release a lock
on a key, and the retry settings) and calls `main(peer)`. The driver parses the common command
line, runs one workload and prints exactly one JSON object on stdout (diagnostics go to stderr).

Timing uses time.perf_counter_ns (CLOCK_MONOTONIC, shared by all threads of the process).
Concurrency is threads (W2: 64, W3: 16), all sharing one redis.Redis client and so one
ConnectionPool: a thread takes a connection from the pool per command, and the pool grows to
the number of commands in flight at once (for W3's blocked BLPOP waiters, one each).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

TTL_S = 10
HOLD_NS = 1_000_000
W2_THREADS = 64
W3_WORKERS = 16

now_ns = time.perf_counter_ns
HOLD_METHOD = (
    "busy-wait on time.perf_counter_ns, holding the GIL; sys.setswitchinterval(100 us) during W3"
    " hands it to a thread that asks within 100 us"
)
# The interpreter's switch interval during W3 (CPython's default is 5 ms): a thread that wants
# the GIL while the holder spins gets it within this, as the interpreter hands it over.
W3_SWITCH_INTERVAL_S = 100e-6


@dataclass
class Peer:
    system: str
    version: str
    # (client, key, ttl_s, wait_forever, tuned) -> handle, or None if not acquired
    acquire: Callable[[Any, str, int, bool, bool], Any]
    release: Callable[[Any], None]
    retry_settings: Callable[[bool], dict]
    make_client: Callable[[str], Any]
    extra: dict = field(default_factory=dict)
    # If set, --tuned W3 is skipped with this reason (the library has no retry delay to tune).
    tuned_unsupported: Optional[str] = None
    w4_unsupported: str = "single-node lock: the library has no multi-node (Redlock) mode"


def pct_us(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile, in microseconds."""
    n = len(sorted_ns)
    if n == 0:
        return 0.0
    rank = min(max(math.ceil(q * n), 1), n)
    return round(sorted_ns[rank - 1] / 1e3, 1)


def cdf_us(sorted_ns: list[int]) -> list[list[float]]:
    """[latency_us, q] at q = 0.01, 0.02, ..., 1.00: the nearest-rank value at each quantile
    (rank computed in integers, so exact); [] without samples."""
    n = len(sorted_ns)
    if n == 0:
        return []
    out = []
    for k in range(1, 101):
        rank = min(max(-(-k * n // 100), 1), n)
        out.append([round(sorted_ns[rank - 1] / 1e3, 1), k / 100])
    return out


def parse_args(system: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=f"leasehold benchmark adapter for {system}")
    p.add_argument("--url", help="redis://127.0.0.1:PORT/ (W1-W3)")
    p.add_argument("--urls", help="comma-separated URLs (W4)")
    p.add_argument("--workload", required=True, type=str.upper, choices=["W1", "W2", "W3", "W4"])
    p.add_argument("--tuned", action="store_true", help="W3: a 10 ms retry delay")
    p.add_argument("--key-prefix", default=None)
    p.add_argument("--duration", type=float, default=None, help="W2/W3 seconds (default 10)")
    p.add_argument("--cycles", type=int, default=None, help="W1 (default 20000) / W4 (2000)")
    p.add_argument("--warmup", type=int, default=200, help="warm-up cycles on other keys")
    a = p.parse_args()
    if a.key_prefix is None:
        a.key_prefix = f"bench:{system}:{os.getpid()}:{int(time.time() * 1000)}"
    if a.workload != "W4" and not a.url:
        p.error("--url is required")
    return a


def base(peer: Peer, a: argparse.Namespace) -> dict:
    d = {
        "system": peer.system,
        "workload": a.workload,
        "version": peer.version,
        "client": (
            "redis-py %s, one redis.Redis with its ConnectionPool shared by all threads"
            % _redis_version()
        ),
        "runtime": "CPython %s, threads" % platform.python_version(),
        "urls": [a.url] if a.url else [],
        "key_prefix": a.key_prefix,
        "ttl_ms": TTL_S * 1000,
        "warmup_cycles": a.warmup,
        "retry": "10ms" if a.tuned else "default",
        "retry_settings": peer.retry_settings(a.tuned),
    }
    d.update(peer.extra)
    return d


def _redis_version() -> str:
    from importlib.metadata import version

    return version("redis")


def warmup(peer: Peer, client: Any, a: argparse.Namespace) -> None:
    for i in range(max(a.warmup, 1)):
        h = peer.acquire(client, f"{a.key_prefix}:warmup:{i}", TTL_S, False, a.tuned)
        if h is None:
            raise RuntimeError("warm-up acquisition failed on a fresh key")
        peer.release(h)


def w1(peer: Peer, a: argparse.Namespace) -> dict:
    cycles = a.cycles if a.cycles is not None else 20_000
    client = peer.make_client(a.url)
    warmup(peer, client, a)
    lat: list[int] = []
    errors = 0
    start = now_ns()
    for i in range(cycles):
        key = f"{a.key_prefix}:w1:{i}"
        t0 = now_ns()
        h = peer.acquire(client, key, TTL_S, False, a.tuned)
        if h is None:
            errors += 1
            continue
        peer.release(h)
        lat.append(now_ns() - t0)
    elapsed = (now_ns() - start) / 1e9
    lat.sort()
    d = base(peer, a)
    d.update(
        tasks=1,
        cycles=cycles,
        ok=len(lat),
        errors=errors,
        elapsed_s=round(elapsed, 6),
        ops_per_s=round(len(lat) / elapsed, 1),
        p50_us=pct_us(lat, 0.50),
        p99_us=pct_us(lat, 0.99),
        cdf=cdf_us(lat),
    )
    return d


def w2(peer: Peer, a: argparse.Namespace) -> dict:
    duration = a.duration if a.duration is not None else 10.0
    client = peer.make_client(a.url)
    warmup(peer, client, a)
    barrier = threading.Barrier(W2_THREADS + 1)
    results = [(0, 0)] * W2_THREADS
    box: dict = {}

    def run(t: int) -> None:
        barrier.wait()
        deadline = box["deadline"]
        ok = errors = i = 0
        while now_ns() < deadline:
            key = f"{a.key_prefix}:w2:{t}:{i}"
            i += 1
            try:
                h = peer.acquire(client, key, TTL_S, False, a.tuned)
                if h is None:
                    errors += 1
                    continue
                peer.release(h)
                ok += 1
            except Exception as e:  # count, keep going: one bad reply must not end the run
                print(f"{peer.system} W2: {e!r}", file=sys.stderr)
                errors += 1
        results[t] = (ok, errors)

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(W2_THREADS)]
    for th in threads:
        th.start()
    start = now_ns()
    box["deadline"] = start + int(duration * 1e9)
    barrier.wait()
    for th in threads:
        th.join()
    elapsed = (now_ns() - start) / 1e9
    ok = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    d = base(peer, a)
    d.update(
        tasks=W2_THREADS,
        duration_s=duration,
        elapsed_s=round(elapsed, 6),
        ok=ok,
        errors=errors,
        ops_per_s=round(ok / elapsed, 1),
        pool_connections=_pool_size(client),
    )
    return d


def _pool_size(client: Any) -> Optional[int]:
    try:
        pool = client.connection_pool
        return len(pool._available_connections) + len(pool._in_use_connections)
    except Exception:
        return None


def hold() -> int:
    """Busy-waits until 1 ms after the call; returns the end (the measured release time).

    The loop spins on the monotonic clock, as the Rust and Node adapters do, and keeps the GIL
    as any CPU-bound Python code does: W3 shortens the interpreter's switch interval
    (W3_SWITCH_INTERVAL_S), so a thread that wants the GIL (to read a reply) gets it within
    100 us while the holder spins, as it could in a language without a global lock. A
    `time.sleep(0)` in the loop (the earlier way) also gave the CPU itself away to whatever
    else ran on the 2 cores, and the holder then overshot its 1 ms by about 45 us on average
    (4.5 % of a W3 cycle), which the Rust and Node holds do not.
    """
    end = now_ns() + HOLD_NS
    t = now_ns()
    while t < end:
        t = now_ns()
    return t


def w3(peer: Peer, a: argparse.Namespace) -> dict:
    duration = a.duration if a.duration is not None else 10.0
    client = peer.make_client(a.url)
    warmup(peer, client, a)
    key = f"{a.key_prefix}:w3"
    barrier = threading.Barrier(W3_WORKERS + 1)
    records: list[list[tuple[int, int, int, int]]] = [[] for _ in range(W3_WORKERS)]
    errors = [0] * W3_WORKERS
    box: dict = {}

    def run(w: int) -> None:
        barrier.wait()
        deadline = box["deadline"]
        mine = records[w]
        while now_ns() < deadline:
            wait_start = now_ns()
            try:
                h = peer.acquire(client, key, TTL_S, True, a.tuned)
            except Exception as e:
                print(f"{peer.system} W3: {e!r}", file=sys.stderr)
                errors[w] += 1
                continue
            if h is None:
                errors[w] += 1
                continue
            acquired = now_ns()
            released = hold()
            try:
                peer.release(h)
            except Exception as e:
                print(f"{peer.system} W3 release: {e!r}", file=sys.stderr)
                errors[w] += 1
            mine.append((acquired, w, wait_start, released))

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(W3_WORKERS)]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(W3_SWITCH_INTERVAL_S)
    try:
        for th in threads:
            th.start()
        start = now_ns()
        deadline = start + int(duration * 1e9)
        box["deadline"] = deadline
        barrier.wait()
        for th in threads:
            th.join()
        drained = now_ns()
    finally:
        sys.setswitchinterval(switch_interval)
    all_acq = sorted(x for r in records for x in r)
    d = base(peer, a)
    d.update(
        workers=W3_WORKERS,
        hold_target_us=HOLD_NS // 1000,
        hold_method=HOLD_METHOD,
        duration_s=duration,
        drain_ms=round((drained - deadline) / 1e6, 1),
        errors=sum(errors),
        pool_connections=_pool_size(client),
    )
    d.update(contention_stats(all_acq, start, deadline))
    return d


def contention_stats(all_acq: list, start: int, deadline: int) -> dict:
    """all_acq: (acquired, worker, wait_start, released) sorted by acquisition time.

    Counts, handoffs and holds are over the acquisitions made before the deadline; waits are
    counted to their completion, also past the deadline (the stragglers drain after it).
    """
    win = [x for x in all_acq if x[0] <= deadline]
    per_worker = [0] * W3_WORKERS
    handoffs: list[int] = []
    same = 0
    holds = 0
    for i, (acq, w, _ws, rel) in enumerate(win):
        per_worker[w] += 1
        holds += rel - acq
        if i > 0:
            p_acq, p_w, _pws, p_rel = win[i - 1]
            if p_w == w:
                same += 1
            else:
                handoffs.append(max(acq - p_rel, 0))
    handoffs.sort()
    n = len(win)
    max_wait = max((acq - ws for acq, _w, ws, _rel in all_acq), default=0)
    window = (deadline - start) / 1e9
    return {
        "acquisitions": n,
        "ops_per_s": round(n / window, 1),
        "handoffs": len(handoffs),
        "handoff_p50_us": pct_us(handoffs, 0.50),
        "handoff_p99_us": pct_us(handoffs, 0.99),
        "cdf": cdf_us(handoffs),
        "same_worker_rate": round(same / (n - 1), 4) if n > 1 else 0.0,
        "min_per_worker": min(per_worker),
        "max_per_worker": max(per_worker),
        "per_worker": per_worker,
        "max_wait_ms": round(max_wait / 1e6, 1),
        "hold_us_mean": round(holds / n / 1e3, 1) if n else 0.0,
    }


def main(peer: Peer) -> int:
    a = parse_args(peer.system)
    try:
        if a.workload == "W4":
            out = {
                "system": peer.system,
                "workload": "W4",
                "version": peer.version,
                "skipped": peer.w4_unsupported,
            }
        elif a.workload == "W3" and a.tuned and peer.tuned_unsupported:
            out = {
                "system": peer.system,
                "workload": "W3",
                "version": peer.version,
                "retry": "10ms",
                "skipped": peer.tuned_unsupported,
            }
        else:
            out = {"W1": w1, "W2": w2, "W3": w3}[a.workload](peer, a)
    except Exception as e:
        print(f"{peer.system}: {type(e).__name__}: {e}", file=sys.stderr)
        print(
            json.dumps(
                {
                    "system": peer.system,
                    "workload": a.workload,
                    "version": peer.version,
                    "error": f"{type(e).__name__}: {e}",
                }
            )
        )
        return 1
    print(json.dumps(out))
    return 0
