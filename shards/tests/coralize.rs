//! `coral coralize`: the Coralized form of a URL (NSDI 2004 §2.1), as the proxy parses it.

mod common;

use std::process::Command;

use common::CORAL;

fn coralize(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(CORAL)
        .arg("coralize")
        .args(args)
        .output()
        .expect("run coral");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn nsdi04_2_1_coralize_prints_the_coralized_url() {
    let (ok, out, _) = coralize(&["http://www.x.com/y.jpg"]);
    assert!(ok);
    assert_eq!(out, "http://www.x.com.coral.test:8090/y.jpg");
    let (ok, out, _) = coralize(&[
        "HTTP://Example.com:8080/a?b#frag",
        "--alias",
        "nyud.net",
        "--port",
        "80",
    ]);
    assert!(ok);
    assert_eq!(out, "http://example.com.8080.nyud.net/a?b");
    // What it prints names the same origin back.
    let zones = coral::proxy::names::Zones {
        zone: "nyucd.net".into(),
        alias: Some("nyud.net".into()),
    };
    let host = out.trim_start_matches("http://").split('/').next().unwrap();
    let origin = coral::proxy::names::origin_of_host(host, &zones).unwrap();
    assert_eq!((origin.host.as_str(), origin.port), ("example.com", 8080));
}

#[test]
fn coralize_refuses_what_is_not_an_http_url() {
    for bad in [
        "https://x.com/",
        "x.com",
        "http://u@x.com/",
        "http://x.com:99999/",
    ] {
        let (ok, out, err) = coralize(&[bad]);
        assert!(!ok, "{bad} accepted: {out}");
        assert!(err.contains("coral:"), "{err}");
    }
    let (ok, _, err) = coralize(&["http://x.com/", "--alias", "bad_label.test"]);
    assert!(!ok);
    assert!(err.contains("alias"), "{err}");
}
