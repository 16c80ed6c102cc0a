use std::collections::BTreeMap;

use super::*;

#[test]
fn an_empty_auth_mode_is_guests_for_plaza_up_only() {
    let mut a = PlazaConfig::defaults().auth;
    assert_eq!(a.mode, "");
    let none = AuthModes::default();
    assert_eq!(a.modes(), Ok(none));
    assert_eq!(a.modes_for(false), Ok(none), "a cluster gateway");
    assert_eq!(
        a.modes_for(true),
        Ok(AuthModes {
            guest: true,
            ..none
        }),
        "plaza up"
    );
    a.mode = "jwt+wallet".into();
    let set = AuthModes {
        jwt: true,
        wallet: true,
        ..none
    };
    assert_eq!((a.modes_for(true), a.modes_for(false)), (Ok(set), Ok(set)));
    a.mode = "guest+root".into();
    assert!(a.modes_for(true).is_err());
}

#[test]
fn defaults_parse_validate_and_cover_every_key() {
    let cfg = PlazaConfig::defaults();
    cfg.validate().unwrap();
    // Every key of the schema is in the example file (deny_unknown_fields covers the
    // converse), so the documented file and the defaults are one and the same.
    let (loaded, prov) = load(None, Some(BTreeMap::new())).unwrap();
    assert_eq!(loaded, cfg);
    assert!(prov.values().all(|s| *s == Source::Default));
    let mut keys = Vec::new();
    flatten("", &toml::Value::try_from(&cfg).unwrap(), &mut keys);
    assert_eq!(keys.len(), prov.len());
}

