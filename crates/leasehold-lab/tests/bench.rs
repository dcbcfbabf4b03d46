//! `leasehold-lab bench`'s worker process.

use crate::support;

use leasehold_harness::{Server, ServerOptions, server_test};
use support::leasehold;

// bench W8's client process: it takes and releases locks on the keys it was given and reports
// what it did as one JSON line (the coordinator merges 200 of them). Every key it took is
// released again, and its wait histogram counts every acquisition.
server_test!(async fn bench_worker_reports_its_acquisitions(bin) {
    let server = Server::start(&bin, &ServerOptions::new()).unwrap();
    let report = leasehold(&["bench-worker", "--lock-url", &server.url(), "--keys", "3", "--secs", "0.5", "--hold-us", "0"])
        .expect(0)
        .json();
    let acquisitions = report["acquisitions"].as_u64().expect("acquisitions");
    assert!(acquisitions > 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let counted: u64 = report["waits_us"].as_array().expect("waits").iter().map(|p| p[1].as_u64().unwrap()).sum();
    assert_eq!(counted, acquisitions, "{report}");
    for k in ["w8:0", "w8:1", "w8:2"] {
        assert!(server.command(&["EXISTS", k]).unwrap().as_integer() == Some(0), "{k} left held");
    }
});
