//! Every bad configuration is rejected when the client is built, with a message that names
//! the value and says what to change. No master is needed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod capture;

use std::time::Duration;

use redquorum::{
    Backoff, Clock, Error, ErrorKind, RedactedUrl, Redlock, Retry, Timeouts, Tls, Waiting, Watchdog,
};

const A: &str = "redis://127.0.0.1:7001";
const B: &str = "redis://127.0.0.1:7002";
const C: &str = "redis://127.0.0.1:7003";

fn three() -> redquorum::Builder {
    Redlock::builder().masters([A, B, C])
}

fn rejected(builder: redquorum::Builder) -> (Error, String) {
    let err = builder.build().unwrap_err();
    let msg = err.to_string();
    (err, msg)
}

#[test]
fn a_good_configuration_builds() {
    let client = three()
        .ttl("30s")
        .timeouts(Timeouts::new().node("20ms"))
        .build()
        .unwrap();
    assert_eq!(client.quorum(), 2);
    assert_eq!(client.ttl(), Duration::from_secs(30));
    assert_eq!(client.master_addresses(), [A, B, C]);
}

#[test]
fn no_masters() {
    let (err, msg) = rejected(Redlock::builder());
    assert!(err.setting() == Some("masters") && err.to_string().contains("no masters configured"));
    assert!(msg.contains("add at least one"), "{msg}");
    let (err, _) = rejected(Redlock::builder().masters(Vec::<String>::new()));
    assert!(err.setting() == Some("masters") && err.to_string().contains("no masters configured"));
}

#[test]
fn duplicate_master() {
    let (err, msg) = rejected(Redlock::builder().masters([A, B, A]));
    assert!(
        (err.setting() == Some("masters") && err.to_string().contains("listed twice")),
        "{err:?}"
    );
    assert!(
        msg.contains("listed twice") && msg.contains("7001"),
        "{msg}"
    );
    // The same server spelled differently is still the same server.
    for (a, b) in [
        (A, "redis://localhost:7001"),
        (A, "redis://LOCALHOST:7001/2"),
        ("redis://[::1]:7001", "redis://localhost:7001"),
        ("redis://[::1]:7001", "redis://[0:0:0:0:0:0:0:1]:7001"),
        (A, "redis://[::ffff:127.0.0.1]:7001"),
    ] {
        let (err, _) = rejected(Redlock::builder().masters([a, b]));
        assert!(
            (err.setting() == Some("masters") && err.to_string().contains("listed twice")),
            "{a} {b}: {err:?}"
        );
    }
    // Different addresses are different servers, loopback or not.
    for (a, b) in [
        (A, "redis://[::1]:7001"),
        (A, "redis://127.0.0.2:7001"),
        (A, "redis://127.0.0.1:7002"),
    ] {
        assert!(
            Redlock::builder().masters([a, b]).build().is_ok(),
            "{a} {b}"
        );
    }
}

#[test]
fn unparsable_url() {
    for url in [
        "not a url",
        "http://127.0.0.1:7001",
        "redis://127.0.0.1:notaport",
    ] {
        let (err, msg) = rejected(Redlock::builder().masters([url, B]));
        assert!(
            (err.setting() == Some("masters") && err.to_string().contains("cannot be used")),
            "{url}: {err:?}"
        );
        assert!(msg.contains("cannot be used"), "{msg}");
    }
}

