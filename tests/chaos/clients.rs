//! Client processes frozen by `SIGSTOP`: inside the critical section past the TTL (S12,
//! known unsafe for any lease lock) and between sending the SETs and reading the replies
//! (S13, which the validity check must reject).

use redquorum::Retry;
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum_testkit::{Latency, Mode, Persistence};
use tokio::time::sleep;

use crate::event::Op;
use crate::harness::*;
use crate::process::ClientProcess;

/// The command line of a client process; `resource` may list several, comma-separated.
pub fn args(urls: &[String], store: &str, resource: &str, extra: &[(&str, String)]) -> Vec<String> {
    let mut out = vec![
        "--masters".to_owned(),
        urls.join(","),
        "--store".to_owned(),
        store.to_owned(),
        "--resource".to_owned(),
        resource.to_owned(),
    ];
    for (flag, value) in extra {
        out.push((*flag).to_owned());
        // An empty value marks a switch such as `--fencing`.
        if !value.is_empty() {
            out.push(value.clone());
        }
    }
    out
}

/// S12: a client process is frozen inside its critical section (after reading the
/// counter) for longer than its TTL; another client takes the lock meanwhile; the frozen
/// one wakes up and writes. Every lease-based lock fails this: checkers 1 and 2 must fire.
pub async fn s12(n: usize, expect: Expect) -> Outcome {
    s12_with(n, expect, Guards::BR).await
}

/// S12 with `guards`. With fencing the masters are durable and carry an old data epoch,
/// so the fresh processes vote at once; the frozen client's write must then be refused at
/// the fenced register.
pub async fn s12_with(n: usize, expect: Expect, guards: Guards) -> Outcome {
    frozen_inside("S12", n, expect, guards, false).await
}