#[test]
fn env_overrides_the_file_which_overrides_defaults() {
    let dir = std::env::temp_dir().join(format!("plaza-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plaza.toml");
    std::fs::write(&path, "[room]\ntick_hz = 60\nbroadcast_hz = 30\n").unwrap();
    let env = BTreeMap::from([(
        "PLAZA__GATEWAY__LISTEN".to_owned(),
        "127.0.0.1:7788".to_owned(),
    )]);
    let (cfg, prov) = load(Some(&path), Some(env)).unwrap();
    assert_eq!(cfg.gateway.listen, "127.0.0.1:7788".parse().unwrap());
    assert_eq!(cfg.room.tick_hz, 60);
    assert_eq!(prov["gateway.listen"], Source::Env);
    assert_eq!(prov["room.tick_hz"], Source::File);
    assert_eq!(prov["room.max_members"], Source::Default);
    let text = render(&cfg, &prov);
    assert!(text.contains("gateway.listen = \"127.0.0.1:7788\"  # env"));
}

#[test]
fn unknown_keys_are_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("plaza-cfg-unknown-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plaza.toml");
    std::fs::write(&path, "[gateway]\nlisten_port = 1\n").unwrap();
    let err = load(Some(&path), Some(BTreeMap::new()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("listen_port"), "{err}");
}

#[test]
fn a_room_definition_file_is_loaded_and_a_bad_one_refused() {
    let dir = std::env::temp_dir().join(format!("plaza-cfg-def-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let def = plaza_room_core::RoomDefinition::default_plaza();
    let mut small = def.clone();
    small.name = "small".into();
    let good = dir.join("small.json");
    std::fs::write(&good, serde_json::to_string(&small).unwrap()).unwrap();
    let env = BTreeMap::from([(
        "PLAZA__ROOM__DEFINITION".to_owned(),
        good.display().to_string(),
    )]);
    let (cfg, _) = load(None, Some(env)).unwrap();
    assert_eq!(cfg.room_actor().unwrap().room.definition.name, "small");
    assert_eq!(
        PlazaConfig::defaults()
            .room_actor()
            .unwrap()
            .room
            .definition,
        def,
        "empty: the built-in plaza"
    );
    let env = BTreeMap::from([(
        "PLAZA__ROOM__DEFINITION".to_owned(),
        dir.join("missing.toml").display().to_string(),
    )]);
    let err = load(None, Some(env)).unwrap_err().to_string();
    assert!(err.contains("room.definition"), "{err}");
}

#[test]
fn rooms_entries_override_the_node_default_in_order_and_bad_ones_are_refused() {
    let dir = std::env::temp_dir().join(format!("plaza-cfg-rooms-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rooms.toml");
    std::fs::write(
        &file,
        "[room]\ninterest_cap = 10\n\n[[rooms]]\nmatch = \"stage-*\"\ntier = \"stadium\"\n\
         expression_hz = 30\nspawn = [1.0, 0.0, 2.0]\n\n[[rooms]]\nmatch = \"*\"\n\
         max_members = 7\n",
    )
    .unwrap();
    let (cfg, prov) = load(Some(&file), Some(BTreeMap::new())).unwrap();
    assert_eq!(prov["rooms"], Source::File);
    assert!(render(&cfg, &prov).contains("rooms = "));
    let actor = cfg.room_actor().unwrap();
    assert_eq!(actor.room.interest_cap, 10);
    let (stage, rule) = actor.for_room("stage-1");
    assert_eq!(rule.as_deref(), Some("stage-*"));
    let r = &stage.room;
    // The tier brings its own cap and budgets; the rest is the node's.
    assert_eq!((r.interest_cap, r.budget_bytes_per_s), (256, 32_000));
    assert_eq!(r.expression_budget_bytes_per_s, 8_000);
    assert_eq!((r.expression_hz, r.max_members), (30, 1024));
    assert_eq!(r.definition.spawn, [1.0, 0.0, 2.0]);
    let (other, rule) = actor.for_room("lobby");
    assert_eq!(rule.as_deref(), Some("*"));
    assert_eq!((other.room.max_members, other.room.interest_cap), (7, 10));

    for (bad, what) in [
        ("[[rooms]]\nmatch = \"\"\n", "match"),
        (
            "[[rooms]]\nmatch = \"a\"\nbroadcast_hz = 80\n",
            "broadcast_hz",
        ),
        (
            "[[rooms]]\nmatch = \"a\"\nspawn = [900.0, 0.0, 0.0]\n",
            "spawn",
        ),
        (
            "[[rooms]]\nmatch = \"a\"\ndefinition = \"/nope.toml\"\n",
            "definition",
        ),
        ("[[rooms]]\nmatch = \"a\"\ncolour = 1\n", "colour"),
    ] {
        std::fs::write(&file, bad).unwrap();
        let err = load(Some(&file), Some(BTreeMap::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{bad}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn invalid_values_are_refused_naming_their_source() {
    let env = BTreeMap::from([("PLAZA__ROOM__BROADCAST_HZ".to_owned(), "500".to_owned())]);
    let err = load(None, Some(env)).unwrap_err().to_string();
    assert!(
        err.contains("room.broadcast_hz")
            && err.contains("environment variable PLAZA__ROOM__BROADCAST_HZ"),
        "{err}"
    );
    let env = BTreeMap::from([("PLAZA__GATEWAY__LISTEN_PORT".to_owned(), "1".to_owned())]);
    let err = load(None, Some(env)).unwrap_err().to_string();
    assert_eq!(
        err,
        "environment variable PLAZA__GATEWAY__LISTEN_PORT: unknown key `gateway.listen_port`"
    );
    let env = BTreeMap::from([("PLAZA__ROOM__TICK_HZ".to_owned(), "fast".to_owned())]);
    let err = load(None, Some(env)).unwrap_err().to_string();
    assert!(
        err.starts_with("environment variable PLAZA__ROOM__TICK_HZ: ") && err.contains("tick_hz"),
        "{err}"
    );
}

#[test]
fn file_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("plaza-cfg-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[room]\ntick_hz = \"fast\"\n").unwrap();
    let err = load(Some(&path), Some(BTreeMap::new()))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with(&path.display().to_string()), "{err}");
    std::fs::write(&path, "[room]\ntick_hz = 10\nbroadcast_hz = 20\n").unwrap();
    let err = load(Some(&path), Some(BTreeMap::new()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("room.broadcast_hz") && err.contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn addresses_accept_host_names() {
    let env = BTreeMap::from([(
        "PLAZA__GATEWAY__LISTEN".to_owned(),
        "localhost:7777".to_owned(),
    )]);
    let (cfg, _) = load(None, Some(env)).unwrap();
    assert_eq!(cfg.gateway.listen.as_str(), "localhost:7777");
    let a = cfg.gateway.listen.resolve().unwrap();
    assert!(a.ip().is_loopback() && a.port() == 7777, "{a}");
    for bad in ["localhost", "localhost:99999", ":80", "a b:1"] {
        assert!(bad.parse::<Address>().is_err(), "{bad}");
    }
    assert!("[::1]:7777".parse::<Address>().is_ok());
}

#[test]
fn redis_urls_of_every_kind_validate() {
    let mut cfg = PlazaConfig::defaults();
    for ok in [
        "redis://redis:6379/0",
        "rediss://:pw@redis:6380",
        "unix:///run/redis.sock",
        "redis+cluster://r1:7000,r2:7001,r3:7002",
        "rediss+cluster://:pw@r1:7000",
        "redis+sentinel://s1:26379,s2:26379/mymaster",
    ] {
        cfg.directory.redis_url = ok.into();
        cfg.validate().unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in [
        "http://redis:6379",
        "redis+cluster://",
        "redis+sentinel://s1:26379",
        "redis+sentinel://s1:26379/",
    ] {
        cfg.directory.redis_url = bad.into();
        assert!(cfg.validate().is_err(), "{bad}");
    }
    assert_eq!(
        redact(
            "directory.redis_url",
            "redis+cluster://:s3cret@r1:7000,r2:7001"
        ),
        "redis+cluster://:***@r1:7000,r2:7001"
    );
}

#[test]
fn secrets_are_redacted() {
    assert_eq!(
        redact("directory.redis_url", "redis://:s3cret@redis:6379/0"),
        "redis://:***@redis:6379/0"
    );
    assert_eq!(
        redact("directory.redis_url", "rediss://plaza:s3cret@redis:6379"),
        "rediss://plaza:***@redis:6379"
    );
    assert_eq!(
        redact("directory.redis_url", "redis://redis:6379"),
        "redis://redis:6379"
    );
    assert_eq!(redact("admin.token", "abc"), "<redacted>");
    assert_eq!(redact("admin.token", ""), "");
    assert_eq!(redact("admin.token_file", "/run/t"), "/run/t");
    let mut cfg = PlazaConfig::defaults();
    cfg.directory.redis_url = "redis://:s3cret@redis:6379".into();
    let text = render(&cfg, &Provenance::new());
    assert!(
        !text.contains("s3cret") && text.contains("redis://:***@redis:6379"),
        "{text}"
    );
}
