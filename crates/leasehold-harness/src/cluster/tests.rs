use super::view::{Role, View};
use super::wait::normalize_slots;
use super::*;
use crate::ServerOptions;

const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1426238316232 0 5 disconnected
";

#[test]
fn parses_cluster_nodes() {
    let view = View::parse(0, NODES).unwrap();
    assert_eq!(view.lines.len(), 4);
    let me = view.myself().unwrap();
    assert_eq!(me.id, "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca");
    assert!(me.is_master());
    assert_eq!(me.slots, [(0, 5460)]);
    assert_eq!(view.lines[2].slots, [(5461, 10922), (16383, 16383)]);
    assert_eq!(
        view.lines[0].role(),
        Role::ReplicaOf("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca".into())
    );
    assert!(view.lines[3].has_flag("fail"));
    assert!(View::parse(0, "abc def\n").is_err());
    assert!(View::parse(0, "a b master - 0 0 1 connected 5-3\n").is_err());
    assert!(View::parse(0, "a b master - 0 0 1 connected 16384\n").is_err());
}

/// A takeover's claim (the promoted replica, with its config epoch) loses on a view that
/// has a slot on another node of an epoch at least as high: a tie is not enough.
#[test]
fn finds_the_views_a_takeover_cannot_win() {
    let view = View::parse(0, NODES).unwrap();
    assert_eq!(
        view.lines
            .iter()
            .map(|l| l.config_epoch)
            .collect::<Vec<_>>(),
        [4, 1, 2, 5]
    );
    let promoted = "07c37dfeb235213a872192d90877d0cd55635b91";
    let old = "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca";
    let outranked = |slots: &[u16], epoch| {
        view.outranks(slots, promoted, epoch)
            .map(|(slot, line)| (slot, line.id.clone()))
    };
    assert_eq!(outranked(&[0, 100], 1), Some((0, old.to_owned())));
    assert_eq!(outranked(&[0, 100], 2), None);
    let other = "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f";
    assert_eq!(outranked(&[7, 16383], 2), Some((16383, other.to_owned())));
    assert_eq!(outranked(&[7, 16383], 3), None);
    // Its own slots never outrank a claimant, nor do slots it does not claim.
    assert_eq!(view.outranks(&[0], old, 0).map(|(s, _)| s), None);
    assert_eq!(outranked(&[], 0), None);
    assert!(View::parse(0, "a b master - 0 0 x connected\n").is_err());
}

#[test]
fn options_builder() {
    let o = ClusterOptions::new()
        .masters(5)
        .replicas_per_master(2)
        .node_timeout(Duration::from_millis(1500))
        .server(ServerOptions::new().requirepass("pw"));
    assert_eq!(o.master_count(), 5);
    assert_eq!(o.replica_count(), 2);
    assert_eq!(o.node_timeout_value(), Duration::from_millis(1500));
    assert_eq!(o.server_options().password(), Some("pw"));
    assert_eq!(o.node_timeout_ms(), 1500);
    assert_eq!(
        ClusterOptions::new()
            .node_timeout(Duration::ZERO)
            .node_timeout_ms(),
        1
    );
}

#[test]
fn normalizes_cluster_slots() {
    let node = |port: i64| {
        RespValue::Array(Some(vec![
            RespValue::Bulk(Some(b"127.0.0.1".to_vec())),
            RespValue::Integer(port),
        ]))
    };
    let range = |a, b, nodes: Vec<RespValue>| {
        let mut v = vec![RespValue::Integer(a), RespValue::Integer(b)];
        v.extend(nodes);
        RespValue::Array(Some(v))
    };
    let one = RespValue::Array(Some(vec![
        range(100, 200, vec![node(2), node(4), node(3)]),
        range(0, 99, vec![node(1)]),
    ]));
    let two = RespValue::Array(Some(vec![
        range(0, 99, vec![node(1)]),
        range(100, 200, vec![node(2), node(3), node(4)]),
    ]));
    assert_eq!(
        normalize_slots(&one).unwrap(),
        normalize_slots(&two).unwrap()
    );
    assert!(normalize_slots(&RespValue::Integer(1)).is_err());
    assert!(normalize_slots(&RespValue::Error("ERR".into())).is_err());
}
