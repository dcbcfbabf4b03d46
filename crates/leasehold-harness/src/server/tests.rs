use super::*;

#[test]
fn server_is_send_and_sync() {
    fn is<T: Send + Sync>() {}
    is::<Server>();
}

#[test]
fn quotes_config_arguments() {
    assert_eq!(conf_quote("plain"), r#""plain""#);
    assert_eq!(conf_quote("a b\"c\\d\n\u{1}"), r#""a b\"c\\d\n\x01""#);
    assert_eq!(conf_quote("ü"), r#""\xc3\xbc""#);
}

#[test]
fn options_builder() {
    let o = ServerOptions::new()
        .aof(true)
        .requirepass("pw")
        .arg("--a")
        .args(["b", "c"]);
    assert!(o.is_aof());
    assert_eq!(o.password(), Some("pw"));
    assert_eq!(o.args, ["--a", "b", "c"]);
}
