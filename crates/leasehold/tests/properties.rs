//! Property tests (proptest): generated inputs over the option builders, keys and their slots,
//! and the URL forms, checked against what the docs promise; the key properties also against
//! real servers. Shrinking reports the smallest failing input.
//!
//! Case counts are modest so that the whole binary stays within seconds on 2 cores;
//! `PROPTEST_CASES=N` overrides every one of them. Failures are not persisted (no files
//! written into the source tree): a failure prints its minimal input, which then becomes a
//! named regression test.

mod properties {
    pub mod keys;
    pub mod options;
    pub mod server;
    pub mod urls;
}

pub mod config {
    use proptest::test_runner::Config;

    /// `default_cases` cases (or `$PROPTEST_CASES`), nothing persisted.
    pub fn cases(default_cases: u32) -> Config {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(default_cases);
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        }
    }
}
