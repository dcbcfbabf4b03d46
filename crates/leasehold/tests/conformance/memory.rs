//! The memory subject (`memory://NAME`): a namespace of this process's table, tampered with
//! through the store's hidden test hooks (`leasehold::internal::memory`).

use super::{Form, Subject, conforms};

use leasehold::internal::memory as hooks;

pub(crate) struct Memory {
    /// The namespace: the test's own, so no other test shares its locks.
    pub(crate) name: String,
}

impl Subject for Memory {
    fn name(&self) -> String {
        format!("memory://{}", self.name)
    }

    fn url(&self) -> String {
        format!("memory://{}", self.name)
    }

    fn form(&self) -> Form {
        Form::counter("memory")
    }

    /// The holder cleared from the table (its fencing counter kept), as deleting a Redis key.
    async fn take_away(&self, key: &str) {
        assert!(
            hooks::take_away(&self.name, key),
            "{}: {key} had no holder to take away",
            self.name()
        );
    }

    /// The attempts of `key` that found it busy so far.
    async fn waiters_mark(&self, key: &str) -> Vec<u64> {
        vec![hooks::refusals(&self.name, key)]
    }

    /// An attempt refused since the mark (the waiter then sleeps until it is woken).
    async fn waiter_refused_since(&self, key: &str, mark: &[u64]) -> bool {
        hooks::refusals(&self.name, key) > mark[0]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    conforms(&Memory {
        name: "conformance".into(),
    })
    .await;
}
