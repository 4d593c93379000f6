//! Unit tests of the errors' messages and of the classification of master failures.

use super::*;

#[test]
fn long_names_are_shortened_on_a_character_boundary() {
    assert_eq!(ShortName("orders:42").to_string(), "\"orders:42\"");
    let long = format!("{}é{}", "a".repeat(63), "b".repeat(1000));
    let shown = ShortName(&long).to_string();
    assert_eq!(shown, format!("\"{}…\" (1065 bytes)", "a".repeat(63)));
    let error = Error::new(ErrorKind::InvalidResource, long.as_str());
    assert!(error.to_string().len() < 200, "{error}");
    assert!(format!("{error:?}").len() < 200, "{error:?}");
}

/// Bytes that are no Redis reply say that the peer does not speak the protocol, on
/// one line; a reply of an unexpected type (the same kind of redis error) keeps its
/// own words.
#[test]
fn only_bytes_that_are_no_reply_read_as_another_protocol() {
    let garbage = redis::parse_redis_value(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err();
    let error = MasterError::from_redis(garbage);
    assert_eq!(error.kind(), MasterErrorKind::Protocol, "{error}");
    assert!(
        error
            .to_string()
            .contains("does not speak the Redis protocol"),
        "{error}"
    );
    assert!(!error.to_string().contains('\n'), "{error:?}");
    let typed = redis::from_redis_value::<i64>(redis::Value::SimpleString("x".into())).unwrap_err();
    let error = MasterError::from_redis(redis::RedisError::from(typed));
    assert_eq!(error.kind(), MasterErrorKind::Protocol, "{error}");
    assert!(!error.to_string().contains("Redis protocol"), "{error}");
}

/// Each handshake failure the testkit cannot stage (an expired certificate, one not
/// valid yet) is classified like those it can: permanent, saying what to change; a
/// network fault is not.
#[cfg(feature = "tls")]
#[test]
fn tls_failures_are_permanent_and_say_what_to_change() {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as Tls};

    let cases = [
        (
            Tls::InvalidCertificate(Cert::UnknownIssuer),
            "not signed by a trusted CA",
        ),
        (
            Tls::InvalidCertificate(Cert::NotValidForName),
            "not issued for the host",
        ),
        (
            Tls::InvalidCertificate(Cert::Expired),
            "outside its validity period",
        ),
        (
            Tls::InvalidCertificate(Cert::NotValidYet),
            "outside its validity period",
        ),
        (
            Tls::AlertReceived(Alert::CertificateRequired),
            "Tls::client_cert",
        ),
        (Tls::AlertReceived(Alert::UnknownCA), "Tls::client_cert"),
        (
            Tls::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
            "does not answer in TLS",
        ),
    ];
    for (tls, says) in cases {
        let shown = tls.to_string();
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let error = MasterError::from_redis(redis::RedisError::from(io));
        assert_eq!(error.kind(), MasterErrorKind::Tls, "{shown}: {error}");
        assert!(error.kind().is_permanent(), "{error}");
        assert!(error.to_string().contains(says), "{shown}: {error}");
    }
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    let error = MasterError::from_redis(redis::RedisError::from(reset));
    assert_eq!(error.kind(), MasterErrorKind::Io, "{error}");
    assert!(!error.kind().is_permanent());
}

/// Durations in messages are the values given, however large: rounded to whole
/// milliseconds (above a second) or microseconds, never wrapped around.
#[test]
fn huge_durations_are_shown_as_given() {
    let years = Duration::from_secs(5_000_000_000 * 31_557_600);
    assert_eq!(human(years), "5000000000years");
    assert_eq!(
        human(Duration::MAX),
        humantime::format_duration(Duration::new(u64::MAX, 999_000_000)).to_string()
    );
    assert_eq!(human(Duration::new(1, 2_345_678)), "1s 2ms");
    assert_eq!(human(Duration::from_nanos(1_234_567)), "1ms 234us");
}

