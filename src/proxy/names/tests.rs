use super::*;

fn zones() -> Zones {
    Zones {
        zone: "coralcdn.test".into(),
        alias: Some("coral.test".into()),
    }
}

fn origin(host: &str, port: u16) -> Origin {
    Origin {
        host: host.into(),
        port,
    }
}

#[test]
fn nsdi04_2_1_coralized_host_names_its_origin() {
    let z = zones();
    assert_eq!(
        origin_of_host("www.x.com.coral.test", &z),
        Ok(origin("www.x.com", 80))
    );
    assert_eq!(
        origin_of_host("www.x.com.coralcdn.test", &z),
        Ok(origin("www.x.com", 80))
    );
    assert_eq!(
        origin_of_host("www.x.com.http.L2.L1.L0.coralcdn.test", &z),
        Ok(origin("www.x.com", 80))
    );
    // The Host field's own port is the proxy's, not the origin's.
    assert_eq!(
        origin_of_host("www.x.com.coral.test:8090", &z),
        Ok(origin("www.x.com", 80))
    );
    // Case and a trailing dot do not matter.
    assert_eq!(
        origin_of_host("WWW.X.Com.Coral.Test.:8090", &z),
        Ok(origin("www.x.com", 80))
    );
}

#[test]
fn nsdi04_2_1_origin_port_travels_as_a_label() {
    let z = zones();
    assert_eq!(
        origin_of_host("example.com.8080.coral.test", &z),
        Ok(origin("example.com", 8080))
    );
    assert_eq!(
        origin_of_host("example.com.8080.coral.test:8090", &z),
        Ok(origin("example.com", 8080))
    );
    assert_eq!(
        origin_of_host("127.0.0.1.coral.test", &z),
        Ok(origin("127.0.0.1", 80))
    );
    assert_eq!(
        origin_of_host("127.0.0.1.8080.coral.test", &z),
        Ok(origin("127.0.0.1", 8080))
    );
    assert_eq!(
        origin_of_host("x.com.0.coral.test", &z),
        Err(NameError::BadPort)
    );
    assert_eq!(
        origin_of_host("x.com.65536.coral.test", &z),
        Err(NameError::BadPort)
    );
    assert_eq!(
        origin_of_host("x.com.123456.coral.test", &z),
        Err(NameError::BadPort)
    );
    // A numeric top label that is neither a port nor part of an IPv4 address.
    assert!(origin_of_host("127.0.0.coral.test", &z).is_err());
    assert_eq!(origin_of_host("8080.coral.test", &z), Err(NameError::Empty));
}

#[test]
fn nsdi04_2_1_longest_suffix_wins() {
    // With an alias under the zone, the longer suffix is stripped.
    let z = Zones {
        zone: "test".into(),
        alias: Some("coral.test".into()),
    };
    assert_eq!(
        origin_of_host("x.com.coral.test", &z),
        Ok(origin("x.com", 80))
    );
    assert_eq!(
        origin_of_host("x.com.http.l2.l1.l0.test", &z),
        Ok(origin("x.com", 80))
    );
}

#[test]
fn names_outside_the_zone_empty_or_malformed_are_refused() {
    let z = zones();
    assert_eq!(
        origin_of_host("www.x.com", &z),
        Err(NameError::NotCoralized)
    );
    assert_eq!(
        origin_of_host("xcoral.test", &z),
        Err(NameError::NotCoralized)
    );
    assert_eq!(origin_of_host("coral.test", &z), Err(NameError::Empty));
    assert_eq!(origin_of_host("coral.test:8090", &z), Err(NameError::Empty));
    assert_eq!(origin_of_host(".coral.test", &z), Err(NameError::Empty));
    assert!(matches!(
        origin_of_host("a..b.coral.test", &z),
        Err(NameError::Malformed(_))
    ));
    assert!(matches!(
        origin_of_host("a b.coral.test", &z),
        Err(NameError::Malformed(_))
    ));
    assert!(matches!(
        origin_of_host("a:b:c", &z),
        Err(NameError::Malformed(_))
    ));
    assert!(origin_of_host("[::1]", &z).is_err());
    let long = format!("{}.x.coral.test", "a".repeat(64));
    assert!(matches!(
        origin_of_host(&long, &z),
        Err(NameError::Malformed(_))
    ));
}

#[test]
fn rfc8586_an_origin_under_our_own_zone_is_a_loop() {
    let z = zones();
    assert_eq!(
        origin_of_host("x.com.coral.test.coral.test", &z),
        Err(NameError::Loop)
    );
    assert_eq!(
        origin_of_host("x.com.coralcdn.test.coral.test", &z),
        Err(NameError::Loop)
    );
    assert_eq!(
        origin_of_host("coral.test.coral.test", &z),
        Err(NameError::Loop)
    );
    assert_eq!(
        origin_of_host("x.coral.test.8080.coralcdn.test", &z),
        Err(NameError::Loop)
    );
}