#[test]
fn passwords_never_appear_in_errors_or_debug() {
    let secret = "s3cr3t-pa55";
    let with_pw = format!("redis://user:{secret}@127.0.0.1:7001");
    let (err, msg) = rejected(Redlock::builder().masters([with_pw.as_str(), with_pw.as_str()]));
    assert!(!msg.contains(secret), "{msg}");
    assert!(!format!("{err:?}").contains(secret));
    assert!(msg.contains("user:***@"), "{msg}");

    let bad = format!("redis://user:{secret}@127.0.0.1:notaport");
    let (err, msg) = rejected(Redlock::builder().master(&bad));
    assert!(
        !msg.contains(secret) && !format!("{err:?}").contains(secret),
        "{msg}"
    );

    let client = Redlock::builder().master(&with_pw).build().unwrap();
    assert!(!format!("{client:?}").contains(secret));
    assert!(!client.master_addresses()[0].contains(secret));

    // The builder and a URL on its own, `Debug` plain and pretty, and `Display`.
    let builder = Redlock::builder()
        .master(&with_pw)
        .master(format!("redis+unix:///tmp/r.sock?user=u&pass={secret}"));
    let shown = format!("{builder:?} {builder:#?}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains("user:***@127.0.0.1:7001"), "{shown}");
    let url = RedactedUrl::new(with_pw.as_str());
    let shown = format!("{url} {url:?} {url:#?}");
    assert!(!shown.contains(secret), "{shown}");
    assert_eq!(url.to_string(), "redis://user:***@127.0.0.1:7001");
}

/// A URL the parser cannot read, or reads without an authority (a slash short, a bad
/// host), still hides its password: in the build's error, the builder's `Debug` and a
/// `RedactedUrl` alone.
#[test]
fn a_malformed_url_never_shows_its_password() {
    let secret = "s3cr3t-pa55";
    for url in [
        format!("redis:/user:{secret}@127.0.0.1:7001"),
        format!("redis:user:{secret}@127.0.0.1:7001"),
        format!("redis//user:{secret}@127.0.0.1:7001"),
        format!("redis://[::1?password={secret}"),
        format!("redis://[::1?user=u&pass={secret}&db=0"),
        format!("redis:/127.0.0.1:7001?password={secret}"),
        format!("redis://user:{secret}@[::1"),
    ] {
        let builder = Redlock::builder().masters([url.as_str(), B]);
        let shown = format!("{builder:?} {builder:#?}");
        assert!(!shown.contains(secret), "{url}: {shown}");
        let redacted = RedactedUrl::new(url.as_str());
        let shown = format!("{redacted} {redacted:?} {redacted:#?}");
        assert!(!shown.contains(secret), "{url}: {shown}");
        assert!(shown.contains("***"), "{url}: {shown}");
        let shown = match builder.build() {
            Ok(client) => format!("{client:?} {client:#?}"),
            Err(err) => format!("{err} {err:?} {err:#?}"),
        };
        assert!(!shown.contains(secret), "{url}: {shown}");
    }
    // What holds no password is shown as written.
    for url in [
        "redis:/127.0.0.1:7001",
        "redis://[::1?user=u&db=0",
        "redis+unix:///tmp/a@b.sock",
    ] {
        assert_eq!(RedactedUrl::new(url).to_string(), url);
    }
}

/// A group given to the builder sets what it names and leaves the rest as it was: two
/// values of one group add up, and a later one overrides only what it names.
#[test]
fn a_group_sets_only_what_it_names() {
    let err = rejected(
        three()
            .timeouts(Timeouts::new().node("0ms"))
            .timeouts(Timeouts::new().connect("0ms")),
    )
    .0;
    let zero: Vec<_> = err.problems().iter().map(Error::setting).collect();
    assert_eq!(zero, [Some("node_timeout"), Some("connect_timeout")]);
    for problem in err.problems() {
        assert_eq!(problem.kind(), ErrorKind::InvalidConfig);
        assert!(problem.to_string().contains("is zero"), "{problem}");
    }
    // The later value names the node timeout again: the first one's zero is gone.
    three()
        .timeouts(Timeouts::new().node("0ms").connect("2s"))
        .timeouts(Timeouts::new().node("20ms"))
        .build()
        .unwrap();
    let err = rejected(
        three()
            .retry(Retry::new().attempts(0))
            .retry(Retry::new().delay("1s"))
            .retry(Retry::new().backoff(Backoff::Exponential {
                max: Duration::from_millis(10),
            })),
    )
    .0;
    assert_eq!(err.problems().len(), 2, "{err}");
    assert!(
        ((err.problems()[1]).setting() == Some("backoff")
            && (err.problems()[1])
                .to_string()
                .contains("below retry_delay")),
        "{err:?}"
    );
    // Watchdog::new() keeps the interval given before; off() turns the watchdog off and
    // keeps the rest.
    let (err, _) = rejected(
        three()
            .ttl("1s")
            .watchdog(Watchdog::on().interval("2s"))
            .watchdog(Watchdog::new().max_hold("1h")),
    );
    assert!(
        (err.setting() == Some("extend_interval")
            && err.to_string().contains("is not below the ttl")),
        "{err:?}"
    );
    three()
        .watchdog(Watchdog::on().interval("2s"))
        .watchdog(Watchdog::off())
        .waiting(Waiting::new().handoff(false))
        .waiting(Waiting::new().own_leases(true))
        .clock(Clock::new().drift_factor(0.02))
        .clock(Clock::new().min_validity("10ms"))
        .tls(Tls::new())
        .build()
        .unwrap();
}

/// Every group's constructor is `const`: settings can be constants.
#[test]
fn groups_can_be_constants() {
    const TIMEOUTS: Timeouts = Timeouts::new();
    const RETRY: Retry = Retry::new().attempts(3).backoff(Backoff::Fixed);
    const WATCHDOG: Watchdog = Watchdog::on();
    const WAITING: Waiting = Waiting::new().handoff(false).own_leases(true);
    const CLOCK: Clock = Clock::new().drift_factor(0.02);
    const TLS: Tls = Tls::new();
    three()
        .timeouts(TIMEOUTS)
        .retry(RETRY)
        .watchdog(WATCHDOG)
        .waiting(WAITING)
        .clock(CLOCK)
        .tls(TLS)
        .build()
        .unwrap();
}

#[test]
fn ttl_zero() {
    let (err, msg) = rejected(three().ttl(Duration::ZERO));
    assert!(err.setting() == Some("ttl") && err.to_string().contains("is zero"));
    assert!(msg.contains("ttl is zero"), "{msg}");
}

#[test]
fn ttl_not_above_drift_plus_node_timeout_plus_margin() {
    // drift = 100ms * 0.01 + 2ms = 3ms, safety margin = 5 % = 5ms:
    // 3ms + 93ms + 5ms exceeds 100ms.
    let (err, msg) = rejected(three().ttl("100ms").timeouts(Timeouts::new().node("93ms")));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is too short")),
        "{err:?}"
    );
    assert!(msg.contains("raise ttl or lower node_timeout"), "{msg}");
    assert!(msg.contains("safety margin"), "{msg}");
    assert!(
        three()
            .ttl("100ms")
            .timeouts(Timeouts::new().node("90ms"))
            .build()
            .is_ok()
    );
    // An explicit safety margin counts the same way.
    let (err, _) = rejected(
        three()
            .ttl("100ms")
            .timeouts(Timeouts::new().node("50ms"))
            .watchdog(Watchdog::new().safety_margin("48ms")),
    );
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is too short")),
        "{err:?}"
    );
    // Below the drift allowance alone.
    let (err, _) = rejected(three().ttl("1ms"));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is too short")),
        "{err:?}"
    );
}

