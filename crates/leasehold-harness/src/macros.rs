//! The `server_test!` macro.

/// Declares a test that runs once per server of the matrix.
///
/// Expands to a module named after the test with one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` function per flavor
/// (`redis7`, `redis8`, `valkey9`), so `cargo test` reports e.g.
/// `test release_is_token_checked::redis8 ... ok`. Each function looks up its binary with
/// [`binary_for_test`](crate::binary_for_test) — skipping (returning early) if none is
/// installed, or panicking if the full matrix is required — and runs the body with the
/// [`ServerBinary`](crate::ServerBinary) bound to the given name.
///
/// An optional `[flavor, ...]` list restricts the flavors; attributes (e.g. `#[ignore]`)
/// before the list or `async fn` are copied onto every generated test. The module does
/// `use super::*;`, so the body sees the test file's imports.
///
/// The crate using this macro needs `tokio` with the `macros` and `rt-multi-thread`
/// features among its (dev-)dependencies.
///
/// ```no_run
/// use leasehold_harness::{Server, ServerOptions};
///
/// leasehold_harness::server_test!(async fn answers_ping(bin) {
///     let server = Server::start(&bin, &ServerOptions::new()).unwrap();
///     assert!(server.command(&["PING"]).unwrap().as_str() == Some("PONG"));
/// });
///
/// leasehold_harness::server_test!([redis8, valkey9] async fn native_conditional_set(bin) {
///     let server = Server::start(&bin, &ServerOptions::new()).unwrap();
///     let reply = server.command(&["SET", "k", "v", "IFEQ", "x"]).unwrap();
///     assert!(reply.is_nil());
/// });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! server_test {
    (
        $(#[$meta:meta])*
        [$($flavor:ident),+ $(,)?]
        $(#[$meta2:meta])*
        async fn $name:ident ($bin:ident) $body:block
    ) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::__server_test_cases! {
                [$(#[$meta])* $(#[$meta2])*] $bin $body ; $($flavor),+
            }
        }
    };
    (
        $(#[$meta:meta])*
        async fn $name:ident ($bin:ident) $body:block
    ) => {
        $crate::server_test! {
            $(#[$meta])* [redis7, redis8, valkey9] async fn $name ($bin) $body
        }
    };
}

/// Implementation detail of [`server_test!`]: one test per flavor in the list.
#[doc(hidden)]
#[macro_export]
macro_rules! __server_test_cases {
    ([$(#[$meta:meta])*] $bin:ident $body:block ;) => {};
    ([$(#[$meta:meta])*] $bin:ident $body:block ; $flavor:ident $(, $rest:ident)*) => {
        $crate::__server_test_case! { $flavor [$(#[$meta])*] $bin $body }
        $crate::__server_test_cases! { [$(#[$meta])*] $bin $body ; $($rest),* }
    };
}

/// Implementation detail of [`server_test!`]: maps a flavor name to its variant.
#[doc(hidden)]
#[macro_export]
macro_rules! __server_test_case {
    (redis7 $($rest:tt)*) => { $crate::__server_test_fn! { redis7 Redis7 $($rest)* } };
    (redis8 $($rest:tt)*) => { $crate::__server_test_fn! { redis8 Redis8 $($rest)* } };
    (valkey9 $($rest:tt)*) => { $crate::__server_test_fn! { valkey9 Valkey9 $($rest)* } };
    ($other:ident $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "server_test!: unknown flavor `",
            ::core::stringify!($other),
            "` (expected redis7, redis8 or valkey9)"
        ));
    };
}

/// Implementation detail of [`server_test!`]: one generated test function.
#[doc(hidden)]
#[macro_export]
macro_rules! __server_test_fn {
    ($fn_name:ident $variant:ident [$(#[$meta:meta])*] $bin:ident $body:block) => {
        $(#[$meta])*
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $fn_name() {
            let ::core::option::Option::Some($bin) =
                $crate::binary_for_test($crate::Flavor::$variant)
            else {
                return;
            };
            $body
        }
    };
}