/// S12 as `code`, the client re-entering its lease (`--reenter`) before it is frozen when
/// `reenter` is set, so that it wakes up and writes under the re-entry guard (S26f).
pub async fn frozen_inside(
    code: &'static str,
    n: usize,
    expect: Expect,
    guards: Guards,
    reenter: bool,
) -> Outcome {
    let inside = if reenter {
        "its re-entered section"
    } else {
        "its section"
    };
    let name = format!(
        "client SIGSTOPped inside {inside} past the TTL{}",
        guards.label()
    );
    let mut setup = Setup::new(code, name, expect, n);
    if guards.fencing {
        setup = setup.persistence(Persistence::AofAlways);
    }
    let mut env = Env::start(setup).await;
    if guards.quarantine {
        seed_epochs(&env.cluster).await;
    }
    let resource = env.resource(0);
    let urls = env.urls();
    let ttl = Duration::from_millis(800);
    let mut extra = vec![
        ("--ttl-ms", ttl.as_millis().to_string()),
        ("--hold-ms", "500".into()),
    ];
    if guards.fencing {
        extra.push(("--fencing", String::new()));
    } else if guards.quarantine {
        extra.push(("--quarantine", String::new()));
    }
    if reenter {
        extra.push(("--reenter", String::new()));
    }
    let client = ClientProcess::spawn(
        &format!("{code}-proc"),
        &args(&urls, &env.store.url(), &resource, &extra),
        &env.history,
    );
    // Frozen once its reads are done, during its `--hold-ms` of work.
    client.wait_for(Op::CsRead, Duration::from_secs(10)).await;
    client.pause();
    // The frozen client's keys expire; a contender gets in, and stays inside until the
    // thawed client has written and left.
    let contender = build(
        guards.apply(
            client_over(urls)
                .ttl(ttl)
                .retry(Retry::new().attempts(500).wait(ttl * 3)),
            ttl,
        ),
        None,
    );
    let mut store = env.store().await;
    let rec = env.history.recorder(format!("{code}-contender"), &resource);
    match enter(&contender, rec, &mut store).await {
        Ok(h) => {
            client.resume();
            client.wait_for(Op::CsEnd, Duration::from_secs(10)).await;
            h.leave(&mut store).await;
        }
        Err((_, e)) => {
            client.resume();
            env.note(format!("contender failed: {:?}", e.kind()));
        }
    }
    assert!(
        client.wait(Duration::from_secs(10)).await,
        "client process failed"
    );
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_client_paused_inside_its_section_n3() {
    // The contender must get in while the frozen client is inside (checker 1); fencing
    // (checker 3) keeps the storage safe here, the lock itself cannot.
    s12(3, Expect::Detect(Checker::Overlap)).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_client_paused_inside_its_section_n5() {
    s12(5, Expect::Detect(Checker::Overlap)).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_client_paused_inside_its_section_fenced_n3() {
    s12_with(3, Expect::Fenced, Guards::RSV_F).await.check();
}

/// S13: replies to the client process's SETs are held back 200 ms by the proxies; once the
/// SETs have reached a majority, the client is frozen for longer than its TTL. When it
/// wakes up, its acquire must fail (validity used up, or node timeouts), never succeed,
/// while a contender holds the lock.
pub async fn s13(n: usize, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S13",
        "client SIGSTOPped between SETs and replies",
        expect,
        n,
    )
    .proxies();
    let mut env = Env::start(setup).await;
    let resource = env.resource(0);
    let ttl = Duration::from_millis(1500);
    env.ttl_max = ttl;
    for proxy in &env.proxies {
        proxy.set_mode(Mode::Delay {
            to_server: Latency::ZERO,
            to_client: Latency::new(Duration::from_millis(200), Duration::ZERO),
        });
    }
    let client = ClientProcess::spawn(
        "S13-proc",
        &args(
            &env.urls(),
            &env.store.url(),
            &resource,
            &[
                ("--ttl-ms", ttl.as_millis().to_string()),
                ("--node-timeout-ms", "800".into()),
                ("--attempts", "1".into()),
            ],
        ),
        &env.history,
    );
    client.wait_for(Op::AcqStart, Duration::from_secs(10)).await;
    let direct = env.cluster.urls();
    let q = n / 2 + 1;
    let key = resource.clone();
    crate::support::wait_until(
        Duration::from_secs(5),
        "the SETs reached a majority",
        || {
            let (direct, key) = (direct.clone(), key.clone());
            async move {
                let mut set = 0;
                for url in &direct {
                    let v: Option<String> = crate::support::raw(url).await.get(&key).await.unwrap();
                    set += usize::from(v.is_some());
                }
                set >= q
            }
        },
    )
    .await;
    client.pause();
    // A contender over direct links takes the lock once the frozen client's keys expire,
    // and is still inside when the frozen client wakes up.
    let contender = build(
        client_over(direct)
            .ttl(ttl)
            .retry(Retry::new().attempts(1000).wait(ttl * 2)),
        None,
    );
    let mut store = env.store().await;
    let rec = env.history.recorder("S13-contender", &resource);
    match enter(&contender, rec, &mut store).await {
        Ok(h) => {
            sleep(Duration::from_millis(100)).await;
            client.resume();
            assert!(
                client.wait(Duration::from_secs(10)).await,
                "client process failed"
            );
            h.leave(&mut store).await;
        }
        Err((_, e)) => {
            client.resume();
            env.violation(format!("contender could not acquire: {:?}", e.kind()));
            assert!(
                client.wait(Duration::from_secs(10)).await,
                "client process failed"
            );
        }
    }
    let history = env.history.snapshot();
    let frozen: Vec<_> = history
        .iter()
        .filter(|e| e.client == "S13-proc" && matches!(e.op, Op::AcqOk | Op::AcqFail))
        .collect();
    match frozen.first() {
        Some(e) if e.op == Op::AcqFail => env.note(format!("frozen client refused: {}", e.detail)),
        Some(_) => env.violation("the frozen client's stale acquisition succeeded"),
        None => env.violation("the frozen client never finished its acquire"),
    }
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_client_paused_during_acquire_n3() {
    s13(3, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_client_paused_during_acquire_n5() {
    s13(5, Expect::Hold).await.check();
}