#[test]
fn watchdog_settings_that_cannot_work() {
    assert!(
        (rejected(three().watchdog(Watchdog::new().interval("0s"))).0).setting()
            == Some("extend_interval")
            && (rejected(three().watchdog(Watchdog::new().interval("0s"))).0)
                .to_string()
                .contains("is zero")
    );
    assert!(
        (rejected(three().watchdog(Watchdog::new().max_hold(Duration::ZERO))).0).setting()
            == Some("max_hold")
            && (rejected(three().watchdog(Watchdog::new().max_hold(Duration::ZERO))).0)
                .to_string()
                .contains("is zero")
    );
    let (err, _) = rejected(three().watchdog(Watchdog::new().max_hold(Duration::MAX)));
    assert!(
        (err.setting() == Some("max_hold") && err.to_string().contains("above its maximum")),
        "{err:?}"
    );
    let (err, _) = rejected(three().watchdog(Watchdog::new().safety_margin("soon")));
    assert!(
        (err.setting() == Some("safety_margin") && err.to_string().contains("is not a duration"))
    );
}

#[test]
fn node_and_connect_timeout_zero() {
    assert!(
        (rejected(three().timeouts(Timeouts::new().node("0s"))).0).setting()
            == Some("node_timeout")
            && (rejected(three().timeouts(Timeouts::new().node("0s"))).0)
                .to_string()
                .contains("is zero")
    );
    assert!(
        (rejected(three().timeouts(Timeouts::new().connect(Duration::ZERO))).0).setting()
            == Some("connect_timeout")
            && (rejected(three().timeouts(Timeouts::new().connect(Duration::ZERO))).0)
                .to_string()
                .contains("is zero")
    );
}

