//! TLS to the masters (feature `tls`), against real `redis-server` processes that speak TLS
//! only, with certificates generated at test time: acquire, extend, release, waiting woken
//! by a release notice, fencing, `init_cluster`, `inspect`, `force_unlock` and
//! `check_masters` over TLS; a client certificate; and the failures: a CA that did not
//! sign the masters' certificates, a server that wants a client certificate, a plain
//! `redis://` URL to a TLS port, and URLs and settings the builder refuses.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts, Tls, Waiting};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redquorum::{ErrorKind, MasterErrorKind, MasterOutcome, Redlock};
use redquorum_testkit::{Mode, Proxy, TlsAuthority};
use support::*;
use tokio::time::Instant;

/// A connection of the test's own to a TLS master.
async fn conn(server: &Server) -> MultiplexedConnection {
    server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A client over the TLS masters of `cluster` that trusts their CA (given as PEM).
fn tls_client(cluster: &Cluster) -> redquorum::Builder {
    client(cluster).tls(Tls::new().ca_pem(cluster.tls_ca_pem().unwrap()))
}

#[tokio::test]
async fn the_testkit_starts_tls_only_masters() {
    let cluster = Cluster::start_tls(1).await.unwrap();
    let server = cluster.server(0);
    assert!(server.is_tls());
    assert!(
        server.url().starts_with("rediss://127.0.0.1:"),
        "{}",
        server.url()
    );
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn(server).await)
        .await
        .unwrap();
    assert_eq!(pong, "PONG");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn(server).await)
        .await
        .unwrap();
    assert!(
        info.contains(&format!("tcp_port:{}", server.port())),
        "{info}"
    );
    // The CA is exposed as PEM and as a file, the same certificate.
    let file = std::fs::read(cluster.tls_ca_file().unwrap()).unwrap();
    assert_eq!(file, cluster.tls_ca_pem().unwrap());
    // The fault commands go over TLS too.
    cluster.server(0).flushall().await.unwrap();
}

#[tokio::test]
async fn acquire_extend_and_release_over_tls() {
    let cluster = Cluster::start_tls(3).await.unwrap();
    let client = tls_client(&cluster).build().unwrap();
    let key = unique_key("tls");
    let lease = client.acquire(&key).await.unwrap();
    assert!(
        lease
            .masters()
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
            >= 2
    );
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, lease.value())
    })
    .await;

    let extended = lease.extend_with(Duration::from_secs(4)).await.unwrap();
    assert!(
        extended
            .masters()
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
            >= 2,
        "{extended:?}"
    );
    let pttl: i64 = conn(cluster.server(0)).await.pttl(&key).await.unwrap();
    assert!(pttl > 0 && pttl <= 4000, "{pttl}");

    let report = lease.release().await.unwrap();
    assert!(
        report
            .masters()
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
            >= 2,
        "{report:?}"
    );
    wait_until(Duration::from_secs(2), "released everywhere", || {
        gone_everywhere(&cluster, &key)
    })
    .await;
}

