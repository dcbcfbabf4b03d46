use super::start::ping_period_ms;
use super::*;
use crate::ServerOptions;

#[test]
fn ping_period() {
    assert_eq!(ping_period_ms(1000), 250);
    assert_eq!(ping_period_ms(30_000), 1000);
    assert_eq!(ping_period_ms(1), 50);
}

#[test]
fn options_validate() {
    assert!(SentinelOptions::new().validate().is_ok());
    assert!(SentinelOptions::new().sentinels(0).validate().is_err());
    assert!(SentinelOptions::new().quorum(0).validate().is_err());
    assert!(SentinelOptions::new().quorum(4).validate().is_err());
    assert!(SentinelOptions::new().master_name("").validate().is_err());
    assert!(
        SentinelOptions::new()
            .master_name("a b")
            .validate()
            .is_err()
    );
    assert!(
        SentinelOptions::new()
            .master_name("my-master.1_x")
            .validate()
            .is_ok()
    );
}

#[test]
fn sentinel_config_lines() {
    let o = SentinelOptions::new()
        .master_name("m")
        .quorum(1)
        .down_after(Duration::from_millis(1500))
        .failover_timeout(Duration::from_secs(3))
        .server(ServerOptions::new().requirepass("p\"w"));
    assert_eq!(
        o.sentinel_config(7000),
        "sentinel monitor m 127.0.0.1 7000 1\n\
         sentinel down-after-milliseconds m 1500\n\
         sentinel failover-timeout m 3000\n\
         sentinel parallel-syncs m 1\n\
         sentinel auth-pass m \"p\\\"w\"\n"
    );
}
