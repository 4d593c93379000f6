//! Unit tests of the builder's parts that need no master.

use super::*;
use crate::{Retry, Tls};

#[test]
fn redacts_passwords() {
    assert_eq!(
        redact("redis://user:secret@127.0.0.1:7001/0"),
        "redis://user:***@127.0.0.1:7001/0"
    );
    assert_eq!(redact("redis://127.0.0.1:7001"), "redis://127.0.0.1:7001");
    let unix = redact("redis+unix:///tmp/r.sock?user=u&pass=secret");
    assert!(!unix.contains("secret"), "{unix}");
    assert_eq!(redact("redis://:sec ret@host:1"), "redis://:***@host:1");
}

#[test]
fn rediss_urls_build_only_with_the_tls_feature() {
    let built = Builder::new()
        .master("rediss://127.0.0.1:7001")
        .into_config();
    if cfg!(feature = "tls") {
        let config = built.unwrap();
        assert!(is_tls(&config.masters[0].info));
    } else {
        let err = built.unwrap_err();
        assert!(matches!(err, Problem::InvalidUrl { .. }), "{err}");
        assert!(err.to_string().contains("`tls` feature"), "{err}");
    }
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_settings_need_the_tls_feature() {
    let err = Builder::new()
        .master("redis://127.0.0.1:7001")
        .tls(Tls::new().ca_file("/etc/ssl/ca.pem"))
        .into_config()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Problem::Tls {
                setting: "tls_ca_file",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("`tls` feature"), "{err}");
}

#[test]
fn debug_never_shows_a_client_key() {
    let builder = Builder::new().master("rediss://127.0.0.1:7001").tls(
        Tls::new()
            .ca_pem("CA-PEM-TEXT")
            .client_cert_pem("CERT-PEM-TEXT", "KEY-PEM-SECRET"),
    );
    let shown = format!("{builder:?} {builder:#?}");
    assert!(!shown.contains("KEY-PEM-SECRET"), "{shown}");
    assert!(shown.contains("client_key: Some(\"***\")"), "{shown}");
    let files = Builder::new().tls(Tls::new().client_cert_files("/c.pem", "/k.pem"));
    assert!(format!("{files:?}").contains("/k.pem"));
}

#[test]
fn exponential_backoff_doubles_up_to_max() {
    let policy = RetryPolicy {
        attempts: None,
        delay: Duration::from_millis(10),
        jitter: Duration::ZERO,
        backoff: Backoff::Exponential {
            max: Duration::from_millis(70),
        },
    };
    let delays: Vec<u128> = (1..=6).map(|a| policy.base_delay(a).as_millis()).collect();
    assert_eq!(delays, [10, 20, 40, 70, 70, 70]);
    assert_eq!(policy.base_delay(u32::MAX), Duration::from_millis(70));
}

#[test]
fn jitter_follows_the_retry_delay_unless_set() {
    let config = |b: Builder| b.master("redis://127.0.0.1:7001").into_config().unwrap();
    let follows = config(Builder::new().retry(Retry::new().delay("10ms")));
    assert_eq!(follows.retry.jitter, Duration::from_millis(10));
    let set = config(Builder::new().retry(Retry::new().delay("10ms").jitter("0ms")));
    assert_eq!(set.retry.jitter, Duration::ZERO);
    let default = config(Builder::new());
    assert_eq!(default.retry.jitter, defaults::RETRY_JITTER);
    assert_eq!(default.retry.delay, defaults::RETRY_DELAY);
}

#[test]
fn jitter_stays_within_bounds() {
    let policy = RetryPolicy {
        attempts: None,
        delay: Duration::from_millis(10),
        jitter: Duration::from_millis(5),
        backoff: Backoff::Fixed,
    };
    for _ in 0..1000 {
        let d = policy.delay(1);
        assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(15));
    }
}