#[test]
fn drift_factor_out_of_range() {
    for f in [-0.1, 1.0, 2.0, f64::NAN, f64::INFINITY] {
        let (err, msg) = rejected(three().clock(Clock::new().drift_factor(f)));
        assert!(
            (err.setting() == Some("drift_factor") && err.to_string().contains("out of range")),
            "{f}: {err:?}"
        );
        assert!(msg.contains("typically 0.01"), "{msg}");
    }
}

#[test]
fn human_durations_parse_and_bad_ones_are_named() {
    let client = three()
        .ttl("1m 30s")
        .timeouts(Timeouts::new().node("250ms"))
        .build()
        .unwrap();
    assert_eq!(client.ttl(), Duration::from_secs(90));
    let (err, msg) = rejected(three().ttl("ten seconds"));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is not a duration")),
        "{err:?}"
    );
    assert!(
        msg.contains("\"ten seconds\"") && msg.contains("\"250ms\""),
        "{msg}"
    );
    let (err, _) = rejected(three().retry(Retry::new().jitter(String::from("5 parsecs"))));
    assert!(
        (err.setting() == Some("retry_jitter") && err.to_string().contains("is not a duration"))
    );
}

#[test]
fn retry_settings_that_cannot_work() {
    assert!(
        (rejected(three().retry(Retry::new().attempts(0))).0).setting() == Some("retry_attempts")
            && (rejected(three().retry(Retry::new().attempts(0))).0)
                .to_string()
                .contains("is zero")
    );
    let (err, msg) = rejected(three().retry(Retry::new().delay(Duration::MAX)));
    assert!(
        (err.setting() == Some("retry_delay") && err.to_string().contains("overflows the clock")),
        "{err:?}"
    );
    assert!(msg.contains("too large"), "{msg}");
    let (err, _) = rejected(
        three().retry(
            Retry::new()
                .delay(Duration::from_secs(u64::MAX / 2))
                .jitter(Duration::from_secs(u64::MAX / 2 + 10)),
        ),
    );
    assert!(
        (err.setting() == Some("retry_delay") && err.to_string().contains("overflows the clock")),
        "{err:?}"
    );
    let (err, _) = rejected(three().retry(Retry::new().wait(Duration::MAX)));
    assert!(
        (err.setting() == Some("wait_timeout") && err.to_string().contains("above its maximum")),
        "{err:?}"
    );
    let (err, msg) = rejected(three().retry(Retry::new().delay("1s").backoff(
        Backoff::Exponential {
            max: Duration::from_millis(10),
        },
    )));
    assert!(
        (err.setting() == Some("backoff") && err.to_string().contains("below retry_delay")),
        "{err:?}"
    );
    assert!(msg.contains("raise the maximum"), "{msg}");
}

#[test]
fn durations_up_to_their_maximum_build() {
    use redquorum::limits::{
        MAX_CONNECT_TIMEOUT, MAX_MAX_HOLD, MAX_NODE_TIMEOUT, MAX_TTL, MAX_WAIT_TIMEOUT,
    };
    let client = three()
        .ttl(MAX_TTL)
        .ttl_max(MAX_TTL)
        .timeouts(
            Timeouts::new()
                .node(MAX_NODE_TIMEOUT)
                .connect(MAX_CONNECT_TIMEOUT),
        )
        .retry(Retry::new().wait(MAX_WAIT_TIMEOUT))
        .watchdog(Watchdog::new().max_hold(MAX_MAX_HOLD))
        .build()
        .unwrap();
    assert_eq!(client.ttl(), MAX_TTL);
    let just_over = MAX_TTL + Duration::from_millis(1);
    let (err, msg) = rejected(three().ttl(just_over));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("above its maximum")),
        "{err:?}"
    );
    assert!(msg.contains("MAX_TTL"), "{msg}");
}