#[tokio::test]
async fn the_ca_can_be_given_as_a_file() {
    let cluster = Cluster::start_tls(3).await.unwrap();
    let client = client(&cluster)
        .tls(Tls::new().ca_file(cluster.tls_ca_file().unwrap()))
        .build()
        .unwrap();
    let lease = client.try_acquire(&unique_key("ca_file")).await.unwrap();
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_url_can_name_its_masters_own_ca_and_client_certificate() {
    let authority = TlsAuthority::generate().unwrap();
    let options = ServerOptions::new()
        .tls(authority.clone())
        .tls_auth_clients(true);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    let with_files = |url: &String| {
        format!(
            "{url}?tls_ca_file={}&tls_cert_file={}&tls_key_file={}",
            authority.ca_file().display(),
            authority.client_cert_file().display(),
            authority.client_key_file().display()
        )
    };
    // The URLs' files take the place of the builder's (here, a CA that signed nothing).
    let stranger = TlsAuthority::generate().unwrap();
    let client = Redlock::builder()
        .quarantine(false)
        .masters(cluster.urls().iter().map(with_files))
        .tls(Tls::new().ca_pem(stranger.ca_pem()))
        .build()
        .unwrap();
    let lease = client.try_acquire(&unique_key("url_files")).await.unwrap();
    assert!(
        lease
            .masters()
            .iter()
            .filter(|r| r.outcome().is_granted())
            .count()
            >= 2
    );
    lease.release().await.unwrap();

    // A certificate without its key, and TLS files on a plain URL, are refused.
    let url = &cluster.urls()[0];
    let half = format!(
        "{url}?tls_cert_file={}",
        authority.client_cert_file().display()
    );
    let err = Redlock::builder().master(&half).build().unwrap_err();
    assert!(err.to_string().contains("tls_key_file"), "{err}");
    let plain = with_files(url).replacen("rediss://", "redis://", 1);
    let err = Redlock::builder().master(&plain).build().unwrap_err();
    assert!(err.to_string().contains("rediss://"), "{err}");
}

// Checks I10 (no release is missed while subscribing).
#[tokio::test]
async fn a_release_notice_over_tls_wakes_the_waiter() {
    let cluster = Cluster::start_tls(3).await.unwrap();
    let holder = tls_client(&cluster).ttl("30s").build().unwrap();
    // Neither its 60 s fallback timer nor the holder's 30 s TTL can let it in within its
    // 20 s budget: only the release notice, received over TLS, can. (Without hand-off: a
    // queued waiter would be handed the lock instead.)
    let waiter = tls_client(&cluster)
        .retry(Retry::new().delay("60s").jitter("0s").wait("20s"))
        .waiting(Waiting::new().handoff(false))
        .build()
        .unwrap();
    let key = unique_key("tls_wake");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move { (waiter.acquire(&key).await, Instant::now()) }
    });
    let channel = format!("redquorum:released:{key}");
    wait_until(Duration::from_secs(5), "the waiter subscribed", || {
        let (cluster, channel) = (&cluster, channel.clone());
        async move {
            let mut n = 0;
            for server in cluster.servers() {
                let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut conn(server).await)
                    .await
                    .unwrap();
                n += subscribers;
            }
            n >= 2
        }
    })
    .await;
    let released_at = Instant::now();
    lease.release().await.unwrap();
    let (acquired, acquired_at) = waiting.await.unwrap();
    let lease = acquired.unwrap();
    assert!(acquired_at > released_at);
    lease.release().await.unwrap();
}

#[tokio::test]
async fn init_cluster_fencing_inspect_and_force_unlock_over_tls() {
    let options = ServerOptions::new()
        .tls(TlsAuthority::generate().unwrap())
        .persistence(Persistence::AofAlways);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    let fenced = || {
        Redlock::builder()
            .masters(cluster.urls())
            .ttl("5s")
            .timeouts(Timeouts::new().node("200ms"))
            .retry(Retry::new().delay("5ms"))
            .tls(Tls::new().ca_pem(cluster.tls_ca_pem().unwrap()))
            .fencing(true)
    };
    let init = fenced().build().unwrap().init_cluster().await.unwrap();
    assert!(!init.to_string().is_empty());
    let client = fenced().label("tls-holder").build().unwrap();
    let key = unique_key("tls_fenced");
    let first = client.try_acquire(&key).await.unwrap();
    let token = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = client.try_acquire(&key).await.unwrap();
    assert!(second.fencing_token().unwrap() > token);
    // A quorum granted it; the third master's grant may still be on its way, and the
    // force-unlock below must find the lock on all three.
    wait_until(Duration::from_secs(2), "held everywhere", || {
        held_everywhere(&cluster, &key, second.value())
    })
    .await;

    let inspection = client.inspect(&key).await.unwrap();
    assert_eq!(inspection.holder(), Some(second.value()), "{inspection}");
    let report = client.force_unlock(&key, second.value()).await.unwrap();
    assert_eq!(report.deleted(), 3, "{report:?}");
    assert!(gone_everywhere(&cluster, &key).await);
    drop(second);
}

#[tokio::test]
async fn check_masters_reads_every_master_over_tls() {
    let cluster = Cluster::start_tls(3).await.unwrap();
    let client = tls_client(&cluster).build().unwrap();
    let report = client.check_masters().await;
    assert_eq!(report.masters().len(), 3);
    for master in report.masters() {
        assert!(master.is_reachable(), "{master}");
        assert!(master.facts().version.as_deref().is_some(), "{master}");
    }
}

