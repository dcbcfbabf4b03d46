"""One protocol across languages: the Rust CLI (`leasehold`, the same library) and Python on
the same keys, and redis-py's Lock beside leasehold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

import pytest

import leasehold
from conftest import CI, CLI, ROOT, SERVERS, locker_for, server_url

GENEROUS = 30.0


def cli(url: str, *args: str) -> Dict[str, Any]:
    """Runs the Rust CLI with --json; its JSON answer."""
    out = subprocess.run(
        [CLI, *args, "--url", url, "--json"], check=True, capture_output=True, text=True
    )
    answer = json.loads(out.stdout)
    assert isinstance(answer, dict)
    return answer


def waiters(url: str, key: str) -> int:
    out = subprocess.run(
        [CLI, "ls", key, "--url", url, "--json"], check=True, capture_output=True, text=True
    )
    entries = [e for e in json.loads(out.stdout) if e["key"] == key]
    return int(entries[0]["waiters"] or 0) if entries else 0


def until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + GENEROUS
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def lease_url(server: str) -> str:
    """The server's URL for locks that outlive a CLI command: on PostgreSQL, lease rows
    (`?lock=lease`; a session lock dies with the command's connection). Both sides must use
    the same form: session locks and lease rows are different protocols."""
    url = server_url(server)
    return url + "?lock=lease" if server == "postgres" else url


def test_fencing_numbers_increase_across_languages(server: str, key: str) -> None:
    """Rust (the CLI), Python and Node take turns on one key: one counter, strictly rising.
    Node takes its turn wherever its addon is built (always under CI)."""
    url = lease_url(server)
    locks = leasehold.Locker(url)
    with_node = node_built()
    seen: List[int] = []
    for _ in range(3):
        held = cli(url, "acquire", key, "--ttl", "30s", "--fencing")
        seen.append(int(held["fencing_token"]))
        cli(url, "release", key, "--token", held["token"])
        with locks.lock(key, ttl=30, fencing=True) as lease:
            assert lease.fence is not None
            seen.append(lease.fence)
        if with_node:
            node = node_holder(url, key, "release")
            seen.append(int(node_took(node)["fence"]))
            assert node.wait() == 0
    assert len(seen) == (9 if with_node else 6), seen
    assert all(a < b for a, b in zip(seen, seen[1:])), seen


@pytest.mark.parametrize("name", ["redis7", "redis8", "valkey9", "etcd"])
def test_a_rust_holder_hands_over_to_python_waiters_in_arrival_order(
    name: str, key: str
) -> None:
    url, locks = server_url(name), locker_for(name)
    held = cli(url, "acquire", key, "--ttl", "60s", "--fair")
    order: List[int] = []

    def wait_in_line(n: int) -> None:
        with locks.lock(key, ttl=60, wait=GENEROUS, fair=True):
            order.append(n)

    threads = []
    for n in range(3):
        t = threading.Thread(target=wait_in_line, args=(n,))
        t.start()
        threads.append(t)
        # The next waiter starts once this one is in the server's queue: arrival order known.
        until(lambda: waiters(url, key) == n + 1, f"waiter {n} queued")
    cli(url, "release", key, "--token", held["token"], "--fair")
    for t in threads:
        t.join()
    assert order == [0, 1, 2]


HOLDER = """
import sys, time, leasehold
locks = leasehold.Locker(sys.argv[1])
lease = locks.lock(sys.argv[2], ttl=2, auto_extend=True, fencing=True).acquire()
print(lease.fence, flush=True)
time.sleep(3600)
"""


def test_a_python_holder_killed_is_taken_over_by_rust_after_the_ttl(
    server: str, key: str
) -> None:
    url = lease_url(server)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, key], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        fence = int(holder.stdout.readline())
        # Held, and renewed past its TTL while the process lives.
        busy = subprocess.run(
            [CLI, "acquire", key, "--ttl", "10s", "--url", url], capture_output=True
        )
        assert busy.returncode != 0
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    taken = cli(url, "acquire", key, "--ttl", "10s", "--fencing", "--wait", "60s")
    assert int(taken["fencing_token"]) > fence
    cli(url, "release", key, "--token", taken["token"])


def test_a_forked_child_makes_its_own_locker_and_leaves_the_parents_lock(key: str) -> None:
    locks = locker_for("redis8")
    with locks.lock(key, ttl=60) as lease:
        pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                try:
                    locks.lock(key + ":child", ttl=5).acquire()
                    code = 1  # the parent's Locker worked in the child
                except leasehold.ForkedProcess:
                    pass
                try:
                    lease.release()
                    code = 2  # the parent's lease was released by the child
                except leasehold.ForkedProcess:
                    pass
                own = leasehold.Locker(server_url("redis8"))  # a runtime of its own
                with own.lock(key + ":child", ttl=5, fencing=True) as mine:
                    assert mine.fence is not None
                with pytest.raises(leasehold.NotAcquired):
                    own.lock(key, ttl=5).acquire()  # the parent still holds it
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert lease.held
        with pytest.raises(leasehold.NotAcquired):
            locks.lock(key, ttl=5).acquire()


@pytest.mark.parametrize("name", ["redis7", "redis8", "valkey9"])
def test_redis_py_lock_and_leasehold_exclude_each_other(name: str, key: str) -> None:
    redis = pytest.importorskip("redis")
    url, locks = server_url(name), locker_for(name)
    client = redis.Redis.from_url(url)
    theirs = client.lock(key, timeout=30)
    assert theirs.acquire(blocking=False)
    with pytest.raises(leasehold.NotAcquired):
        locks.lock(key, ttl=30).acquire()
    # leasehold's release with a token that is not the holder's is refused too.
    with pytest.raises(leasehold.NotHeld):
        locks.release(key, "not-theirs")
    assert client.get(key) == theirs.local.token
    theirs.release()
    with locks.lock(key, ttl=30) as ours:
        assert not client.lock(key, timeout=30).acquire(blocking=False)
        # redis-py's release of a lock it does not hold is refused, as ours would be.
        stranger = client.lock(key, timeout=30)
        stranger.local.token = b"not-ours"
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            stranger.release()
        assert ours.held
    client.close()


# ---- Node.js (crates/leasehold-node): its addon is built by scripts/test-node, which
# scripts/test runs before this suite. Under CI a missing addon fails these tests.

NODE_PACKAGE = ROOT / "crates" / "leasehold-node"
NODE_HOLDER = NODE_PACKAGE / "tests" / "holder.js"


def node_built() -> bool:
    """Whether the Node.js addon is built; under CI it must be (the test fails if not)."""
    built = (NODE_PACKAGE / "leasehold.node").exists()
    if not built and CI:
        pytest.fail("the Node.js addon is not built (scripts/test-node builds it)")
    return built


def node_holder(url: str, key: str, mode: str) -> "subprocess.Popen[str]":
    """A Node process taking `key` with fencing (tests/holder.js); `mode` release or hold.
    Skips the test where the addon is not built (never under CI: see `node_built`)."""
    if not node_built():
        pytest.skip("the Node.js addon is not built (scripts/test-node builds it)")
    return subprocess.Popen(
        ["node", str(NODE_HOLDER), url, key, mode], stdout=subprocess.PIPE, text=True
    )


def node_took(holder: "subprocess.Popen[str]") -> Dict[str, Any]:
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line, f"the Node holder exited with {holder.wait()} before taking the lock"
    answer = json.loads(line)
    assert isinstance(answer, dict)
    return answer


def test_a_node_holder_killed_is_taken_over_by_python_after_the_ttl(
    server: str, key: str
) -> None:
    url = lease_url(server)
    holder = node_holder(url, key, "hold")
    try:
        fence = int(node_took(holder)["fence"])
        # Held while the process lives.
        with pytest.raises(leasehold.NotAcquired):
            leasehold.Locker(url).lock(key, ttl=10).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with leasehold.Locker(url).lock(key, ttl=10, fencing=True, wait=GENEROUS) as taken:
        assert taken.fence is not None and taken.fence > fence