#[test]
fn min_validity_must_fit_the_ttl() {
    let (err, _) = rejected(three().ttl("1s").clock(Clock::new().min_validity("990ms")));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is too short")),
        "{err:?}"
    );
}

#[test]
fn tls_urls_need_the_tls_feature() {
    let tls = Redlock::builder().master("rediss://127.0.0.1:7001");
    if cfg!(feature = "tls") {
        tls.build().unwrap();
        // Certificate checks off are refused, whatever the build.
        let (err, msg) = rejected(Redlock::builder().master("rediss://127.0.0.1:7001/#insecure"));
        assert!(
            (err.setting() == Some("masters") && err.to_string().contains("cannot be used")),
            "{err:?}"
        );
        assert!(msg.contains("Tls::ca_pem"), "{msg}");
        // However it is spelled: the URL parser drops a leading space and any tab, so the
        // parsed address, not the text, decides.
        for url in [
            " rediss://127.0.0.1:7001/#insecure",
            "\trediss://127.0.0.1:7001/#insecure",
            "redi\tss://127.0.0.1:7001/#insecure",
            "rediss:\t//127.0.0.1:7001/#insecure",
            "REDISS://127.0.0.1:7001/#insecure",
            "valkeys://127.0.0.1:7001#insecure",
        ] {
            let (err, msg) = rejected(Redlock::builder().master(url));
            assert!(
                (err.setting() == Some("masters") && err.to_string().contains("cannot be used")),
                "{url:?}: {err:?}"
            );
            assert!(msg.contains("#insecure"), "{url:?}: {msg}");
        }
    } else {
        let (err, msg) = rejected(tls);
        assert!(
            (err.setting() == Some("masters") && err.to_string().contains("cannot be used")),
            "{err:?}"
        );
        assert!(msg.contains("`tls` feature"), "{msg}");
    }
}

/// A master URL that does not parse is named (its password redacted) with what is wrong
/// with it and what a valid one looks like, never as the URL parser's bare complaint.
#[test]
fn a_bad_url_says_what_is_wrong_and_what_a_valid_one_looks_like() {
    for (url, wrong) in [
        ("not a url", "no scheme"),
        ("127.0.0.1:7001", "scheme"),
        ("http://127.0.0.1:7001", "http://"),
        ("redis://127.0.0.1:notaport", "port"),
        ("redis://127.0.0.1:99999", "port"),
        ("redis://", "no host"),
        ("redis://0.0.0.0:7001", "0.0.0.0"),
        ("redis://127.0.0.1:7001/x", "database"),
        ("redis://user:s3cr3t@127.0.0.1:notaport", "port"),
    ] {
        let (err, msg) = rejected(Redlock::builder().masters([url, B]));
        assert!(
            (err.setting() == Some("masters") && err.to_string().contains("cannot be used")),
            "{url}: {err:?}"
        );
        let shown = url.replace("s3cr3t", "***");
        assert!(msg.contains(&format!("{shown:?}")), "{url}: {msg}");
        assert!(msg.contains(wrong), "{url}: {msg}");
        assert!(
            msg.contains("redis://host:port") && msg.contains("redis+unix:///"),
            "{url}: {msg}"
        );
        assert!(
            !msg.contains("did not parse") && !msg.contains("InvalidClientConfig"),
            "{url}: {msg}"
        );
        assert!(!msg.contains("s3cr3t") && !format!("{err:?}").contains("s3cr3t"));
        assert_eq!(msg, msg.trim_end_matches('.'), "{url}: {msg}");
    }
}