#[test]
fn canonical_url_has_explicit_port_and_no_fragment() {
    let o = origin("www.x.com", 80);
    assert_eq!(
        canonical_url(&o, "/y.jpg").unwrap(),
        "http://www.x.com:80/y.jpg"
    );
    assert_eq!(
        canonical_url(&o, "/a?b=c#frag").unwrap(),
        "http://www.x.com:80/a?b=c"
    );
    assert_eq!(
        canonical_url(&origin("x", 8080), "/").unwrap(),
        "http://x:8080/"
    );
    assert_eq!(canonical_url(&o, "http://x/"), Err(NameError::BadTarget));
    assert_eq!(canonical_url(&o, "*"), Err(NameError::BadTarget));
}

#[test]
fn nsdi04_3_2_cache_key_is_sha1_of_the_canonical_url() {
    let url = "http://www.x.com:80/y.jpg";
    assert_eq!(cache_key(url), Id::hash(url.as_bytes()));
    // The proxy's key and the CLI's `url:` key agree whatever form the user typed.
    let via_proxy = cache_key(
        &canonical_url(
            &origin_of_host("WWW.X.COM.coral.test:8090", &zones()).unwrap(),
            "/y.jpg#top",
        )
        .unwrap(),
    );
    for typed in [
        "http://www.x.com/y.jpg",
        "HTTP://WWW.X.COM./y.jpg",
        "http://www.x.com:80/y.jpg#frag",
    ] {
        assert_eq!(
            cache_key(&canonicalize(typed).unwrap()),
            via_proxy,
            "{typed}"
        );
    }
}

#[test]
fn canonicalize_is_idempotent_and_strict() {
    for u in [
        "http://x.com",
        "http://x.com/",
        "http://X.com:8080/a?b",
        "http://x.com?q",
    ] {
        let c = canonicalize(u).unwrap();
        assert_eq!(canonicalize(&c).unwrap(), c);
    }
    assert_eq!(canonicalize("http://x.com").unwrap(), "http://x.com:80/");
    assert_eq!(
        canonicalize("http://x.com?q").unwrap(),
        "http://x.com:80/?q"
    );
    assert_eq!(canonicalize("https://x.com/"), Err(NameError::NotHttp));
    assert_eq!(canonicalize("x.com/"), Err(NameError::NotHttp));
    assert!(canonicalize("http://user@x.com/").is_err());
    assert!(canonicalize("http://x.com:0/").is_err());
    assert!(canonicalize("http:///a").is_err());
    assert!(canonicalize("http://x.com/a b").is_err());
}

#[test]
fn nsdi04_2_1_coralize_round_trips_through_origin_of_host() {
    assert_eq!(
        coralize("http://www.x.com/y.jpg", "coral.test", 8090).unwrap(),
        "http://www.x.com.coral.test:8090/y.jpg"
    );
    assert_eq!(
        coralize("http://Example.com:8080/a?b#c", "coral.test", 80).unwrap(),
        "http://example.com.8080.coral.test/a?b"
    );
    assert_eq!(coralized_host(&origin("x.com", 81), "z"), "x.com.81.z");
    for (host, port) in [
        ("www.x.com", 80),
        ("x.com", 8080),
        ("10.0.0.1", 80),
        ("10.0.0.1", 81),
    ] {
        let o = origin(host, port);
        let c = coralized_host(&o, "coral.test");
        assert_eq!(origin_of_host(&c, &zones()), Ok(o.clone()), "{c}");
        assert_eq!(origin_of_host(&format!("{c}:8090"), &zones()), Ok(o), "{c}");
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn arb_origin() -> impl Strategy<Value = Origin> {
        let label = "[a-z0-9_-]{1,12}";
        let name = (prop::collection::vec(label, 0..4), "[a-z][a-z0-9-]{0,8}").prop_map(
            |(mut ls, top)| {
                ls.push(top);
                ls.join(".")
            },
        );
        let ip = any::<[u8; 4]>().prop_map(|o| std::net::Ipv4Addr::from(o).to_string());
        (
            prop_oneof![name, ip],
            prop_oneof![Just(80u16), 1u16..=65535],
        )
            .prop_map(|(host, port)| Origin { host, port })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn prop_coralized_host_names_its_origin(o in arb_origin(), proxy_port in any::<u16>()) {
            for suffix in ["coral.test", "coralcdn.test", "http.l2.l1.l0.coralcdn.test"] {
                let c = coralized_host(&o, suffix);
                prop_assert_eq!(origin_of_host(&c, &zones()), Ok(o.clone()));
                let upper = format!("{}.:{proxy_port}", c.to_ascii_uppercase());
                prop_assert_eq!(origin_of_host(&upper, &zones()), Ok(o.clone()));
            }
        }

        #[test]
        fn prop_names_never_panic_and_canonicalize_is_idempotent(s in "\\PC{0,80}") {
            let _ = origin_of_host(&s, &zones());
            let _ = coralize(&s, "coral.test", 8090);
            let url = format!("http://{s}");
            if let Ok(c) = canonicalize(&url) {
                prop_assert_eq!(canonicalize(&c), Ok(c.clone()));
                prop_assert!(c.starts_with("http://"));
                prop_assert!(!c.contains('#'));
            }
        }
    }
}
