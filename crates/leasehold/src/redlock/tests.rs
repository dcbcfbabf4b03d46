use std::time::Duration;

use super::nodes::node_label;
use super::{RedlockOptions, node_urls};

#[test]
fn redlock_urls_name_every_node_with_the_same_credentials() {
    assert_eq!(
        node_urls("redlock://u:p@127.0.0.1:7000,[::1]:7001,h/2").unwrap(),
        [
            "redis://u:p@127.0.0.1:7000/2",
            "redis://u:p@[::1]:7001/2",
            "redis://u:p@h:6379/2"
        ]
    );
    assert_eq!(
        node_urls("rediss-redlock://a:1").unwrap(),
        ["rediss://a:1/0"]
    );
    assert!(node_urls("redlock://").is_err());
    assert!(node_urls("redis://a:1").is_err());
}

#[test]
fn labels_hide_credentials() {
    assert_eq!(node_label("redis://:pw@127.0.0.1:7000/0"), "127.0.0.1:7000");
    assert_eq!(node_label("valkey://user:pw@[::1]:7001"), "[::1]:7001");
    assert_eq!(node_label("redis://h:1/"), "h:1");
}

#[test]
fn drift_is_one_percent_plus_two_ms() {
    let o = RedlockOptions::new();
    assert_eq!(
        o.drift_for(Duration::from_secs(10)),
        Duration::from_millis(102)
    );
}