/// PX keeps whole milliseconds: a TTL below one is too short (by the drift allowance
/// alone), and says so with the value given, not as "zero".
#[test]
fn a_sub_millisecond_ttl_is_too_short_not_zero() {
    let (err, msg) = rejected(three().ttl(Duration::from_micros(500)));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is too short")),
        "{err:?}"
    );
    assert!(msg.contains("ttl 500us is too short"), "{msg}");
    assert!(!msg.contains("zero"), "{msg}");
    let (err, msg) = rejected(three().ttl_max("10s").ttl("999us"));
    assert!(
        (err.setting() == Some("ttl") && err.to_string().contains("is too short")),
        "{err:?}"
    );
    assert!(msg.contains("ttl 999us"), "{msg}");
}

/// Every setting that cannot work is reported at once, in the order they are checked;
/// the first stays at hand for matching.
#[test]
fn several_bad_settings_are_all_reported() {
    let (err, msg) = rejected(
        Redlock::builder()
            .masters([A, "http://127.0.0.1:7002", C])
            .ttl("ten seconds")
            .timeouts(Timeouts::new().node("0s"))
            .retry(Retry::new().attempts(0))
            .clock(Clock::new().drift_factor(2.0)),
    );
    let problems = err.problems();
    assert_eq!(problems.len(), 5, "{err:?}");
    assert_eq!(err.setting(), Some("masters"));
    assert!(
        (problems[0].setting() == Some("masters")
            && problems[0].to_string().contains("cannot be used")),
        "{err:?}"
    );
    assert!(
        ((problems[1]).setting() == Some("ttl")
            && (problems[1]).to_string().contains("is not a duration")),
        "{err:?}"
    );
    let settings: Vec<_> = problems.iter().map(Error::setting).collect();
    assert_eq!(
        settings,
        [
            Some("masters"),
            Some("ttl"),
            Some("drift_factor"),
            Some("node_timeout"),
            Some("retry_attempts")
        ]
    );
    for problem in problems {
        assert_eq!(problem.kind(), ErrorKind::InvalidConfig);
        assert!(problem.problems().len() == 1, "{problem:?}");
        let detail = problem.detail().unwrap();
        assert!(msg.contains(detail), "{problem}: {msg}");
    }
    assert!(
        err.detail().unwrap().starts_with("5 settings cannot work"),
        "{msg}"
    );
    // One problem is that problem itself, as before.
    let (err, _) = rejected(three().timeouts(Timeouts::new().node("0s")));
    assert_eq!(err.problems().len(), 1);
    assert!(std::ptr::eq(&err.problems()[0], &err));
}

/// Two masters build (a legal setup), with a warning: a quorum of 2 of 2 tolerates no
/// failure. Three do not warn.
#[test]
fn two_masters_build_with_a_warning() {
    let (captured, _subscriber) = capture::Captured::install(
        tracing::Level::WARN,
        tracing_subscriber::fmt::format::FmtSpan::NONE,
    );
    let text = || captured.text();

    let client = Redlock::builder().masters([A, B]).build().unwrap();
    assert_eq!(client.quorum(), 2);
    let warned = text();
    assert!(
        warned.contains("WARN") && warned.contains("2 of 2") && warned.contains("no failure"),
        "{warned:?}"
    );
    captured.clear();
    three().build().unwrap();
    assert_eq!(text(), "");
}

/// A watchdog interval at or above the TTL could never be kept: the lease would expire
/// first. Refused at build, naming both values; per call, a TTL at or below the client's
/// interval is refused when the watchdog runs.
#[test]
fn an_extend_interval_not_below_the_ttl_is_refused() {
    for interval in ["10s", "11s"] {
        let (err, msg) = rejected(
            three()
                .ttl("10s")
                .watchdog(Watchdog::new().interval(interval)),
        );
        assert!(
            (err.setting() == Some("extend_interval")
                && err.to_string().contains("is not below the ttl")),
            "{interval}: {err:?}"
        );
        assert!(
            msg.contains(&format!("extend_interval {interval}")) && msg.contains("ttl 10s"),
            "{msg}"
        );
        assert!(msg.contains("lower extend_interval"), "{msg}");
    }
    three()
        .ttl("10s")
        .watchdog(Watchdog::new().interval("9s"))
        .build()
        .unwrap();
}
