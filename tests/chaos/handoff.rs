//! H1–H5: hand-off to the next waiter and the fair lock (design.md §17) under faults.
//!
//! Scripted waiters queue one by one: each next one starts only once the one before was
//! seen in the lock's queue (`redquorum:queue:<key>`) on a quorum of masters, and the
//! suite then records `queued` for it. For a fair waiter that is after its ticket was
//! issued (a registration reaches the queue only where its ticket was written), so the
//! FIFO checker knows which waiter must come first. Looping fair waiters (H3f, H4f)
//! record `queued` when the library traces that the call waits in the queue, which for
//! a fair call it does once its ticket was written on a quorum (see [`QueuedProbe`]).
//! Besides overlap and lost updates, the queue checkers run: **stalled** (once the lock
//! is free with a live waiter queued, the next grant comes within one TTL and one waiter
//! TTL, plus scheduling slack) and, for fair waiters, **fifo** (no live waiter is
//! overtaken by one that started after its ticket was issued), which must judge a minimum
//! number of pairs of fair calls in a run that must hold it.

use redquorum::{Retry, Waiting};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redis::AsyncCommands as _;
use redquorum::{AcquireOptions, Mutant, Redlock};
use redquorum_testkit::{Mode, Proxy};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tracing::instrument::WithSubscriber as _;

use crate::clients::args;
use crate::event::Op;
use crate::harness::*;
use crate::history::{History, now_ns};
use crate::process::ClientProcess;

/// The waiters' liveness TTL: a refresh every 53 ms.
pub const WAITER_TTL: Duration = Duration::from_millis(160);
/// A waiting call's budget: long enough for a queue of four behind a killed holder, and
/// to outlast a stall by the hand-off bound.
const WAIT: Duration = Duration::from_secs(4);
/// Scheduling slack on top of the hand-off bound (two cores shared by masters, client
/// processes and the suite).
const SLACK: Duration = Duration::from_millis(300);

/// The hand-off bound of design.md §17 for waiters of the suite's TTL: one TTL plus one
/// waiter TTL plus [`SLACK`]; a killed holder's lock is free `holder_ttl` after its death.
/// A HOLD run judges at least `judged` free locks with a waiter queued.
pub fn bound(holder_ttl: Duration, judged: u64) -> HandoffBound {
    HandoffBound {
        bound: TTL + WAITER_TTL + SLACK,
        holder_ttl,
        judged,
    }
}

/// A waiting client over `urls`: hand-off on (the default), the suite's waiter TTL, a
/// budget of [`WAIT`] and attempts enough never to be the limit.
pub fn queue_client(urls: Vec<String>, mutant: Option<Mutant>) -> Redlock {
    queue_client_waiting(urls, mutant, WAIT)
}

/// [`queue_client`] with a budget of `wait`.
fn queue_client_waiting(urls: Vec<String>, mutant: Option<Mutant>, wait: Duration) -> Redlock {
    build(
        client_over(urls)
            .retry(Retry::new().attempts(100_000).wait(wait))
            .waiting(Waiting::new().waiter_ttl(WAITER_TTL)),
        mutant,
    )
}