#[test]
fn a_master_on_port_0_is_refused_naming_its_url() {
    for url in [
        "redis://127.0.0.1:0",
        "redis://user:secret@localhost:0/0",
        "valkey://127.0.0.1:00",
    ] {
        let err = Builder::new().master(url).into_config().unwrap_err();
        let said = err.to_string();
        let Problem::InvalidUrl { url: named, reason } = &err else {
            panic!("{said}")
        };
        assert_eq!(*named, redact(url), "{said}");
        assert_eq!(
            reason, "port 0 cannot be connected to: write the master's port, such as 6379",
            "{said}"
        );
        assert!(!said.contains("secret"), "{said}");
    }
    // Each is refused for its port, not as the other's duplicate.
    let err = Builder::new()
        .masters(["redis://127.0.0.1:0", "redis://127.0.0.1:0"])
        .into_config()
        .unwrap_err();
    let Problem::Several(problems) = &err else {
        panic!("{err}")
    };
    assert!(
        problems
            .iter()
            .all(|p| p.to_string().contains("port 0 cannot be connected to")),
        "{err}"
    );
    // Refused over TLS too (without the `tls` feature, for the feature first).
    let err = Builder::new()
        .master("rediss://127.0.0.1:0")
        .into_config()
        .unwrap_err();
    let expected = if cfg!(feature = "tls") {
        "port 0 cannot be connected to"
    } else {
        "`tls` feature"
    };
    assert!(err.to_string().contains(expected), "{err}");
    // A socket has no port: its URL builds as before.
    let config = Builder::new()
        .master("redis+unix:///tmp/redis.sock")
        .into_config()
        .unwrap();
    assert!(matches!(
        config.masters[0].info.addr(),
        ConnectionAddr::Unix(_)
    ));
}

#[test]
fn a_key_prefix_longer_than_its_limit_is_refused() {
    let built = |prefix: String| {
        Builder::new()
            .master("redis://127.0.0.1:7001")
            .key_prefix(prefix)
            .into_config()
    };
    let longest = "p".repeat(limits::MAX_KEY_PREFIX_LEN);
    assert_eq!(built(longest.clone()).unwrap().key_prefix, longest);
    let Err(err) = built("p".repeat(100 * 1024)) else {
        panic!("a 100 KB prefix was accepted")
    };
    let said = err.to_string();
    assert_eq!(err.setting(), Some("key_prefix"), "{said}");
    assert!(
        said.starts_with(&format!(
            "key_prefix is 102400 bytes long, above MAX_KEY_PREFIX_LEN ({})",
            limits::MAX_KEY_PREFIX_LEN
        )),
        "{said}"
    );
    // The prefix itself is not repeated, even where it is also a reserved one.
    let Err(err) = built(format!("redquorum:{}", "p".repeat(100 * 1024))) else {
        panic!("a 100 KB reserved prefix was accepted")
    };
    assert_eq!(err.setting(), Some("key_prefix"), "{err}");
    assert!(err.to_string().len() < 300, "{err}");
}

#[test]
fn a_label_with_a_control_character_is_refused() {
    let built = |label: &str| {
        Builder::new()
            .master("redis://127.0.0.1:7001")
            .label(label)
            .into_config()
    };
    for (label, shown) in [
        ("worker\nFAKE owner", r"'\n' at byte 6"),
        ("tab\there", r"'\t' at byte 3"),
        ("red\u{1b}[31m", r"'\u{1b}' at byte 3"),
        ("nul\0", r"'\0' at byte 3"),
        ("del\u{7f}", r"'\u{7f}' at byte 3"),
        ("é\u{85}", r"'\u{85}' at byte 2"),
        // Breaks a line in some terminals and logs, or reorders what is shown after it.
        ("line\u{2028}sep", r"'\u{2028}' at byte 4"),
        ("para\u{2029}", r"'\u{2029}' at byte 4"),
        ("rtl\u{202e}gnp.exe", r"'\u{202e}' at byte 3"),
        ("iso\u{2066}x\u{2069}", r"'\u{2066}' at byte 3"),
    ] {
        let Err(err) = built(label) else {
            panic!("{label:?} was accepted")
        };
        let said = err.to_string();
        assert_eq!(err.setting(), Some("label"), "{said}");
        assert!(
            said.starts_with(&format!(
                "label has a character that breaks or reorders its line ({shown})"
            )),
            "{said}"
        );
        assert!(!said.chars().any(char::is_control), "{said:?}");
    }
    // Any other character is fine.
    let label = "billing-worker é ✓ 請求";
    assert_eq!(built(label).unwrap().label, label);
}