#[tokio::test]
async fn a_client_certificate_is_presented_to_masters_that_require_one() {
    let authority = TlsAuthority::generate().unwrap();
    let options = ServerOptions::new()
        .tls(authority.clone())
        .tls_auth_clients(true);
    let cluster = Cluster::start_with(3, &options).await.unwrap();

    let with_cert = tls_client(&cluster)
        .tls(
            Tls::new().client_cert_files(authority.client_cert_file(), authority.client_key_file()),
        )
        .build()
        .unwrap();
    let lease = with_cert.try_acquire(&unique_key("mtls")).await.unwrap();
    lease.release().await.unwrap();
    let with_pem = tls_client(&cluster)
        .tls(Tls::new().client_cert_pem(authority.client_cert_pem(), authority.client_key_pem()))
        .build()
        .unwrap();
    let lease = with_pem.try_acquire(&unique_key("mtls_pem")).await.unwrap();
    lease.release().await.unwrap();

    // Without one, the masters refuse the handshake: a permanent failure that says what
    // to give.
    let without = tls_client(&cluster).build().unwrap();
    let err = without
        .acquire_with(
            &unique_key("mtls_none"),
            &redquorum::AcquireOptions::new().wait_timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(err.attempts(), 1, "{err}");
    assert!(err.to_string().contains("client_cert_pem"), "{err}");
}

#[tokio::test]
async fn a_ca_that_did_not_sign_the_masters_is_a_clear_permanent_error() {
    let cluster = Cluster::start_tls(3).await.unwrap();
    let stranger = TlsAuthority::generate().unwrap();
    let client = client(&cluster)
        .timeouts(Timeouts::new().connect("2s"))
        .tls(Tls::new().ca_pem(stranger.ca_pem()))
        .build()
        .unwrap();
    let key = unique_key("wrong_ca");
    // A waiting acquire with a long budget ends after its first attempt: no master can
    // ever be trusted until the CA is changed.
    let err = client
        .acquire_with(
            &key,
            &redquorum::AcquireOptions::new().wait_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(err.attempts(), 1, "{err}");
    let message = err.to_string();
    assert!(message.contains("Tls::ca_pem"), "{message}");
    // The round ends once failures alone leave no quorum: a third master may be pending.
    let mut failed = 0;
    for (report, url) in err.masters().iter().zip(cluster.urls()) {
        assert_eq!(report.master(), url);
        match report.outcome() {
            MasterOutcome::Failed(e) => {
                assert_eq!(e.kind(), MasterErrorKind::Tls, "{e}");
                assert!(e.kind().is_permanent());
                assert!(e.to_string().contains("not signed by a trusted CA"), "{e}");
                assert!(message.contains(&url), "{message}");
                failed += 1;
            }
            MasterOutcome::Pending => {}
            other => panic!("{url}: {other}"),
        }
    }
    assert!(failed >= 2, "{message}");
    // Asked again, the masters (now known to fail) answer the same at once.
    let again = client.try_acquire(&key).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Tls, "{again}");

    // The health check and the administration say the same.
    let report = client.check_masters().await;
    for master in report.masters() {
        assert!(!master.is_reachable(), "{master}");
        assert_eq!(master.error().unwrap().kind(), MasterErrorKind::Tls);
        assert!(master.to_string().contains("over TLS"), "{master}");
    }
    let init = client.init_cluster().await.unwrap_err();
    assert_eq!(init.kind(), ErrorKind::Tls, "{init}");
    assert!(!init.is_retryable());
}

#[tokio::test]
async fn a_plain_url_to_a_tls_port_fails_and_says_to_use_rediss() {
    let cluster = Cluster::start_tls(1).await.unwrap();
    let plain = cluster.server(0).url().replacen("rediss://", "redis://", 1);
    let client = Redlock::builder()
        .quarantine(false)
        .master(&plain)
        .timeouts(Timeouts::new().connect("2s"))
        .build()
        .unwrap();
    let err = client.try_acquire(&unique_key("plain")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.to_string().contains("rediss://"), "{err}");
}

#[tokio::test]
async fn the_builder_refuses_unsafe_or_useless_tls_settings() {
    let cluster = Cluster::start_tls(1).await.unwrap();
    let url = cluster.server(0).url();
    let refused = |builder: redquorum::Builder| builder.build().unwrap_err();

    // Certificate checks off: refused, naming what to do instead.
    let insecure = refused(Redlock::builder().master(format!("{url}/#insecure")));
    assert!(
        (insecure.setting() == Some("masters") && insecure.to_string().contains("cannot be used")),
        "{insecure}"
    );
    assert!(insecure.to_string().contains("Tls::ca_pem"), "{insecure}");

    // A CA that is no certificate; a file that is not there.
    let garbage = refused(
        Redlock::builder()
            .master(&url)
            .tls(Tls::new().ca_pem("not a certificate")),
    );
    assert!((garbage.setting() == Some("tls_ca_pem")), "{garbage}");
    let missing = refused(
        Redlock::builder()
            .master(&url)
            .tls(Tls::new().ca_file("/nonexistent/ca.pem")),
    );
    assert!((missing.setting() == Some("tls_ca_file")), "{missing}");
    assert!(
        missing.to_string().contains("/nonexistent/ca.pem"),
        "{missing}"
    );

    // A file far too large for PEM, or a device that never ends, is not read into memory.
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(redquorum::limits::MAX_PEM_FILE_LEN + 1)
        .unwrap();
    for file in [huge.as_path(), std::path::Path::new("/dev/zero")] {
        let err = refused(
            Redlock::builder()
                .master(&url)
                .tls(Tls::new().ca_file(file)),
        );
        assert!((err.setting() == Some("tls_ca_file")), "{err}");
        assert!(err.to_string().contains("larger than"), "{err}");
    }

    // A client key that is no key.
    let authority = cluster.tls().unwrap();
    let no_key = refused(
        Redlock::builder()
            .master(&url)
            .tls(Tls::new().client_cert_pem(authority.client_cert_pem(), "no key here")),
    );
    assert!(
        (no_key.setting().is_some_and(|s| s.starts_with("tls_"))),
        "{no_key}"
    );
    // A key of another certificate: every handshake would fail, so it is refused at once.
    let stranger = TlsAuthority::generate().unwrap();
    let mismatched = refused(Redlock::builder().master(&url).tls(
        Tls::new().client_cert_files(authority.client_cert_file(), stranger.client_key_file()),
    ));
    assert!(
        (mismatched.setting() == Some("tls_client_cert_files")),
        "{mismatched}"
    );
    assert!(
        mismatched.to_string().contains("does not belong"),
        "{mismatched}"
    );
    // A CA block that holds no certificate is named as the CA setting, not the URL.
    let broken =
        refused(Redlock::builder().master(&url).tls(
            Tls::new().ca_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        ));
    assert!((broken.setting() == Some("tls_ca_pem")), "{broken}");

    // TLS settings for masters without TLS: the URLs must say rediss://.
    let plain = refused(
        Redlock::builder()
            .master("redis://127.0.0.1:1")
            .tls(Tls::new().ca_pem(authority.ca_pem())),
    );
    assert!(
        (plain.setting().is_some_and(|s| s.starts_with("tls_"))),
        "{plain}"
    );
    assert!(plain.to_string().contains("rediss://"), "{plain}");
}

#[tokio::test]
async fn a_handshake_the_network_stalls_stays_retryable() {
    let cluster = Cluster::start_tls(1).await.unwrap();
    let proxy = Proxy::for_server(cluster.server(0)).await.unwrap();
    assert!(
        proxy.url().starts_with("rediss://127.0.0.1:"),
        "{}",
        proxy.url()
    );
    let through = |connect_timeout: &str| {
        Redlock::builder()
            .quarantine(false)
            .master(proxy.url())
            .timeouts(Timeouts::new().connect(connect_timeout).node("200ms"))
            .tls(Tls::new().ca_pem(cluster.tls_ca_pem().unwrap()))
            .build()
            .unwrap()
    };
    // Through the proxy, TLS works end to end (the certificate names 127.0.0.1).
    let lease = through("2s")
        .try_acquire(&unique_key("proxied"))
        .await
        .unwrap();
    lease.release().await.unwrap();

    // A handshake that gets no answer is an outage, not a certificate problem.
    proxy.set_mode(Mode::Blackhole);
    let err = through("300ms")
        .try_acquire(&unique_key("stalled"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable(), "{err}");
    match err.masters()[0].outcome() {
        MasterOutcome::Failed(e) => {
            assert_eq!(e.kind(), MasterErrorKind::Timeout, "{e}");
            assert!(!e.kind().is_permanent());
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_tls_url_to_a_plain_port_times_out_and_says_why_it_may() {
    // The server reads the client's hello as the start of a command and waits for more:
    // the handshake times out, which a network fault would do too, so it stays retryable.
    let cluster = Cluster::start(1).await.unwrap();
    let url = cluster.server(0).url().replacen("redis://", "rediss://", 1);
    let authority = TlsAuthority::generate().unwrap();
    let client = Redlock::builder()
        .quarantine(false)
        .master(&url)
        .timeouts(Timeouts::new().connect("300ms"))
        .tls(Tls::new().ca_pem(authority.ca_pem()))
        .build()
        .unwrap();
    let err = client
        .try_acquire(&unique_key("tls_to_plain"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("does not speak TLS on this port"),
        "{err}"
    );
}

#[tokio::test]
async fn no_public_type_shows_the_client_key() {
    let authority = TlsAuthority::generate().unwrap();
    let options = ServerOptions::new()
        .tls(authority.clone())
        .tls_auth_clients(true);
    let cluster = Cluster::start_with(3, &options).await.unwrap();
    let key = String::from_utf8(authority.client_key_pem().to_vec()).unwrap();
    // The key's base64 body, line by line: none may appear anywhere.
    let secrets: Vec<&str> = key
        .lines()
        .filter(|line| !line.starts_with("-----") && line.len() > 16)
        .collect();
    assert!(!secrets.is_empty());
    let builder = || {
        tls_client(&cluster)
            .tls(Tls::new().client_cert_pem(authority.client_cert_pem(), key.as_str()))
    };
    let mut shown = vec![format!("{:?}", builder()), format!("{authority:?}")];
    shown.push(format!("{options:?}"));
    let client = builder().build().unwrap();
    shown.push(format!("{client:?} {client:#?}"));
    let lease = client.acquire(&unique_key("key_debug")).await.unwrap();
    shown.push(format!("{lease:?}"));
    shown.push(format!("{:?}", client.check_masters().await));
    lease.release().await.unwrap();
    let refused = builder()
        .tls(Tls::new().client_cert_pem("no certificate", key.as_str()))
        .build()
        .unwrap_err();
    shown.push(format!("{refused:?} {refused}"));
    for text in &shown {
        for secret in &secrets {
            assert!(!text.contains(secret), "the client key shows in: {text}");
        }
    }
}

#[tokio::test]
async fn a_host_the_certificate_does_not_name_is_a_clear_permanent_error() {
    // The masters' certificate names 127.0.0.1 and localhost; ::ffff:127.0.0.1 reaches the
    // same socket, but is another address, which it does not name.
    let cluster = Cluster::start_tls(3).await.unwrap();
    let mapped: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| url.replacen("127.0.0.1", "[::ffff:127.0.0.1]", 1))
        .collect();
    let client = Redlock::builder()
        .quarantine(false)
        .masters(&mapped)
        .timeouts(Timeouts::new().connect("2s"))
        .tls(Tls::new().ca_pem(cluster.tls_ca_pem().unwrap()))
        .build()
        .unwrap();
    let err = client
        .acquire_with(
            &unique_key("wrong_host"),
            &redquorum::AcquireOptions::new().wait_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(err.attempts(), 1, "{err}");
    assert!(
        err.to_string()
            .contains("not issued for the host in its URL"),
        "{err}"
    );
}

#[tokio::test]
async fn a_minority_of_masters_failing_tls_leaves_the_others_to_grant() {
    let trusted = Cluster::start_tls(2).await.unwrap();
    let stranger = Cluster::start_tls(1).await.unwrap();
    let mut urls = trusted.urls();
    urls.extend(stranger.urls());
    let client = Redlock::builder()
        .quarantine(false)
        .masters(&urls)
        .timeouts(Timeouts::new().connect("2s").node("500ms"))
        .tls(Tls::new().ca_pem(trusted.tls_ca_pem().unwrap()))
        .build()
        .unwrap();
    // The stranger's master is known to fail first (it then fails at once, before the
    // others answer): its failure alone must not end the acquire.
    let report = client.check_masters().await;
    let third = &report.masters()[2];
    assert!(!third.is_reachable(), "{third}");
    assert_eq!(
        third.error().unwrap().kind(),
        MasterErrorKind::Tls,
        "{third}"
    );
    let lease = client
        .acquire_with(
            &unique_key("tls_minority"),
            &redquorum::AcquireOptions::new().wait_timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let reports = lease.masters();
    assert!(reports[0].outcome().is_granted(), "{lease:?}");
    assert!(reports[1].outcome().is_granted(), "{lease:?}");
    match reports[2].outcome() {
        MasterOutcome::Failed(e) => assert_eq!(e.kind(), MasterErrorKind::Tls, "{e}"),
        other => panic!("{}: {other}", reports[2].master()),
    }
    lease.release().await.unwrap();
}
