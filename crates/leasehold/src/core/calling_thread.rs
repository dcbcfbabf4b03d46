//! [`blocking_call`]: a thread that blocks on a call anyway may do the call's round trips
//! itself.

use std::cell::Cell;

thread_local! {
    /// Set while this thread runs [`blocking_call`]'s closure.
    static BLOCKING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call` with the calling thread marked as one that blocks until the call is done, so a
/// backend may do the call's round trips on a socket this thread owns and reads itself.
///
/// For bindings with a synchronous API (the Python package's blocking calls): such a thread
/// polls the call's future itself (a multi-thread runtime's `Runtime::block_on`). Over the
/// shared multiplexed connection every round trip would then wake two threads: the request the
/// runtime thread that writes the socket, the reply the caller. On this thread's own socket
/// there is no hand-over at all (about 40 us a lock cycle on a 2-core machine:
/// `bench/results/issue32-target6-python.md`).
///
/// Only commands sent while this thread polls them take the thread's socket; tasks on the
/// runtime's threads (auto-extension, the cleanup of an abandoned attempt, waiters'
/// subscriptions) keep the shared connection, so a lease is renewed while its thread is busy
/// elsewhere. Today only a standalone Redis or Valkey client opened by URL does this (see
/// `RedisClient::connect`); every other client ignores the mark. `call` should poll nothing but
/// the call's own future (not a current-thread runtime's `block_on`, which also runs the
/// runtime's other tasks on this thread).
///
/// A round trip on the thread's socket blocks the thread until its reply or the response
/// timeout (5 s by default): a signal handler waits that long at most. A socket whose round trip
/// failed (an I/O error, a timeout) is closed, never read again: a late reply could otherwise
/// be taken for the next command's.
pub fn blocking_call<R>(call: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BLOCKING.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BLOCKING.with(|b| b.replace(true)));
    call()
}

/// Whether this thread is inside [`blocking_call`].
pub(crate) fn in_blocking_call() -> bool {
    BLOCKING.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_holds_inside_the_call_only_and_nests() {
        assert!(!in_blocking_call());
        blocking_call(|| {
            assert!(in_blocking_call());
            blocking_call(|| assert!(in_blocking_call()));
            assert!(
                in_blocking_call(),
                "an inner call must not clear the outer mark"
            );
            let other = std::thread::spawn(in_blocking_call).join().unwrap();
            assert!(!other, "the mark is the calling thread's alone");
        });
        assert!(!in_blocking_call());
        let caught = std::panic::catch_unwind(|| blocking_call(|| panic!("inside")));
        assert!(caught.is_err());
        assert!(!in_blocking_call(), "a panic inside must clear the mark");
    }
}
