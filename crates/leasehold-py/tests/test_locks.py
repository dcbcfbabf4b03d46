"""The Python API on every backend: locks, waits, fencing, primitives, loss, bad input."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from datetime import timedelta
from typing import Any, Callable, List

import pytest

import leasehold
from conftest import locker_for

GENEROUS = 30.0  # seconds: a bound that only a hang reaches


def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GENEROUS
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def test_a_lock_excludes_and_is_free_after_its_block(locks: leasehold.Locker, key: str) -> None:
    with locks.lock(key, ttl=10) as lease:
        assert lease.held and lease.key == key and not lease.lost
        assert 0 < lease.remaining <= 10
        with pytest.raises(leasehold.Busy) as busy:
            locks.lock(key, ttl=10).acquire()
        assert isinstance(busy.value, TimeoutError) and busy.value.key == key
    assert not lease.held and not lease.lost
    locks.lock(key, ttl=10).acquire().release()


def test_fencing_numbers_strictly_increase(locks: leasehold.Locker, key: str) -> None:
    fences: List[int] = []
    for _ in range(3):
        with locks.lock(key, ttl=10, fencing=True) as lease:
            assert lease.fence is not None
            fences.append(lease.fence)
    assert fences == sorted(set(fences)), fences
    with locks.lock(key, ttl=10) as plain:
        assert plain.fence is None


def test_a_waiter_gets_the_lock_when_it_is_released(locks: leasehold.Locker, key: str) -> None:
    holder = locks.lock(key, ttl=10).acquire()
    got: List[leasehold.Lease] = []
    waiter = threading.Thread(
        target=lambda: got.append(locks.lock(key, ttl=10, wait=GENEROUS).acquire())
    )
    waiter.start()
    holder.release()
    waiter.join()
    assert got and got[0].held
    got[0].release()


def test_durations_take_timedelta(locks: leasehold.Locker, key: str) -> None:
    with locks.lock(key, ttl=timedelta(seconds=5), wait=timedelta(0)) as lease:
        assert 0 < lease.remaining <= 5


def test_auto_extend_keeps_the_lock_past_its_ttl_while_its_thread_is_busy(
    locks: leasehold.Locker, key: str
) -> None:
    ttl = 1.0
    with locks.lock(key, ttl=ttl, auto_extend=True) as lease:
        # This thread computes, holding the GIL and calling nothing but `remaining`, for 1.5
        # TTLs and until three renewals show: renewals run on the library's threads and need
        # neither this thread nor its socket. Without them the key would have expired.
        start = time.monotonic()
        renewals, last = 0, lease.remaining
        while renewals < 3 or time.monotonic() - start < 1.5 * ttl:
            now = lease.remaining
            renewals, last = renewals + (now > last), now
            assert time.monotonic() - start < GENEROUS, f"{renewals} renewals while busy"
        assert lease.held and not lease.lost
        with pytest.raises(leasehold.NotAcquired):
            locks.lock(key, ttl=1).acquire()


def test_extend_and_release_after_the_block_are_refused(
    locks: leasehold.Locker, key: str
) -> None:
    with locks.lock(key, ttl=10) as lease:
        lease.extend(20)
        assert lease.remaining > 10
    with pytest.raises(leasehold.NotHeld):
        lease.release()
    with pytest.raises(leasehold.NotHeld):
        lease.extend(5)
    assert lease.fence is None and lease.key == key  # still readable


def test_loss_raises_in_the_blocks_thread(locks: leasehold.Locker, key: str) -> None:
    with pytest.raises(leasehold.LockLost) as lost:
        with locks.lock(key, ttl=1, auto_extend=True, fencing=True) as lease:
            locks.force_release(key, "test: loss inside a with block")
            deadline = time.monotonic() + GENEROUS
            while time.monotonic() < deadline:  # the block's work, interrupted by the loss
                time.sleep(0.01)
            raise AssertionError("the block was not interrupted")
    assert lease.lost and lost.value.key == key


def test_a_loss_callback_may_call_the_library(locks: leasehold.Locker, key: str) -> None:
    # on_lost callbacks run on one of the runtime's threads, where a blocking call cannot run
    # the call's future itself (it runs as a task of its own there): inspect() from the
    # callback must answer, not panic.
    seen: List[Any] = []
    answered = threading.Event()

    def callback() -> None:
        try:
            seen.append(locks.inspect(key))
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            seen.append(e)
        answered.set()

    lease = locks.lock(key, ttl=GENEROUS).acquire()
    lease.on_lost(callback)
    locks.force_release(key, "test: a loss callback calls the library")
    with pytest.raises(leasehold.NotHeld):
        lease.extend(GENEROUS)  # finds the lock gone: the lease is lost, the callback runs
    assert answered.wait(GENEROUS), "the loss callback did not finish"
    assert isinstance(seen[0], dict), seen[0]
    assert seen[0]["holder"] is None


def test_loss_with_on_loss_check_raises_at_the_end(locks: leasehold.Locker, key: str) -> None:
    reached_end = False
    with pytest.raises(leasehold.LockLost):
        with locks.lock(key, ttl=1, auto_extend=True, on_loss="check") as lease:
            locks.force_release(key, "test: loss, checked at the end")
            until(lambda: lease.lost, "the loss noticed")
            reached_end = True
    assert reached_end


def test_loss_cancels_the_asyncio_task(locks: leasehold.Locker, key: str) -> None:
    async def main() -> None:
        with pytest.raises(leasehold.LockLost):
            async with locks.lock(key, ttl=1, auto_extend=True) as lease:
                locks.force_release(key, "test: loss inside async with")
                await asyncio.sleep(GENEROUS)
                raise AssertionError("the task was not cancelled")
        assert lease.lost
        # The task goes on (the cancellation was turned into LockLost, not left pending).
        await asyncio.sleep(0)

    asyncio.run(main())


def test_asyncio_lock_and_cancelled_wait(locks: leasehold.Locker, key: str) -> None:
    async def main() -> None:
        ttl = 4 * GENEROUS  # far beyond the test's bound: freed by cleanup, never by expiry
        async with locks.lock(key, ttl=ttl, fencing=True) as lease:
            assert lease.fence is not None
            waiter = asyncio.ensure_future(
                locks.lock(key, ttl=ttl, wait=4 * GENEROUS).acquire_async()
            )
            await asyncio.sleep(0.2)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        # The cancelled waiter's cleanup runs in the background (a lock granted to it meanwhile
        # is released with it). Once it has settled, one attempt takes the lock.
        assert await asyncio.to_thread(leasehold.cleanups_settled, GENEROUS)
        again = await locks.lock(key, ttl=ttl).acquire_async()
        await again.release_async()

    asyncio.run(main())


def test_async_connect() -> None:
    async def main() -> None:
        locks = await leasehold.Locker.connect("memory://")
        async with locks.lock("async-connect", ttl=5):
            pass

    asyncio.run(main())


def test_keyboard_interrupt_during_a_wait_leaves_nothing_held(
    locks: leasehold.Locker, key: str
) -> None:
    fair = locks.backend in ("redis", "memory", "etcd")
    # TTLs far beyond the test's bound: the lock comes free by cleanup, never by expiry.
    ttl = 4 * GENEROUS
    holder = locks.lock(key, ttl=ttl, fair=fair).acquire()
    # Ctrl-C arrives while the main thread waits (its signal handler runs in the wait loop).
    # interrupt_main() does nothing where SIGINT is ignored, as Python leaves it when started
    # with SIGINT ignored (a background job of a non-interactive shell): the test installs the
    # handler it relies on.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.3, lambda: __import__("_thread").interrupt_main())
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            locks.lock(key, ttl=ttl, wait=4 * GENEROUS, fair=fair).acquire()
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    holder.release()
    # The interrupted waiter's queue entry is removed in the background (a lock handed over
    # to it meanwhile is released with it). Once that has settled, nobody is queued and one
    # attempt takes the lock.
    assert leasehold.cleanups_settled(GENEROUS)
    assert [e["waiters"] or 0 for e in locks.list(key + "*") if e["key"] == key] in ([], [0])
    locks.lock(key, ttl=ttl, fair=fair).acquire().release()


def test_semaphore_counts_permits(locks: leasehold.Locker, key: str) -> None:
    with locks.semaphore(key, 2, ttl=10) as a, locks.semaphore(key, 2, ttl=10) as b:
        assert a.held and b.held
        with pytest.raises(leasehold.NotAcquired):
            locks.semaphore(key, 2, ttl=10).acquire()
    locks.semaphore(key, 2, ttl=10).acquire().release()


def test_read_write_lock(locks: leasehold.Locker, key: str) -> None:
    with locks.read_lock(key, ttl=10), locks.read_lock(key, ttl=10):
        with pytest.raises(leasehold.NotAcquired):
            locks.write_lock(key, ttl=10).acquire()
    with locks.write_lock(key, ttl=10, fencing=True) as w:
        assert w.fence is not None
        with pytest.raises(leasehold.NotAcquired):
            locks.read_lock(key, ttl=10).acquire()


def test_election_has_one_leader(locks: leasehold.Locker, key: str) -> None:
    assert locks.leader(key) is None
    with locks.campaign(key, "py-a", ttl=2) as term:
        leader = locks.leader(key)
        assert leader is not None and leader.id == "py-a"
        assert term.fence is not None and leader.term == term.fence
        with pytest.raises(leasehold.NotAcquired):
            locks.campaign(key, "py-b", ttl=2, wait=0).acquire()


def test_multi_lock_takes_all_or_none(locks: leasehold.Locker, key: str) -> None:
    keys = [f"{{{key}}}:a", f"{{{key}}}:b"]
    if locks.backend != "redis":
        with pytest.raises(leasehold.Unsupported):
            locks.multi_lock(keys, ttl=10).acquire()
        return
    with locks.lock(keys[1], ttl=10):
        with pytest.raises(leasehold.NotAcquired):
            locks.multi_lock(keys, ttl=10).acquire()
        # None taken: the first key is still free.
        locks.lock(keys[0], ttl=10).acquire().release()
    with locks.multi_lock(keys, ttl=10):
        with pytest.raises(leasehold.NotAcquired):
            locks.lock(keys[0], ttl=10).acquire()


def test_wrong_types_and_values_are_refused() -> None:
    locks = locker_for("memory")
    with pytest.raises(TypeError):
        locks.lock("k", ttl="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        locks.lock("k", ttl=True)
    with pytest.raises(TypeError):
        locks.lock(5, ttl=1)  # type: ignore[arg-type]
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(leasehold.InvalidArgument) as e:
            locks.lock("k", ttl=5, wait=bad)
        assert isinstance(e.value, ValueError)
    with pytest.raises(leasehold.InvalidArgument):
        locks.lock("k", ttl=0.001)  # below the minimum TTL
    with pytest.raises(leasehold.InvalidArgument):
        locks.lock("k", ttl=5, on_loss="ignore")
    with pytest.raises(leasehold.InvalidArgument):
        locks.semaphore("k", 0)
    with pytest.raises(leasehold.InvalidArgument):
        locks.lock("", ttl=5).acquire()
    with pytest.raises(leasehold.InvalidArgument):
        leasehold.Locker("nosuch://x")
    with pytest.raises(TypeError):
        leasehold.Locker(None)  # type: ignore[arg-type]


def test_awaitables_need_a_running_loop() -> None:
    request = locker_for("memory").lock("no-loop", ttl=5)
    with pytest.raises(RuntimeError):
        request._native.acquire_async()  # no running event loop
    # A lease taken in a loop that is closed since: its awaitables need a running loop, and
    # the blocking calls still work.
    lease = asyncio.run(request.acquire_async())
    with pytest.raises(RuntimeError):
        lease.release_async()
    assert lease.held
    lease.release()
    assert not lease.held


def test_a_loss_after_the_loop_closed_is_ignored_quietly(locks: leasehold.Locker, key: str) -> None:
    held: List[leasehold.Lease] = []

    async def main() -> None:
        request = locks.lock(key, ttl=1, auto_extend=True)
        lease = await request.__aenter__()  # a block whose end never runs: the loop closes
        held.append(lease)

    asyncio.run(main())
    locks.force_release(key, "test: loss after the loop closed")
    until(lambda: held[0].lost, "the loss noticed")  # the watch's cancel finds no loop: no error


def test_fence_gate_refuses_older_numbers() -> None:
    gate = leasehold.FenceGate()
    gate.admit(3)
    gate.admit(3)
    with pytest.raises(leasehold.StaleFence):
        gate.admit(2)
    assert gate.highest == 3
    with pytest.raises(TypeError):
        gate.admit(None)


def test_list_shows_the_holder_and_its_owner(locks: leasehold.Locker, key: str) -> None:
    with locks.lock(key, ttl=30, fencing=True, owner_label="py list test"):
        entries = [e for e in locks.list(key + "*") if e["key"] == key]
        assert len(entries) == 1, entries
        (holder,) = entries[0]["holders"]
        assert holder["holder"].startswith("#") and "py list test" in holder["owner"]
    assert [e for e in locks.list(key + "*") if e["key"] == key] == []


def test_a_lock_is_released_and_extended_by_its_token(locks: leasehold.Locker, key: str) -> None:
    lease = locks.lock(key, ttl=5).acquire()
    # inspect() shows the holder's token in full, as `leasehold inspect` does.
    assert locks.inspect(key)["holder"] == lease.token
    with pytest.raises(leasehold.NotHeld):
        locks.extend(key, "not-the-token", 60)
    locks.extend(key, lease.token, timedelta(seconds=60))
    ttl = locks.inspect(key)["ttl"]
    # Session locks on PostgreSQL show no TTL (the lock lives as long as its session).
    assert (ttl is None and locks.backend == "postgres") or ttl > 5, ttl
    with pytest.raises(leasehold.NotHeld):
        locks.release(key, "not-the-token")
    locks.release(key, lease.token)
    locks.lock(key, ttl=5).acquire().release()  # free again


def test_a_fair_lock_is_released_by_its_token_to_its_waiter(
    locks: leasehold.Locker, key: str
) -> None:
    lease = locks.lock(key, ttl=30, fair=True).acquire()
    taken: List[leasehold.Lease] = []
    waiter = threading.Thread(
        target=lambda: taken.append(locks.lock(key, ttl=30, fair=True, wait=GENEROUS).acquire())
    )
    waiter.start()
    # Released once the waiter is queued, so that the release hands the lock over.
    until(
        lambda: [e["waiters"] for e in locks.list(key + "*") if e["key"] == key] == [1],
        "the waiter in the queue",
    )
    locks.release(key, lease.token, fair=True)
    waiter.join()
    (next_holder,) = taken
    assert next_holder.held
    next_holder.release()


def test_fair_threads_take_turns_and_every_release_finds_its_lock(
    locks: leasehold.Locker, key: str
) -> None:
    # Threads of one client contend for a fair lock with no hold at all, so that a new holder
    # releases at once: on Redis a release hands the lock to the next thread early (before its
    # script has run, from the releasing thread's own socket), and the new holder's release
    # must still follow that script. Never two holders; every release finds its lock.
    threads, rounds = 4, 20
    guard = threading.Lock()
    inside = [0]
    errors: List[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(rounds):
                with locks.lock(key, ttl=10, fair=True, wait=GENEROUS):
                    with guard:
                        inside[0] += 1
                        assert inside[0] == 1, "two holders at once"
                    with guard:
                        inside[0] -= 1
        except BaseException as e:  # reported below, with the thread's own traceback
            errors.append(e)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    locks.lock(key, ttl=5).acquire().release()  # free at the end


def test_history_records_acquire_and_release(backend: str, key: str) -> None:
    from conftest import server_url

    locks = leasehold.Locker(server_url(backend), history=True)
    with locks.lock(key, ttl=30, fencing=True) as lease:
        pass
    kinds = [(e["kind"], e["fencing"]) for e in locks.history(key, 10)]
    assert kinds == [("released", lease.fence), ("acquired", lease.fence)], kinds


def test_watch_leader_follows_terms(locks: leasehold.Locker, key: str) -> None:
    watch = locks.watch_leader(key, every=0.2)
    with locks.campaign(key, "py-a", ttl=2) as a:
        seen = watch.changed()
        assert seen is not None and (seen.id, seen.term) == ("py-a", a.fence), seen
    assert watch.changed() is None  # resigned: nobody leads
    with locks.campaign(key, "py-b", ttl=2) as b:
        seen = next(iter(watch))
        assert seen is not None and seen.id == "py-b" and b.fence is not None
        assert a.fence is not None and seen.term == b.fence > a.fence
    current = watch.current  # read once: the watcher may see the resignation between reads
    assert current is None or current.id == "py-b"


def test_raise_fencing_counter(locks: leasehold.Locker, key: str) -> None:
    if locks.backend == "etcd":
        with pytest.raises(leasehold.Unsupported):
            locks.raise_fencing_counter(key, 1000)
        return
    assert locks.raise_fencing_counter(key, 1000) >= 1000
    with locks.lock(key, ttl=10, fencing=True) as lease:
        assert lease.fence is not None and lease.fence > 1000


def test_a_lease_inherited_through_fork_refuses_in_the_child(
    locks: leasehold.Locker, key: str
) -> None:
    # The child's copy of a held lease must not let it believe it holds the parent's lock (with
    # the parent's fence number and token, which a fenced resource would accept from both).
    with locks.lock(key, ttl=60, fencing=True) as lease:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report every getter that answered instead of refusing
            try:
                os.close(read)
                answered: List[str] = []
                for name in ("held", "lost", "loss_reason", "fence", "token", "remaining"):
                    try:
                        answered.append(f"{name}={getattr(lease, name)!r}")
                    except leasehold.ForkedProcess:
                        pass
                    except BaseException as e:
                        answered.append(f"{name} raised {type(e).__name__}")
                os.write(write, ", ".join(answered).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            report = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert report == "", f"the child read the parent's lease: {report}"
        # The parent's lease is untouched.
        assert lease.held and not lease.lost and lease.fence is not None


def test_release_while_an_extend_is_in_flight_ends_the_lease(
    locks: leasehold.Locker, key: str
) -> None:
    # Another thread extends in a loop (each extend is in flight for a round trip, GIL
    # released): the release waits for the extend in flight instead of being refused, and
    # the key is free right after it.
    for _ in range(20):
        lease = locks.lock(key, ttl=30).acquire()
        extends = [0]
        stop = threading.Event()

        def extend_until_released() -> None:
            while not stop.is_set():
                try:
                    lease.extend(30)
                except leasehold.NotHeld:
                    return
                extends[0] += 1

        extender = threading.Thread(target=extend_until_released, daemon=True)
        extender.start()
        try:
            until(lambda: extends[0] > 0, "an extend done")
            lease.release()
        finally:
            stop.set()
            extender.join()
        assert not lease.held and not lease.lost
        locks.lock(key, ttl=30).acquire().release()  # free at once (no wait)


def test_lost_tells_a_validity_that_ran_out(locks: leasehold.Locker, key: str) -> None:
    # No auto-extension and no watch (acquire(), not a with block): nothing but the reading
    # itself notices the validity ran out.
    lease = locks.lock(key, ttl=1).acquire()
    assert lease.held and not lease.lost and lease.loss_reason is None
    until(lambda: lease.remaining == 0.0, "the validity ran out")
    assert lease.lost and lease.loss_reason == "expired" and not lease.held
    try:
        lease.release()
    except (leasehold.NotHeld, leasehold.ConnectionFailed):
        # The key may or may not have expired on the server yet (a PostgreSQL session lock's
        # server ends the silent session, so its connection may be gone).
        pass
    assert lease.lost and lease.loss_reason == "expired"  # still lost after the release