/// Opens `client`'s connections before the scenario starts: a throwaway lock, retried for
/// up to 10 s (a cold connection on a loaded machine may miss its first node timeouts).
async fn warm_up(client: &Redlock, prefix: &str) {
    let resource = format!("{prefix}warmup");
    crate::support::wait_until(Duration::from_secs(10), "a client warms up", || {
        let (client, resource) = (client.clone(), resource.clone());
        async move {
            match client.try_acquire(&resource).await {
                Ok(lease) => lease.release().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await;
}

/// The command line of a waiting client process, with `mutant` planted.
fn process_args(
    env: &Env,
    urls: &[String],
    resource: &str,
    fair: bool,
    hold: Duration,
    mutant: Option<Mutant>,
) -> Vec<String> {
    let mut extra = vec![
        ("--waiter-ttl-ms", WAITER_TTL.as_millis().to_string()),
        ("--wait-timeout-ms", WAIT.as_millis().to_string()),
        ("--attempts", "100000".to_owned()),
        ("--node-timeout-ms", NODE_TIMEOUT.as_millis().to_string()),
        ("--ttl-ms", TTL.as_millis().to_string()),
        ("--hold-ms", hold.as_millis().to_string()),
    ];
    if fair {
        extra.push(("--fair", String::new()));
    }
    if let Some(m) = mutant {
        extra.push(("--mutant", format!("{m:?}")));
    }
    args(urls, &env.store.url(), resource, &extra)
}

/// The members of `resource`'s queue on the master at `url` (none when it cannot be
/// reached within a second).
async fn members(url: &str, resource: &str) -> Vec<String> {
    let read = async {
        let mut conn = redis::Client::open(url)
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        conn.zrange::<_, Vec<String>>(format!("redquorum:queue:{resource}"), 0, -1)
            .await
            .ok()
    };
    timeout(Duration::from_secs(1), read)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Waits until `member` is in `resource`'s queue on every master of `on`.
async fn await_member_on(env: &Env, resource: &str, member: &str, on: &[usize]) {
    let urls: Vec<String> = on.iter().map(|&i| env.cluster.server(i).url()).collect();
    crate::support::wait_until(
        Duration::from_secs(10),
        &format!("{member} queued on masters {on:?}"),
        || {
            let (urls, resource, member) = (urls.clone(), resource.to_owned(), member.to_owned());
            async move {
                for url in &urls {
                    if !members(url, &resource).await.contains(&member) {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
}

/// Waits until a member not in `known` is in `resource`'s queue on a quorum of masters,
/// records `queued` for `client`'s call `attempt` then, and returns the member (added to
/// `known`).
async fn await_queued(
    env: &Env,
    resource: &str,
    known: &mut BTreeSet<String>,
    client: &str,
    attempt: u64,
) -> String {
    let urls = env.cluster.urls();
    let quorum = urls.len() / 2 + 1;
    let found = Arc::new(std::sync::Mutex::new(None));
    crate::support::wait_until(
        Duration::from_secs(10),
        &format!("{client} queued on a quorum"),
        || {
            let (urls, resource, known, found) = (
                urls.clone(),
                resource.to_owned(),
                known.clone(),
                Arc::clone(&found),
            );
            async move {
                let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
                for url in &urls {
                    for m in members(url, &resource).await {
                        if !known.contains(&m) {
                            *seen.entry(m).or_default() += 1;
                        }
                    }
                }
                let on_quorum = seen.into_iter().find(|(_, n)| *n >= quorum);
                let done = on_quorum.is_some();
                *found.lock().unwrap() = on_quorum.map(|(m, _)| m);
                done
            }
        },
    )
    .await;
    let member = found.lock().unwrap().take().unwrap();
    env.history
        .mark(client, attempt, resource, Op::Queued, &member);
    known.insert(member.clone());
    member
}

/// One waiting in-process call by `client`: acquire `resource` (fair or not), stay inside
/// for `hold`, write and leave. Records its events as `name`.
fn spawn_waiter(
    env: &Env,
    name: &str,
    resource: &str,
    client: Redlock,
    fair: bool,
    hold: Duration,
) -> JoinHandle<()> {
    let mut rec = env.history.recorder(name, resource);
    let (resource, store_url) = (resource.to_owned(), env.store.url());
    tokio::spawn(async move {
        let mut store = crate::support::raw(&store_url).await;
        if fair {
            rec.acq_start_fair();
        } else {
            rec.acq_start();
        }
        match client
            .acquire_with(&resource, &AcquireOptions::new().fair(fair))
            .await
        {
            Ok(lease) => {
                rec.acq_ok(&lease);
                let held = Held::inside(rec, lease, &mut store).await;
                sleep(hold).await;
                held.leave(&mut store).await;
            }
            Err(e) => rec.acq_fail(&e),
        }
    })
}

/// The waiters of a scripted scenario, as workers the harness joins.
fn waiters(tasks: Vec<JoinHandle<()>>) -> Workers {
    Workers::from_parts(Arc::new(AtomicBool::new(false)), tasks)
}

/// The name of scenario `code`, with `f` for the fair lock.
fn code(base: &'static str, fair: bool) -> &'static str {
    match (base, fair) {
        ("H1", true) => "H1f",
        ("H2", true) => "H2f",
        ("H3", true) => "H3f",
        ("H4", true) => "H4f",
        (other, _) => other,
    }
}

/// H1: five waiter processes queue one by one behind a holder; the process at the head
/// of the queue is SIGKILLed right as the holder releases, so the lock is handed to a
/// dead waiter. The waiters behind it (each inside for `hold`) must get it within the
/// hand-off bound, in ticket order when fair. (Four behind the head: on a loaded machine
/// one release may be judged without a waiter queued, and three judged instants still
/// remain.)
pub async fn h1(fair: bool, hold: Duration, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let code = code("H1", fair);
    let setup = Setup::new(code, "head waiter SIGKILLed at hand-off", expect, 3);
    let mut env = Env::start(setup).await;
    let resource = env.resource(0);
    let urls = env.urls();
    // The holder stays inside while four processes start and queue: a TTL of 5 s, so
    // that a loaded machine cannot make it outlive its lease.
    let holder_ttl = Duration::from_secs(5);
    env.ttl_max = holder_ttl;
    let holder = build(
        client_over(urls.clone())
            .ttl(holder_ttl)
            .waiting(Waiting::new().waiter_ttl(WAITER_TTL)),
        mutant,
    );
    warm_up(&holder, &env.prefix).await;
    let mut store = env.store().await;
    let rec = env.history.recorder(format!("{code}-holder"), &resource);
    let Ok(held) = enter(&holder, rec, &mut store).await else {
        panic!("{code}: the holder could not take a free lock");
    };
    let mut known = BTreeSet::new();
    let mut queued = Vec::new();
    for i in 0..5 {
        let name = format!("{code}-w{i}");
        let process = ClientProcess::spawn(
            &name,
            &process_args(&env, &urls, &resource, fair, hold, mutant),
            &env.history,
        );
        let id = await_queued(&env, &resource, &mut known, &name, 1).await;
        queued.push((id, process));
    }
    // The head: the first member of the queue on master 0 (every master orders the same
    // members the same way).
    let first = members(&env.cluster.server(0).url(), &resource)
        .await
        .into_iter()
        .next()
        .expect("a queue of five");
    let at = queued
        .iter()
        .position(|(id, _)| *id == first)
        .expect("the head is one of the waiters");
    let (_, mut head) = queued.remove(at);
    head.kill(&resource).await;
    held.leave(&mut store).await;
    env.note(format!("killed the head, waiter {at}"));
    let tasks = queued
        .into_iter()
        .map(|(_, process)| {
            tokio::spawn(async move {
                // Ends by itself: served, or out of budget.
                let _ = process.wait(WAIT + Duration::from_secs(5)).await;
            })
        })
        .collect();
    let out = env
        .finish(
            waiters(tasks),
            Checks {
                // The four waiters behind the killed head, served in ticket order: six
                // pairs, of which at least three judged.
                fifo: fair.then_some(3),
                // The holder's release and those of the three waiters behind the next
                // one: four instants, of which at least three judged.
                handoff: Some(bound(TTL, 3)),
                keys_may_expire: true,
                ..Checks::default()
            },
        )
        .await;
    drop(head);
    out
}

/// H2: the holder's process (TTL 3 s) is SIGKILLed inside its section with four waiters
/// queued behind it: the first must get the lock within the hand-off bound of the
/// holder's keys expiring, and the queue drain, in ticket order when fair.
pub async fn h2(fair: bool, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let code = code("H2", fair);
    let setup = Setup::new(code, "holder SIGKILLed with a queue behind it", expect, 3);
    let mut env = Env::start(setup).await;
    // Long enough for four waiters to queue behind it on a loaded machine before it is
    // killed (a holder that outlived its lease inside its section would be an overlap).
    let holder_ttl = Duration::from_secs(3);
    env.ttl_max = holder_ttl;
    let resource = env.resource(0);
    let urls = env.urls();
    let holder_name = format!("{code}-holder");
    let mut holder = ClientProcess::spawn(
        &holder_name,
        &args(
            &urls,
            &env.store.url(),
            &resource,
            &[
                ("--ttl-ms", holder_ttl.as_millis().to_string()),
                ("--hold-ms", "60000".into()),
            ],
        ),
        &env.history,
    );
    holder.wait_for(Op::CsRead, Duration::from_secs(10)).await;
    let mut known = BTreeSet::new();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let name = format!("{code}-w{i}");
        // Waits through the holder's TTL after its death: a budget of 8 s.
        let client = queue_client_waiting(urls.clone(), mutant, Duration::from_secs(8));
        warm_up(&client, &env.prefix).await;
        tasks.push(spawn_waiter(
            &env,
            &name,
            &resource,
            client,
            fair,
            Duration::from_millis(30),
        ));
        await_queued(&env, &resource, &mut known, &name, 1).await;
    }
    holder.kill(&resource).await;
    env.finish(
        waiters(tasks),
        Checks {
            // Every pair of the four waiters, served in ticket order.
            fifo: fair.then_some(6),
            // The releases of the first three waiters (the killed holder's keys may expire
            // after the first waiter is in, so that instant is not always judged).
            handoff: Some(bound(holder_ttl, 3)),
            keys_may_expire: true,
            ..Checks::default()
        },
    )
    .await
}

/// The message of the event the library traces when a refused call's waiter is
/// registered in the lock's queue and the call begins to wait there (src/engine/queue.rs).
/// A fair call traces it only after its ticket was written on a quorum of masters (the
/// strict registration round that issues it); an unfair call after its first
/// registration round, whichever masters took it.
const QUEUED_EVENT: &str = "acquire attempt failed, waiting in the queue";

/// A `tracing` subscriber for one fair acquire call, installed on that call's future only
/// (`WithSubscriber`, so concurrent calls each have their own): at [`QUEUED_EVENT`] it
/// records `queued` for the call, with its waiter id. Only fair calls carry it, since
/// only their event comes after a quorum registered them. A call that never traces the
/// event (the library renamed it, say) is never seen queued: the FIFO checker then
/// judges no pair and a run that needs it fails as broken, not silently clean.
struct QueuedProbe {
    history: History,
    client: String,
    attempt: u64,
    resource: String,
}

/// The fields of an event the probe reads.
#[derive(Default)]
struct QueuedFields {
    message: Option<String>,
    waiter: Option<String>,
}

impl tracing::field::Visit for QueuedFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = Some(format!("{value:?}")),
            "waiter" => self.waiter = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

impl tracing::Subscriber for QueuedProbe {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && metadata.target().starts_with("redquorum")
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        // No span is enabled; an id is needed all the same.
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = QueuedFields::default();
        event.record(&mut fields);
        if fields.message.as_deref() == Some(QUEUED_EVENT) {
            self.history.mark(
                &self.client,
                self.attempt,
                &self.resource,
                Op::Queued,
                fields.waiter.as_deref().unwrap_or(""),
            );
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Looping waiters for H3 and H4: acquire (fair or not), a short section, release, a
/// short pause, until stopped. A fair call records `queued` through a [`QueuedProbe`].
fn spawn_looping(
    env: &mut Env,
    k: usize,
    fair: bool,
    client: impl Fn(usize) -> Redlock,
) -> Workers {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let resource = env.resource(0);
    for i in 0..k {
        let mut rec = env
            .history
            .recorder(format!("{}-w{i}", env.setup.code), &resource);
        let client = client(i);
        let (resource, store_url, stop) = (resource.clone(), env.store.url(), Arc::clone(&stop));
        let mut rng = Rng::new(env.rng.next_u64());
        tasks.push(tokio::spawn(async move {
            let mut store = crate::support::raw(&store_url).await;
            let options = AcquireOptions::new().fair(fair);
            for _ in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let acquired = if fair {
                    rec.acq_start_fair();
                    let probe = QueuedProbe {
                        history: rec.history().clone(),
                        client: rec.client().to_owned(),
                        attempt: rec.attempt(),
                        resource: resource.clone(),
                    };
                    client
                        .acquire_with(&resource, &options)
                        .with_subscriber(probe)
                        .await
                } else {
                    rec.acq_start();
                    client.acquire_with(&resource, &options).await
                };
                match acquired {
                    Ok(lease) => {
                        rec.acq_ok(&lease);
                        let cs = Cs::Short(Duration::from_millis(10));
                        critical_section(&mut rec, &lease, &mut store, cs, &mut rng).await;
                        release(&mut rec, lease).await;
                    }
                    Err(e) => rec.acq_fail(&e),
                }
                sleep(rng.between(Duration::ZERO, Duration::from_millis(10))).await;
            }
        }));
    }
    Workers::from_parts(stop, tasks)
}

/// The liveness bound after a heal for the looping scenarios: the hand-off bound plus
/// reconnection after a restart or a partition (up to a second).
fn healed_bound() -> Duration {
    TTL + WAITER_TTL + SLACK + Duration::from_millis(1000)
}

/// H3: a master is killed and restarted empty (not durable) while eight waiters queue on
/// one resource; restart quarantine on (the restarted master abstains for `ttl_max`), so
/// the queue it lost is rebuilt by the waiters' refreshes. N = 3 or 5.
pub async fn h3(n: usize, fair: bool, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let code = code("H3", fair);
    let setup = Setup::new(
        code,
        "master restarted empty under a long queue [RSV]",
        expect,
        n,
    );
    let mut env = Env::start(setup).await;
    seed_epochs(&env.cluster).await;
    let urls = env.urls();
    let ttl_max = env.ttl_max;
    let probe = build(Guards::RSV.apply(client_over(urls.clone()), ttl_max), None);
    settle(&probe, &env.prefix).await;
    let workers = spawn_looping(&mut env, 8, fair, |_| {
        build(
            Guards::RSV.apply(
                client_over(urls.clone())
                    .retry(Retry::new().attempts(100_000).wait(WAIT))
                    .waiting(Waiting::new().waiter_ttl(WAITER_TTL)),
                ttl_max,
            ),
            mutant,
        )
    });
    sleep(
        env.rng
            .between(Duration::from_millis(300), Duration::from_millis(700)),
    )
    .await;
    let victim = env.rng.below(n as u64) as usize;
    let from = now_ns();
    env.cluster.server_mut(victim).kill().unwrap();
    sleep(
        env.rng
            .between(Duration::from_millis(50), Duration::from_millis(300)),
    )
    .await;
    env.cluster.server_mut(victim).restart(false).await.unwrap();
    env.note(format!("master {victim} restarted empty"));
    sleep(phase() / 2).await;
    env.fault_window(from);
    env.mark_heal();
    sleep(phase().max(Duration::from_millis(1500))).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(healed_bound()),
            // Fair: the order and the hand-off bound too (a lock freed inside the fault
            // window is not judged).
            fifo: fair.then_some(H3F_PAIRS),
            handoff: fair.then(|| bound(TTL, H3F_FREES)),
            ..Checks::default()
        },
    )
    .await
}

/// The pairs of fair calls H3f must judge: eight looping waiters make a thousand or more
/// in a short run.
const H3F_PAIRS: u64 = 100;
/// The free locks with a waiter queued H3f must judge: about two hundred in a short run.
const H3F_FREES: u64 = 50;

/// H4: clients and masters split into two sides (N = 5: masters {0, 1} and {2, 3, 4}),
/// so each side's waiters are queued on their side's masters only; the larger side goes
/// on, the smaller cannot win; then the partition heals and both drain.
pub async fn h4(fair: bool, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let code = code("H4", fair);
    let n = 5;
    let setup = Setup::new(code, "partition splits the queue", expect, n);
    let mut env = Env::start(setup).await;
    let half = n / 2;
    let mut sides: Vec<Vec<Proxy>> = Vec::new();
    for _ in 0..2 {
        let mut paths = Vec::new();
        for server in env.cluster.servers() {
            paths.push(Proxy::for_server(server).await.unwrap());
        }
        sides.push(paths);
    }
    let urls: Vec<Vec<String>> = sides
        .iter()
        .map(|paths| paths.iter().map(Proxy::url).collect())
        .collect();
    for urls in &urls {
        warm_up(&queue_client(urls.clone(), None), &env.prefix).await;
    }
    let workers = spawn_looping(&mut env, 6, fair, |i| {
        queue_client(urls[i % 2].clone(), mutant)
    });
    sleep(Duration::from_millis(300)).await;
    let from = now_ns();
    for (side, paths) in sides.iter().enumerate() {
        for (i, proxy) in paths.iter().enumerate() {
            if (i < half) != (side == 0) {
                proxy.set_mode(Mode::Blackhole);
            }
        }
    }
    sleep(phase()).await;
    // The smaller side reaches two masters of five: no call of its started while split
    // may get in before the heal.
    let healed = now_ns();
    let history = env.history.snapshot();
    let small_side: BTreeSet<String> = (0..6)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("{code}-w{i}"))
        .collect();
    let started: BTreeSet<(&str, u64)> = history
        .iter()
        .filter(|e| e.op == Op::AcqStart && e.t_ns > from && small_side.contains(&e.client))
        .map(|e| (e.client.as_str(), e.attempt))
        .collect();
    let won = history
        .iter()
        .filter(|e| {
            e.op == Op::AcqOk
                && e.t_ns < healed
                && started.contains(&(e.client.as_str(), e.attempt))
        })
        .count();
    if won > 0 {
        env.violation(format!(
            "{won} acquisitions on the smaller side while split"
        ));
    }
    for paths in &sides {
        for proxy in paths {
            proxy.heal();
        }
    }
    env.fault_window(from);
    env.mark_heal();
    sleep(Duration::from_millis(2000)).await;
    let out = env
        .finish(
            workers,
            Checks {
                liveness: Some(healed_bound()),
                // No FIFO check, fair or not: a fair waiter of the smaller side queued
                // before the split is rightly passed by the larger side's waiters, since
                // its registrations there lapse while it cannot refresh them.
                ..Checks::default()
            },
        )
        .await;
    drop(sides);
    out
}

/// H5: two fair waiters are registered in different orders on the masters. The holder
/// takes the lock (TTL 5 s) and masters 0 and 1 are snapshotted. Waiter A reaches masters
/// 0 and 1 only (master 2 is blackholed on its path) and is queued: its ticket is issued.
/// Then B (direct links) is queued everywhere. A is cut off from every master, and
/// masters 0 and 1 restart from their snapshots (the holder's key, no queue), so B is
/// registered there again, first; then A's paths heal and its refreshes register it
/// everywhere, after B in arrival order on every master. A's ticket was issued before B
/// started, so when the holder releases, A must be served first. (Restarting the masters
/// empty instead would free the key there: the head would take it, confirm, fail for
/// want of a quorum and leave the queue each time, so the order there would flap.)
pub async fn h5(mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let code = code("H5", true);
    let setup = Setup::new(
        code,
        "fair waiters registered out of order (restarts, cut paths)",
        expect,
        3,
    );
    let mut env = Env::start(setup).await;
    let resource = env.resource(0);
    let direct = env.urls();
    let mut paths = Vec::new();
    for server in env.cluster.servers() {
        paths.push(Proxy::for_server(server).await.unwrap());
    }
    // A waits through the restart and its reconnections: a budget of 10 s.
    let wait = Duration::from_secs(10);
    let a_client = queue_client_waiting(paths.iter().map(Proxy::url).collect(), mutant, wait);
    let b_client = queue_client_waiting(direct.clone(), mutant, wait);
    let holder_ttl = Duration::from_secs(5);
    env.ttl_max = holder_ttl;
    let holder = build(
        client_over(direct.clone())
            .ttl(holder_ttl)
            .waiting(Waiting::new().waiter_ttl(WAITER_TTL)),
        mutant,
    );
    for client in [&a_client, &b_client, &holder] {
        warm_up(client, &env.prefix).await;
    }
    let mut store = env.store().await;
    let rec = env.history.recorder(format!("{code}-holder"), &resource);
    let Ok(held) = enter(&holder, rec, &mut store).await else {
        panic!("{code}: the holder could not take a free lock");
    };
    let snapshots = [
        env.cluster.server(0).snapshot().await.unwrap(),
        env.cluster.server(1).snapshot().await.unwrap(),
    ];
    paths[2].set_mode(Mode::Blackhole);
    let hold = Duration::from_millis(30);
    let mut known = BTreeSet::new();
    let a_name = format!("{code}-a");
    let b_name = format!("{code}-b");
    let mut tasks = vec![spawn_waiter(&env, &a_name, &resource, a_client, true, hold)];
    let a = await_queued(&env, &resource, &mut known, &a_name, 1).await;
    tasks.push(spawn_waiter(&env, &b_name, &resource, b_client, true, hold));
    let b = await_queued(&env, &resource, &mut known, &b_name, 1).await;
    let from = now_ns();
    paths[0].set_mode(Mode::Blackhole);
    paths[1].set_mode(Mode::Blackhole);
    for (i, snapshot) in snapshots.iter().enumerate() {
        env.cluster
            .server_mut(i)
            .restart_from(snapshot)
            .await
            .unwrap();
    }
    // The holder's connections to masters 0 and 1 broke with the restarts: its release
    // must reach them again (a release that cannot leaves the key there until it expires).
    // A round is decided by the first quorum, so the masters reached add up over probes.
    let probe = format!("{}probe", env.prefix);
    let reached = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    crate::support::wait_until(
        Duration::from_secs(5),
        "the holder's client reaches the restarted masters",
        || {
            let (holder, probe, reached) = (holder.clone(), probe.clone(), Arc::clone(&reached));
            async move {
                if let Ok(lease) = holder.try_acquire(&probe).await {
                    reached.lock().unwrap().extend(granted(lease.masters()));
                    let _ = lease.release().await;
                }
                let reached = reached.lock().unwrap();
                reached.contains(&0) && reached.contains(&1)
            }
        },
    )
    .await;
    await_member_on(&env, &resource, &b, &[0, 1]).await;
    for path in &paths {
        path.heal();
    }
    await_member_on(&env, &resource, &a, &[0, 1, 2]).await;
    env.fault_window(from);
    let mut order = Vec::new();
    for server in env.cluster.servers() {
        let queue = members(&server.url(), &resource).await;
        let rank = |w: &str| queue.iter().position(|m| m == w).map_or(-1, |p| p as i64);
        order.push(format!("A {} B {}", rank(&a), rank(&b)));
    }
    env.note(format!(
        "queue places before the release: {}",
        order.join(", ")
    ));
    held.leave(&mut store).await;
    let out = env
        .finish(
            waiters(tasks),
            Checks {
                // A before B.
                fifo: Some(1),
                // The holder's release, with A and B queued.
                handoff: Some(bound(TTL, 1)),
                keys_may_expire: true,
                ..Checks::default()
            },
        )
        .await;
    drop(paths);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_head_killed_at_handoff() {
    h1(false, Duration::from_millis(30), None, Expect::Hold)
        .await
        .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1f_head_killed_at_handoff_fair() {
    h1(true, Duration::from_millis(30), None, Expect::Hold)
        .await
        .check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_holder_killed_mid_queue() {
    h2(false, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2f_holder_killed_mid_queue_fair() {
    h2(true, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_master_restarted_empty_under_a_long_queue_n3() {
    h3(3, false, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3f_master_restarted_empty_under_a_long_queue_fair_n5() {
    h3(5, true, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h4_partition_splits_the_queue_n5() {
    h4(false, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h4f_partition_splits_the_queue_fair_n5() {
    h4(true, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h5f_fair_registrations_out_of_order() {
    h5(None, Expect::Hold).await.check();
}