/// A failed master's error shows once: after the tally only where the detail did not
/// already give that master with it (an unfit master's reason, which says what to change).
#[test]
fn a_failure_the_detail_gave_is_not_repeated() {
    let unfit = MasterError::new(
        MasterErrorKind::Misconfigured,
        "it holds a set where its cluster record goes: remove it",
    );
    let slow = MasterError::new(MasterErrorKind::Timeout, "no answer within 50ms");
    let error = Error::new(ErrorKind::Misconfigured, "orders:42")
        .with_detail(format!("redis://m1: {unfit}"))
        .with_masters(vec![
            MasterReport::new("redis://m1".into(), MasterOutcome::Failed(unfit.clone())),
            MasterReport::new("redis://m2".into(), MasterOutcome::Failed(slow)),
            MasterReport::new("redis://m3".into(), MasterOutcome::Failed(unfit)),
        ]);
    let shown = error.to_string();
    // m1 once (in the detail); m2 and m3, which the detail did not give, after the tally.
    assert_eq!(shown.matches("redis://m1").count(), 1, "{shown}");
    assert_eq!(shown.matches("remove it").count(), 2, "{shown}");
    assert!(
        shown.contains("redis://m2: failed: no answer within 50ms"),
        "{shown}"
    );
    assert!(
        shown.contains("redis://m3: failed: it holds a set"),
        "{shown}"
    );
}

/// Masters that failed one TLS handshake the same way are given once, as the group the
/// detail names ("m1, m2: why"), and not again after the tally.
#[test]
fn a_group_the_detail_gave_is_not_repeated() {
    let handshake = MasterError::new(
        MasterErrorKind::Tls,
        "the certificate is not signed by a trusted CA: set tls_ca",
    );
    let slow = MasterError::new(MasterErrorKind::Timeout, "no answer within 50ms");
    let error = Error::new(ErrorKind::Tls, "orders:42")
        .with_detail(format!("rediss://m1, rediss://m2: {handshake}"))
        .with_masters(vec![
            MasterReport::new(
                "rediss://m1".into(),
                MasterOutcome::Failed(handshake.clone()),
            ),
            MasterReport::new(
                "rediss://m2".into(),
                MasterOutcome::Failed(handshake.clone()),
            ),
            MasterReport::new("rediss://m3".into(), MasterOutcome::Failed(slow)),
            // Not in the group, with the same error, and a name that begins like one of
            // the group's: listed after the tally.
            MasterReport::new("rediss://m10".into(), MasterOutcome::Failed(handshake)),
        ]);
    let shown = error.to_string();
    assert_eq!(shown.matches("rediss://m1,").count(), 1, "{shown}");
    assert!(!shown.contains("rediss://m1: failed"), "{shown}");
    assert_eq!(shown.matches("rediss://m2").count(), 1, "{shown}");
    assert_eq!(shown.matches("trusted CA").count(), 2, "{shown}");
    assert!(shown.contains("rediss://m3: failed: no answer"), "{shown}");
    assert!(
        shown.contains("rediss://m10: failed: the certificate"),
        "{shown}"
    );
}

/// A list of masters each with its error, in parentheses ("(m1: why; m2: why)", as
/// `init_cluster` gives those that did not answer), names each of them: none is listed
/// again after the tally.
#[test]
fn a_list_the_detail_gave_is_not_repeated() {
    let refused = MasterError::new(MasterErrorKind::Auth, "Password authentication failed");
    let error = Error::new(ErrorKind::Auth, "redquorum:cluster")
        .with_detail(format!(
            "init_cluster needs every master to answer (redis://m1: {refused}; redis://m2: \
             {refused}); nothing was written"
        ))
        .with_masters(vec![
            MasterReport::new("redis://m1".into(), MasterOutcome::Failed(refused.clone())),
            MasterReport::new("redis://m2".into(), MasterOutcome::Failed(refused)),
        ]);
    let shown = error.to_string();
    assert_eq!(shown.matches("redis://m1").count(), 1, "{shown}");
    assert_eq!(shown.matches("redis://m2").count(), 1, "{shown}");
}

