//! The testkit's fault tools against real servers: each one does what the scenarios
//! rely on.

use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum_testkit::{ClockJump, Latency, Mode, Proxy, Server, ServerOptions, monotonic_ns};
use tokio::time::{Instant, timeout};

use crate::support::raw;

async fn pttl(url: &str, key: &str) -> i64 {
    raw(url).await.pttl(key).await.unwrap()
}

#[tokio::test]
async fn monotonic_ns_advances() {
    let a = monotonic_ns().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let b = monotonic_ns().unwrap();
    assert!(b >= a + 4_000_000, "{a} {b}");
}

#[tokio::test]
async fn clock_jumps_shift_only_matching_keys_with_an_expiry() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let url = server.url();
    let mut conn = raw(&url).await;
    let _: () = conn.pset_ex("lock:a", "v", 10_000).await.unwrap();
    let _: () = conn.set("lock:forever", "v").await.unwrap();
    let _: () = conn.pset_ex("other", "v", 10_000).await.unwrap();
    let n = server
        .jump_clock("lock:*", ClockJump::Forward(Duration::from_secs(8)))
        .await
        .unwrap();
    assert_eq!(n, 1);
    let left = pttl(&url, "lock:a").await;
    assert!((1..=2_000).contains(&left), "{left}");
    assert_eq!(pttl(&url, "lock:forever").await, -1);
    assert!(pttl(&url, "other").await > 9_000);
    server
        .jump_clock("lock:*", ClockJump::Forward(Duration::from_secs(60)))
        .await
        .unwrap();
    crate::support::wait_until(Duration::from_secs(1), "key expired", || {
        let url = url.clone();
        async move { pttl(&url, "lock:a").await == -2 }
    })
    .await;
    let _: () = conn.pset_ex("lock:b", "v", 1_000).await.unwrap();
    server
        .jump_clock("lock:*", ClockJump::Backward(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(pttl(&url, "lock:b").await > 5_000);
}

#[tokio::test]
async fn a_stale_snapshot_restart_loses_later_writes() {
    let mut server = Server::start(&ServerOptions::new()).await.unwrap();
    let url = server.url();
    let _: () = raw(&url).await.set("before", "1").await.unwrap();
    let snapshot = server.snapshot().await.unwrap();
    assert!(snapshot.path().exists());
    let _: () = raw(&url).await.set("after", "1").await.unwrap();
    server.restart_from(&snapshot).await.unwrap();
    assert_eq!(
        crate::support::get(&url, "before").await.as_deref(),
        Some("1")
    );
    assert_eq!(crate::support::get(&url, "after").await, None);
}

#[tokio::test]
async fn flushall_debug_sleep_and_client_pause() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let url = server.url();
    let _: () = raw(&url).await.set("k", "1").await.unwrap();
    server.flushall().await.unwrap();
    assert_eq!(crate::support::get(&url, "k").await, None);

    let mut conn = raw(&url).await;
    let started = Instant::now();
    let (slept, stalled) = tokio::join!(server.debug_sleep(Duration::from_millis(300)), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        let _: () = conn.set("k", "2").await.unwrap();
        t.elapsed()
    });
    slept.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(stalled >= Duration::from_millis(150), "{stalled:?}");

    server
        .client_pause(Duration::from_millis(300))
        .await
        .unwrap();
    let t = Instant::now();
    let _: () = conn.set("k", "3").await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn the_proxy_passes_delays_blackholes_and_resets() {
    let server = Server::start(&ServerOptions::new()).await.unwrap();
    let proxy = Proxy::for_server(&server).await.unwrap();
    assert_eq!(proxy.mode(), Mode::Pass);
    let url = proxy.url();
    let mut conn = raw(&url).await;
    let _: () = conn.set("k", "1").await.unwrap();
    assert_eq!(
        crate::support::get(&server.url(), "k").await.as_deref(),
        Some("1")
    );

    proxy.set_mode(Mode::Delay {
        to_server: Latency::ZERO,
        to_client: Latency::new(Duration::from_millis(200), Duration::ZERO),
    });
    let t = Instant::now();
    let _: () = conn.set("k", "2").await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(190),
        "{:?}",
        t.elapsed()
    );

    proxy.set_mode(Mode::Blackhole);
    let lost = timeout(Duration::from_millis(300), conn.set::<_, _, ()>("k", "3")).await;
    assert!(lost.is_err(), "a blackholed request was answered");
    assert_eq!(
        crate::support::get(&server.url(), "k").await.as_deref(),
        Some("2")
    );
    proxy.heal();
    // The connection that lost data is reset; a new one works.
    let mut fresh = raw(&url).await;
    let _: () = fresh.set("k", "4").await.unwrap();
    assert!(
        proxy.stats().lost >= 1 && proxy.stats().resets >= 1,
        "{:?}",
        proxy.stats()
    );

    proxy.set_mode(Mode::Reset);
    let refused = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await;
    assert!(refused.is_err(), "a reset proxy let a connection through");
    proxy.heal();
    let _: () = raw(&url).await.set("k", "5").await.unwrap();

    proxy.set_mode(Mode::Drop { probability: 1.0 });
    let dropped = timeout(Duration::from_secs(2), async {
        let mut c = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await?;
        c.set::<_, _, ()>("k", "6").await
    });
    assert!(
        !matches!(dropped.await, Ok(Ok(()))),
        "a dropped request succeeded"
    );
    proxy.heal();
}

#[tokio::test]
async fn the_proxy_refuses_non_loopback_targets() {
    let target = "192.0.2.1:6379".parse().unwrap();
    assert!(Proxy::start(target).await.is_err());
}

/// Whether `pid` is gone or a zombie (dead, waiting to be reaped).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A scenario that panics with masters, the checker store, proxies and a frozen client
/// process running leaves none of them behind: every one is stopped by PID on unwind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_scenario_leaves_no_process_behind() {
    let (tx, rx) = tokio::sync::oneshot::channel::<Vec<u32>>();
    let task = tokio::spawn(async move {
        let setup =
            crate::harness::Setup::new("T", "panics mid-run", crate::harness::Expect::Hold, 3)
                .proxies();
        let mut env = crate::harness::Env::start(setup).await;
        let resource = env.resource(0);
        let args = vec![
            "--masters".to_owned(),
            env.urls().join(","),
            "--store".to_owned(),
            env.store.url(),
            "--resource".to_owned(),
            resource,
            "--hold-ms".to_owned(),
            "60000".to_owned(),
        ];
        let client = crate::process::ClientProcess::spawn("T-proc", &args, &env.history);
        client
            .wait_for(crate::event::Op::CsStart, Duration::from_secs(10))
            .await;
        client.pause();
        env.cluster.server_mut(1).pause().unwrap();
        let mut pids: Vec<u32> = env
            .cluster
            .servers()
            .iter()
            .filter_map(Server::pid)
            .collect();
        pids.push(env.store.pid().unwrap());
        pids.push(u32::try_from(client.pid()).unwrap());
        tx.send(pids).unwrap();
        panic!("a scenario fails mid-run");
    });
    let pids = rx.await.unwrap();
    assert_eq!(pids.len(), 5);
    assert!(task.await.unwrap_err().is_panic());
    crate::support::wait_until(Duration::from_secs(5), "every process stopped", || {
        let all = pids.iter().all(|&p| dead(p));
        async move { all }
    })
    .await;
}