/// A detail that gives a master with a longer text than its error (the error's text is
/// only the start of it) did not give that error: the master is listed after the tally.
#[test]
fn a_detail_that_says_more_does_not_hide_the_error() {
    let slow = MasterError::new(MasterErrorKind::Timeout, "no answer");
    let error = Error::new(ErrorKind::NoQuorum, "orders:42")
        .with_detail("redis://m1: no answer within 50ms")
        .with_masters(vec![MasterReport::new(
            "redis://m1".into(),
            MasterOutcome::Failed(slow),
        )]);
    let shown = error.to_string();
    assert!(shown.contains("redis://m1: failed: no answer"), "{shown}");
}

/// A master whose name ends another's that the detail gave is not that master: it is
/// listed after the tally.
#[test]
fn a_name_that_ends_another_is_not_the_other() {
    let broken = MasterError::new(MasterErrorKind::Io, "broken pipe");
    let error = Error::new(ErrorKind::NoQuorum, "orders:42")
        .with_detail("redis+unix:///tmp/r.sock: broken pipe")
        .with_masters(vec![MasterReport::new(
            "unix:///tmp/r.sock".into(),
            MasterOutcome::Failed(broken),
        )]);
    let shown = error.to_string();
    assert!(
        shown.contains("; unix:///tmp/r.sock: failed: broken pipe"),
        "{shown}"
    );
}

/// Every wording of an ACL refusal inside a script that Redis 6.0 to 7.0 and Redis 7.2 on
/// (and Valkey) use is refused permissions; a script's other failures are not.
#[test]
fn the_acl_refusing_inside_a_script_is_told_in_every_wording() {
    for refused in [
        "ERR The user executing the script can't run this command or subcommand script: 8e7f, on @user_script:12.",
        "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: 8e7f, on @user_script:3.",
        "ERR The user executing the script can't publish to the channel mentioned in the command script: 8e7f, on @user_script:9.",
        "ERR ACL failure in script: User noset has no permissions to run the 'set' command script: 8e7f, on @user_script:20.",
        "ERR ACL failure in script: No permissions to access a key script: 8e7f, on @user_script:3.",
        "ERR ACL failure in script: No permissions to access a channel script: 8e7f, on @user_script:9.",
    ] {
        assert!(super::refused_by_acl(refused), "{refused}");
    }
    for other in [
        "WRONGTYPE Operation against a key holding the wrong kind of value script: 8e7f, on @user_script:75.",
        "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 8e7f",
        "ERR value is not an integer or out of range script: 8e7f, on @user_script:30.",
    ] {
        assert!(!super::refused_by_acl(other), "{other}");
    }
}

/// The tally accounts for every master: one without the key (a lease's key deleted by a
/// force-unlock, expired or evicted) and one whose fence counter was ahead are counted,
/// where the counts summed to fewer masters than the round had.
#[test]
fn the_tally_counts_every_master() {
    let report = |m: &str, o| MasterReport::new(m.into(), o);
    let error = Error::new(ErrorKind::LeaseLost, "r")
        .with_detail("no quorum confirmed the extension")
        .with_masters(vec![
            report("m1", MasterOutcome::Missing),
            report("m2", MasterOutcome::Pending),
            report("m3", MasterOutcome::Missing),
            report("m4", MasterOutcome::FenceConflict { counter: 7 }),
        ]);
    let shown = error.to_string();
    assert!(
        shown.contains(
            "(0 of 4 masters granted, 0 held by another, 0 failed, 1 pending, \
             2 without the key, 1 with a fence counter at or past the token)"
        ),
        "{shown}"
    );
    // Nothing is added where none is missing.
    let plain = Error::new(ErrorKind::NoQuorum, "r").with_masters(vec![
        report("m1", MasterOutcome::Granted),
        report("m2", MasterOutcome::Pending),
    ]);
    assert!(
        plain
            .to_string()
            .contains("(1 of 2 masters granted, 0 held by another, 0 failed, 1 pending)"),
        "{plain}"
    );
}
