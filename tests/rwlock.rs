//! The read-write lock against real masters: shared readers, exclusive writers, the
//! writer's intent, downgrade, fencing, kinds and bad input (docs/design.md §16).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Timeouts, Waiting};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::{AcquireOptions, ErrorKind, LeaseMode, MasterOutcome, Redlock};
use redquorum_testkit::{Latency, Mode, Proxy};
use support::*;
use tokio::time::Instant;

fn once() -> AcquireOptions {
    AcquireOptions::new().attempts(1)
}

/// Another client over `cluster`, with the test settings.
fn super_client(cluster: &Cluster) -> Redlock {
    client(cluster).build().unwrap()
}

/// Another client over `cluster`, with further settings.
fn client_with(
    cluster: &Cluster,
    adjust: impl FnOnce(redquorum::Builder) -> redquorum::Builder,
) -> Redlock {
    adjust(client(cluster)).build().unwrap()
}

// Checks I17 (no write lease beside any other lease).
#[tokio::test]
async fn readers_share_writers_exclude_and_each_reader_has_its_own_key() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    // Writers on a client of their own: this client's write while it reads is an upgrade.
    let writers = super_client(&cluster);
    let name = unique_key("rw");
    let lock = client.rwlock(&name);
    let writer = writers.rwlock(&name);
    let a = lock.read().await.unwrap();
    let b = lock.read().await.unwrap();
    assert_eq!(a.mode(), LeaseMode::Read);
    assert_ne!(a.key(), b.key(), "each reader has a key of its own");
    let err = writer.write_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    // Each reader key has its own expiry, and holds the reader's value.
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        for lease in [&a, &b] {
            let pttl: i64 = conn.pttl(lease.key()).await.unwrap();
            assert!(pttl > 0 && pttl <= 5000, "{pttl}");
        }
    }
    a.release().await.unwrap();
    // One reader left: still no writer.
    let err = writer.write_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    b.release().await.unwrap();
    let w = writer.write_with(&once()).await.unwrap();
    assert_eq!(w.mode(), LeaseMode::Write);
    let err = lock.read_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    let err = lock.write_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    w.release().await.unwrap();
    lock.read_with(&once())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A waiting writer's intent keeps new readers out; the writer gets in as soon as the
/// reader that held the lock leaves (its release notice wakes the writer).
#[tokio::test]
async fn a_waiting_writer_stops_new_readers_and_gets_in_when_the_reader_leaves() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("intent");
    let lock = client.rwlock(&name);
    let reader = lock.read().await.unwrap();
    let writer = tokio::spawn({
        let lock = super_client(&cluster).rwlock(&name);
        async move { lock.write().await }
    });
    // Await the intent on every master rather than sleeping.
    let intent = format!("redquorum:rw:{name}:intent");
    wait_until(Duration::from_secs(5), "the writer's intent is set", || {
        let (urls, intent) = (cluster.urls(), intent.clone());
        async move {
            for url in urls {
                let exists: bool = raw(&url).await.exists(&intent).await.unwrap();
                if !exists {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let err = lock.read_with(&once()).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Contended,
        "a reader got past the intent: {err}"
    );
    let released = Instant::now();
    reader.release().await.unwrap();
    let w = writer.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the writer waited {:?} after the reader left",
        released.elapsed()
    );
    // Granted: its intent is gone.
    for url in cluster.urls() {
        let exists: bool = raw(&url).await.exists(&intent).await.unwrap();
        assert!(!exists);
    }
    w.release().await.unwrap();
}

/// On how many running masters of `cluster` the writer intent of lock `name` lives.
async fn intents_on(cluster: &Cluster, name: &str) -> usize {
    let intent = format!("redquorum:rw:{name}:intent");
    let mut count = 0;
    for server in cluster.servers() {
        if !server.is_running() || server.is_paused() {
            continue;
        }
        let exists: bool = raw(&server.url()).await.exists(&intent).await.unwrap();
        count += usize::from(exists);
    }
    count
}

/// Awaits the writer intent of lock `name` on every master of `cluster`.
async fn wait_intent_everywhere(cluster: &Cluster, name: &str) {
    wait_until(
        Duration::from_secs(5),
        "the writer's intent is set",
        || async { intents_on(cluster, name).await == cluster.len() },
    )
    .await;
}

/// A writer that got in leaves its intent on no master. Its granted attempt deleted the
/// intent where it was granted; a master that refused that attempt (a reader still there)
/// or had not answered it may still hold the intent of this or an earlier attempt, and the
/// writer clears it there in the background. Left there, intents of successive writers
/// keep new readers out of such masters for the writers' TTL, with no writer anywhere.
#[tokio::test]
async fn a_writer_that_got_in_leaves_no_intent_behind() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let readers = client_with(&cluster, |b| b.ttl("10s"));
    let name = unique_key("leftover");
    let first = readers.rwlock(&name).read().await.unwrap();
    let second = readers.rwlock(&name).read().await.unwrap();
    for lease in [&first, &second] {
        wait_until(
            Duration::from_secs(2),
            "the reader is on every master",
            || held_everywhere(&cluster, lease.key(), lease.value()),
        )
        .await;
    }
    // The second reader's key is left on the last master only (as if it had expired on
    // the others): that master refuses the attempt that lets the writer in.
    for url in &cluster.urls()[..2] {
        let _: () = raw(url).await.del(second.key()).await.unwrap();
    }
    // The intent lives for the writer's TTL, 10 s: far longer than any wait below.
    let writer = client_with(&cluster, |b| b.ttl("10s")).rwlock(&name);
    let writing = tokio::spawn(async move { writer.write().await });
    wait_intent_everywhere(&cluster, &name).await;
    first.release().await.unwrap();
    let w = writing.await.unwrap().unwrap();
    assert!(
        !w.masters()[2].outcome().is_granted(),
        "the last master, where a reader is left, granted the writer: {:?}",
        w.masters()
    );
    w.release().await.unwrap();
    wait_until(
        Duration::from_secs(2),
        "no writer intent is left on any master",
        || async { intents_on(&cluster, &name).await == 0 },
    )
    .await;
    // With the first master down, a reader needs the last one: it is let in at once.
    cluster.server_mut(0).kill().unwrap();
    let reader = super_client(&cluster)
        .rwlock(&name)
        .read_with(&once())
        .await
        .unwrap();
    reader.release().await.unwrap();
    second.release().await.unwrap();
}

/// A master whose answer to the granting attempt is still pending when the round is
/// decided may refuse it afterwards (a reader left there) and set the intent then: the
/// writer awaits that late answer and clears the intent there too.
#[tokio::test]
async fn a_writer_clears_its_intent_where_a_late_answer_refused_it() {
    let cluster = Cluster::start(3).await.unwrap();
    let readers = client_with(&cluster, |b| b.ttl("10s"));
    let name = unique_key("late");
    let first = readers.rwlock(&name).read().await.unwrap();
    let second = readers.rwlock(&name).read().await.unwrap();
    for lease in [&first, &second] {
        wait_until(
            Duration::from_secs(2),
            "the reader is on every master",
            || held_everywhere(&cluster, lease.key(), lease.value()),
        )
        .await;
    }
    for url in &cluster.urls()[..2] {
        let _: () = raw(url).await.del(second.key()).await.unwrap();
    }
    // The writer reaches the last master through a proxy that holds back its replies, so
    // its rounds are decided by the first two before the last one answers.
    let slow = Proxy::for_server(cluster.server(2)).await.unwrap();
    slow.set_mode(Mode::Delay {
        to_server: Latency::ZERO,
        to_client: Latency::new(Duration::from_millis(500), Duration::ZERO),
    });
    let mut urls = cluster.urls();
    urls[2] = slow.url();
    let writer = Redlock::builder()
        .quarantine(false)
        .masters(urls)
        .ttl("10s")
        .timeouts(Timeouts::new().node("3s").connect("5s"))
        .build()
        .unwrap()
        .rwlock(&name);
    let writing = tokio::spawn(async move { writer.write().await });
    wait_intent_everywhere(&cluster, &name).await;
    first.release().await.unwrap();
    let w = writing.await.unwrap().unwrap();
    assert!(
        matches!(w.masters()[2].outcome(), MasterOutcome::Pending),
        "the slow master answered before the round was decided: {:?}",
        w.masters()
    );
    wait_until(
        Duration::from_secs(3),
        "no writer intent is left on any master",
        || async { intents_on(&cluster, &name).await == 0 },
    )
    .await;
    w.release().await.unwrap();
    second.release().await.unwrap();
}

/// A writer that gives up on its wait budget, and one whose call is dropped while it
/// waits, clear their intent on every master: a reader is let in at once afterwards.
#[tokio::test]
async fn a_writer_that_gives_up_or_is_dropped_leaves_no_intent_behind() {
    let cluster = Cluster::start(3).await.unwrap();
    let readers = client_with(&cluster, |b| b.ttl("10s"));
    for drop_it in [false, true] {
        let name = unique_key("ended");
        let held = readers.rwlock(&name).read().await.unwrap();
        let writers = client_with(&cluster, |b| b.ttl("10s"));
        let writer = writers.rwlock(&name);
        let writing = tokio::spawn(async move {
            writer
                .write_with(&AcquireOptions::new().wait_timeout("1s"))
                .await
        });
        wait_intent_everywhere(&cluster, &name).await;
        if drop_it {
            writing.abort();
            assert!(writing.await.unwrap_err().is_cancelled());
        } else {
            let err = writing.await.unwrap().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
        }
        wait_until(
            Duration::from_secs(2),
            "no writer intent is left on any master",
            || async { intents_on(&cluster, &name).await == 0 },
        )
        .await;
        held.release().await.unwrap();
        super_client(&cluster)
            .rwlock(&name)
            .read_with(&once())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        writers.shutdown().await;
    }
}

/// Every script command of the masters (`EVALSHA`, or `EVAL` after a flushed cache),
/// summed over `cluster`: `INFO commandstats` calls.
async fn script_calls(cluster: &Cluster) -> u64 {
    let mut total = 0;
    for url in cluster.urls() {
        let info = info(&mut raw(&url).await, "commandstats").await;
        for line in info.lines() {
            let Some((name, stats)) = line.split_once(':') else {
                continue;
            };
            if name != "cmdstat_evalsha" && name != "cmdstat_eval" {
                continue;
            }
            total += stats
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap();
        }
    }
    total
}

/// A write acquire granted by every master at its first attempt set no intent anywhere,
/// and sends nothing but its one round: no clean-up follows it.
#[tokio::test]
async fn an_uncontended_writer_sends_nothing_but_its_round() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    // Connect (and load the scripts) first.
    client
        .rwlock(&unique_key("warm"))
        .write()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    client.shutdown().await;
    let before = script_calls(&cluster).await;
    // The round returns on a quorum: the last master's answer (a grant) is often still
    // pending then, and is no reason to clean up there.
    let w = client.rwlock(&unique_key("alone")).write().await.unwrap();
    // Whatever the acquire left to run in the background has run by now.
    assert_eq!(client.shutdown().await, 0);
    assert_eq!(
        script_calls(&cluster).await - before,
        3,
        "one script call per master"
    );
    w.release().await.unwrap();
}

/// How long a writer waits behind a stream of overlapping readers (each holds `HOLD`, a
/// new one every third of that, for `STREAM`), the writer starting once the stream runs;
/// and how many readers the stream admitted.
const HOLD: Duration = Duration::from_millis(150);
const STREAM: Duration = Duration::from_millis(2500);

async fn writer_behind_readers(build: impl Fn() -> redquorum::Redlock) -> (Duration, u32) {
    let client = build();
    let name = unique_key("starve");
    let lock = client.rwlock(&name);
    let writer = build().rwlock(&name);
    let readers = tokio::spawn({
        let lock = lock.clone();
        async move {
            let end = Instant::now() + STREAM;
            let mut tasks = Vec::new();
            while Instant::now() < end {
                let lock = lock.clone();
                tasks.push(tokio::spawn(async move {
                    let opts = AcquireOptions::new().wait_timeout("3s");
                    let Ok(lease) = lock.read_with(&opts).await else {
                        return 0;
                    };
                    tokio::time::sleep(HOLD).await;
                    lease.release().await.unwrap();
                    1
                }));
                tokio::time::sleep(HOLD / 3).await;
            }
            let mut granted = 0u32;
            for task in tasks {
                granted += task.await.unwrap();
            }
            granted
        }
    });
    tokio::time::sleep(HOLD).await;
    let started = Instant::now();
    let w = writer
        .write_with(&AcquireOptions::new().wait_timeout("4s"))
        .await
        .unwrap();
    let waited = started.elapsed();
    w.release().await.unwrap();
    (waited, readers.await.unwrap())
}

/// Writers are not starved: readers keep coming, each overlapping the next, and a writer
/// that starts waiting gets in within a bound (the readers' hold time plus a round), not
/// when the stream stops.
#[tokio::test]
async fn a_stream_of_overlapping_readers_does_not_starve_a_writer() {
    let cluster = Cluster::start(3).await.unwrap();
    let (waited, readers) =
        writer_behind_readers(|| client(&cluster).ttl("1s").build().unwrap()).await;
    assert!(
        waited < Duration::from_secs(1),
        "the writer waited {waited:?} behind readers that hold {HOLD:?} each"
    );
    assert!(readers > 3, "the readers did not overlap");
}

/// The starvation check fires: readers let in past the writer's intent (the planted
/// `ReaderIgnoresIntent`) keep the writer out until the stream ends.
#[cfg(redquorum_mutants)]
#[tokio::test]
async fn readers_ignoring_the_intent_starve_the_writer() {
    let cluster = Cluster::start(3).await.unwrap();
    let build = || {
        let client = client(&cluster).ttl("1s").build().unwrap();
        client.plant(redquorum::Mutant::ReaderIgnoresIntent);
        client
    };
    let (waited, _) = writer_behind_readers(build).await;
    assert!(
        waited >= Duration::from_secs(1),
        "the writer got in after {waited:?} although readers ignore its intent"
    );
}

// Checks I17 (no write lease beside any other lease).
#[tokio::test]
async fn downgrade_keeps_deadline_and_token_and_lets_readers_in() {
    let cluster = Cluster::start_with(3, &ServerOptions::new().persistence(Persistence::AofAlways))
        .await
        .unwrap();
    for url in cluster.urls() {
        seed_old_epoch(&url).await;
    }
    let client = client(&cluster)
        .quarantine(true)
        .fencing(true)
        .ttl("2s")
        .build()
        .unwrap();
    let name = unique_key("down");
    let lock = client.rwlock(&name);
    let mut r = lock.write().await.unwrap();
    let (deadline, token) = (r.deadline(), r.fencing_token().unwrap());
    let handle = r.handle();
    r.downgrade().await.unwrap();
    assert_eq!(r.mode(), LeaseMode::Read);
    assert_eq!(r.deadline(), deadline);
    assert_eq!(r.fencing_token(), Some(token));
    assert!(
        handle.is_lost(),
        "the write lease's handles follow it, not the read lease"
    );
    for server in cluster.servers() {
        assert_eq!(
            value_on(server, &name).await.as_deref(),
            Some("redquorum:readers"),
            "the writer's value gave way to the readers' mark"
        );
        assert_eq!(value_on(server, r.key()).await.as_deref(), Some(r.value()));
    }
    // The downgraded reader alone keeps another client's writer out, before any other
    // reader joins or the read lease extends: it is in the reader index.
    let writers = client_with(&cluster, |b| b.quarantine(true).fencing(true).ttl("2s"));
    match writers.rwlock(&name).write_with(&once()).await {
        Ok(lease) => panic!(
            "a writer was granted beside the downgraded reader: {:?}",
            lease.masters()
        ),
        Err(err) => assert_eq!(err.kind(), ErrorKind::Contended, "{err}"),
    }
    // The refused writer's intent is cleared in the background; it would keep readers out.
    wait_until(
        Duration::from_secs(2),
        "the refused writer's intent is cleared",
        || async { intents_on(&cluster, &name).await == 0 },
    )
    .await;
    // Readers share it now; writers still wait. Tokens keep rising across modes.
    let other = lock.read_with(&once()).await.unwrap();
    assert!(other.fencing_token().unwrap() > token);
    // This client now reads: its write would be an upgrade; another client's waits.
    let err = lock.write_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
    let err = writers.rwlock(&name).write_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    // The read lease extends and releases its own reader key only.
    r.extend().await.unwrap();
    let later = other.fencing_token().unwrap();
    r.release().await.unwrap();
    for server in cluster.servers() {
        assert_eq!(
            value_on(server, other.key()).await.as_deref(),
            Some(other.value())
        );
    }
    other.release().await.unwrap();
    let w = lock.write_with(&once()).await.unwrap();
    assert!(
        w.fencing_token().unwrap() > later,
        "a writer after a reader has a later token"
    );
    w.release().await.unwrap();
}

/// Downgrading a lease that is not a write lease is refused before any round trip, and
/// the lease comes back unchanged: still held, still extendable, released by its owner.
#[tokio::test]
async fn downgrading_a_read_or_mutex_lease_is_refused_and_hands_the_lease_back() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("nodown");
    let read = client.rwlock(&name).read().await.unwrap();
    let key = read.key().to_owned();
    let mut read = read;
    let err = read.downgrade().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOptions);
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("only a write lease"), "{err}");
    assert!(err.to_string().contains("still held"), "{err}");
    assert_eq!(read.mode(), LeaseMode::Read);
    assert!(!read.handle().is_lost());
    read.extend().await.unwrap();
    assert!(
        held_everywhere_any(&cluster, &key).await,
        "the read lease was released"
    );
    read.release().await.unwrap();
    assert!(!held_everywhere_any(&cluster, &key).await);

    let mutex = client.acquire(&unique_key("mutex")).await.unwrap();
    let mkey = mutex.key().to_owned();
    let value = mutex.value().to_owned();
    let mut mutex = mutex;
    let refused = mutex.downgrade().await.unwrap_err();
    assert!(
        refused.to_string().contains("an exclusive lease"),
        "{refused}"
    );
    for shown in [refused.to_string(), format!("{refused:?}")] {
        assert!(!shown.contains(&value), "the lock value is shown: {shown}");
    }
    assert_eq!(mutex.mode(), LeaseMode::Exclusive);
    assert!(held_everywhere_any(&cluster, &mkey).await);
    // Dropping the lease releases it, as ever.
    drop(mutex);
    client.shutdown().await;
    assert!(!held_everywhere_any(&cluster, &mkey).await);
}

/// Whether every master has some value under `key`.
async fn held_everywhere_any(cluster: &Cluster, key: &str) -> bool {
    for server in cluster.servers() {
        if value_on(server, key).await.is_none() {
            return false;
        }
    }
    true
}

// Checks I17 (no write lease beside any other lease).
#[tokio::test]
async fn a_mutex_and_a_rwlock_on_one_name_refuse_each_other() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("kinds");
    // The masters refuse the other kind (another client: this one would refuse its own
    // held name before asking them).
    let stranger = super_client(&cluster);
    let read = client.rwlock(&name).read().await.unwrap();
    let err = stranger.try_acquire(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("holds a read-write lock"), "{err}");
    read.release().await.unwrap();
    let w = client.rwlock(&name).write().await.unwrap();
    let err = stranger.try_acquire(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    w.release().await.unwrap();

    let other = unique_key("kinds");
    let mutex = client.acquire(&other).await.unwrap();
    let lock = stranger.rwlock(&other);
    for attempt in [
        lock.read_with(&once()).await,
        lock.write_with(&once()).await,
    ] {
        let err = attempt.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
        assert!(err.to_string().contains("not a read-write lock"), "{err}");
    }
    mutex.release().await.unwrap();
}

#[tokio::test]
async fn bad_names_are_refused_with_what_to_change() {
    let cluster = Cluster::start(1).await.unwrap();
    let client: Redlock = client(&cluster).build().unwrap();
    for name in ["", "redquorum:rw:x"] {
        let err = client.rwlock(name).read().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
        let err = client.rwlock(name).write().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{err}");
        assert!(!err.is_retryable());
    }
}

/// A dropped write attempt clears its intent at once, so readers need not wait for it
/// to expire; dropped attempts leave no key beyond their TTL.
#[tokio::test]
async fn a_dropped_writer_clears_its_intent() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("dropped");
    let lock = client.rwlock(&name);
    let reader = lock.read().await.unwrap();
    let intent = format!("redquorum:rw:{name}:intent");
    let writing = tokio::spawn({
        let lock = super_client(&cluster).rwlock(&name);
        async move { lock.write().await }
    });
    wait_until(Duration::from_secs(5), "the writer's intent is set", || {
        let (url, intent) = (cluster.urls()[0].clone(), intent.clone());
        async move { raw(&url).await.exists(&intent).await.unwrap() }
    })
    .await;
    writing.abort();
    let _ = writing.await;
    client.shutdown().await;
    for url in cluster.urls() {
        let exists: bool = raw(&url).await.exists(&intent).await.unwrap();
        assert!(!exists, "the dropped writer's intent is still there");
    }
    lock.read_with(&once())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    reader.release().await.unwrap();
}

/// At most `MAX_READERS` readers hold one lock; the next waits (refused once as
/// contended). A reader whose key expired no longer counts: the index is pruned.
// Checks I17 (no write lease beside any other lease).
#[tokio::test]
async fn readers_are_capped_and_expired_readers_leave_the_index() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).ttl("1s").build().unwrap();
    let name = unique_key("cap");
    let lock = client.rwlock(&name);
    let mut leases = Vec::new();
    for _ in 0..redquorum::limits::MAX_READERS {
        leases.push(lock.read_with(&once()).await.unwrap());
    }
    let err = lock.read_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    // One reader's key disappears (as by expiry): the next reader takes its place, and the
    // index forgets the dead one.
    let gone = leases.pop().unwrap();
    let mut conn = raw(&cluster.urls()[0]).await;
    let _: () = conn.del(gone.key()).await.unwrap();
    let next = lock.read_with(&once()).await.unwrap();
    let index = format!("redquorum:rw:{name}:readers");
    let members: Vec<String> = conn.smembers(&index).await.unwrap();
    assert_eq!(members.len(), redquorum::limits::MAX_READERS);
    assert!(!members.contains(&gone.value().to_owned()));
    let index_ttl: i64 = conn.pttl(&index).await.unwrap();
    assert!(
        index_ttl > 0,
        "the index lives no longer than its readers: {index_ttl}"
    );
    drop(gone);
    drop(next);
    client.shutdown().await;
}

/// A read lease extended past the TTL it was granted with stays visible to writers: its
/// extension keeps the reader index alive as long as its key.
// Checks I17 (no write lease beside any other lease).
#[tokio::test]
async fn an_extended_reader_keeps_writers_out() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("1s").ttl_max("3s").build().unwrap();
    let name = unique_key("extended");
    let lock = client.rwlock(&name);
    let read = lock.read().await.unwrap();
    read.extend_with(Duration::from_secs(3)).await.unwrap();
    let index = format!("redquorum:rw:{name}:readers");
    for url in cluster.urls() {
        let pttl: i64 = raw(&url).await.pttl(&index).await.unwrap();
        assert!(
            pttl > 2000,
            "the index expires before its reader: {pttl} ms"
        );
    }
    // Even with the index lost, an extension puts the reader back in it.
    for url in cluster.urls() {
        let _: () = raw(&url).await.del(&index).await.unwrap();
    }
    read.extend().await.unwrap();
    let err = super_client(&cluster)
        .rwlock(&name)
        .write_with(&once())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    read.release().await.unwrap();
}

/// A reader extended past its first TTL keeps the name marked as a read-write lock: a
/// plain mutex on the name is refused as the other kind, not granted beside the reader.
#[tokio::test]
async fn an_extended_reader_keeps_the_name_a_rwlock() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("500ms").ttl_max("3s").build().unwrap();
    let name = unique_key("extkind");
    let read = client.rwlock(&name).read().await.unwrap();
    read.extend_with(Duration::from_secs(3)).await.unwrap();
    // Past the reader's first TTL (and so the owner record's, unless extended with it).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!read.handle().is_lost());
    let err = super_client(&cluster).try_acquire(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    let owner = format!("redquorum:owner:{name}");
    for url in cluster.urls() {
        let pttl: i64 = raw(&url).await.pttl(&owner).await.unwrap();
        assert!(
            pttl > 1500,
            "the owner record expires before its reader: {pttl} ms"
        );
    }
    read.release().await.unwrap();
}

/// A writer extended past its first TTL keeps the name marked as a read-write lock: its
/// owner record lives as long as its key, so another writer is refused as by a held lock
/// (not told that the name holds a mutex), and a plain mutex is refused as the other kind.
#[tokio::test]
async fn an_extended_writer_keeps_the_name_a_rwlock() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("500ms").ttl_max("3s").build().unwrap();
    let name = unique_key("extwriter");
    let write = client.rwlock(&name).write().await.unwrap();
    write.extend_with(Duration::from_secs(3)).await.unwrap();
    let owner = format!("redquorum:owner:{name}");
    for url in cluster.urls() {
        let pttl: i64 = raw(&url).await.pttl(&owner).await.unwrap();
        assert!(
            pttl > 1500,
            "the owner record expires before its writer: {pttl} ms"
        );
    }
    // Past the writer's first TTL; the extended key lives until 3 s.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!write.handle().is_lost());
    let other = super_client(&cluster);
    let err = other.rwlock(&name).write_with(&once()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    let err = other.try_acquire(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    write.release().await.unwrap();
}

/// The output of `future` at its first poll: a call that is refused "at once" must not
/// wait for anything, not even a round trip to a master. Panics if it is still pending.
fn at_first_poll<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("still pending at its first poll: it waited"),
    }
}

/// The client's registry of held keys: reads share, a write while reading is an upgrade
/// (refused at once, also when the client waits for its own leases), a second write is a
/// re-entry; a downgraded lease holds the lock for reading.
#[tokio::test]
async fn the_client_refuses_an_upgrade_and_its_own_second_writer() {
    let cluster = Cluster::start(1).await.unwrap();
    for wait_for_own in [false, true] {
        let client = client_with(&cluster, |b| {
            b.waiting(Waiting::new().own_leases(wait_for_own))
        });
        let lock = client.rwlock(&unique_key("held"));
        let a = lock.read().await.unwrap();
        let b = lock.read_with(&once()).await.unwrap();
        // Refused at its first poll: it neither waited nor asked a master.
        let err = at_first_poll(lock.write()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
        assert!(err.masters().is_empty(), "{err:?}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("upgrading a read lock"), "{err}");
        a.release().await.unwrap();
        drop(b);
        client.shutdown().await;
        let w = lock.write().await.unwrap();
        if !wait_for_own {
            let err = lock.write_with(&once()).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::AlreadyHeld, "{err}");
            assert!(err.to_string().contains("re-enter"), "{err}");
        }
        let mut r = w;
        r.downgrade().await.unwrap();
        let err = lock.write_with(&once()).await.unwrap_err();
        assert!(err.to_string().contains("upgrading a read lock"), "{err}");
        lock.read_with(&once())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        r.release().await.unwrap();
        lock.write_with(&once())
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
}

/// A downgrade that no quorum confirms loses the lease and releases both its forms: the
/// writer key where it still was, the reader key where the master converted it.
#[tokio::test]
async fn a_failed_downgrade_loses_the_lease_and_releases_both_forms() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("downfail");
    let w = client.rwlock(&name).write().await.unwrap();
    let reader = format!("redquorum:rw:{name}:reader:{}", w.value());
    // The write is on every master first: a straggler's SET must not land after the
    // deletes below.
    wait_until(
        Duration::from_secs(2),
        "the write lease is on every master",
        || held_everywhere(&cluster, &name, w.value()),
    )
    .await;
    // Two masters lose the writer key (as after an operator's delete).
    for url in &cluster.urls()[..2] {
        let _: () = raw(url).await.del(&name).await.unwrap();
    }
    let handle = w.handle();
    let mut w = w;
    let err = w.downgrade().await.unwrap_err();
    assert!(w.is_lost(), "a failed round loses the lease");
    drop(w);
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(err.to_string().contains("no quorum converted"), "{err}");
    assert!(handle.is_lost());
    client.shutdown().await;
    // No lease value is left: the name holds nothing, or the readers' mark the downgrade
    // left where it converted (it expires with the reader it marked).
    for server in cluster.servers() {
        let left = value_on(server, &name).await;
        assert!(
            left.is_none() || left.as_deref() == Some("redquorum:readers"),
            "{left:?}"
        );
        assert_eq!(value_on(server, &reader).await, None);
    }
    // The lock is free again, for this client too.
    client
        .rwlock(&name)
        .write()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The handle and its futures can move between tasks.
#[test]
fn the_handle_and_its_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    fn shared<T: Send + Sync + Clone + std::fmt::Debug + 'static>() {}
    shared::<redquorum::RwLock>();
    let client = Redlock::builder()
        .masters(["redis://127.0.0.1:1"])
        .build()
        .unwrap();
    let lock = client.rwlock("x");
    send(&lock.read());
    send(&lock.write());
    send(&lock.with_read(&AcquireOptions::new(), |_| async {}));
}

/// Cancel safety: read and write futures dropped after each of their polls leave no
/// writer key, reader key or intent once the client's background work is done (the
/// index, if left, has an expiry).
#[tokio::test]
async fn acquire_futures_dropped_after_each_poll_leave_nothing_behind() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let name = unique_key("dropped-polls");
    // A reader of another client holds the lock, so writers wait (and set their intent).
    let holder = super_client(&cluster);
    let held = holder.rwlock(&name).read().await.unwrap();
    for k in 0..10 {
        for write in [false, true] {
            let lock = client.rwlock(&name);
            let mut fut: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> = if write {
                Box::pin(async move { lock.write().await })
            } else {
                Box::pin(async move { lock.read().await })
            };
            for _ in 0..k {
                if futures::poll!(&mut fut).is_ready() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(fut);
        }
    }
    client.shutdown().await;
    for url in cluster.urls() {
        let mut conn = raw(&url).await;
        let readers: Vec<String> = conn
            .keys(format!("redquorum:rw:{name}:reader:*"))
            .await
            .unwrap();
        assert_eq!(
            readers,
            vec![held.key().to_owned()],
            "only the holder reads"
        );
        let intent: bool = conn
            .exists(format!("redquorum:rw:{name}:intent"))
            .await
            .unwrap();
        assert!(!intent, "a dropped writer's intent is left");
        // The lock key holds the readers' mark, never a dropped writer's value.
        let writer: Option<String> = conn.get(&name).await.unwrap();
        assert_eq!(
            writer.as_deref(),
            Some("redquorum:readers"),
            "a dropped writer's key is left"
        );
        let index_ttl: i64 = conn
            .pttl(format!("redquorum:rw:{name}:readers"))
            .await
            .unwrap();
        assert!(index_ttl > 0, "{index_ttl}");
    }
    held.release().await.unwrap();
}

/// A read-write lock held by readers only, or a writer's intent alone, is a cluster in
/// use to `init_cluster` (docs/design.md §11, §16), with or without a key prefix: the
/// readers' mark lies under the prefix, their keys and the intent in the records'
/// namespace, outside it.
#[tokio::test]
async fn init_cluster_refuses_masters_with_readers_or_an_intent() {
    let cluster = Cluster::start(3).await.unwrap();
    let prefixed = client_with(&cluster, |b| b.key_prefix("app:"));
    let plain = super_client(&cluster);
    let name = unique_key("bootrw");
    let read = prefixed.rwlock(&name).read().await.unwrap();
    for c in [&prefixed, &plain] {
        if std::ptr::eq(c, &plain) {
            // The prefixed client's own record ("app:redquorum:cluster") lies outside the
            // plain client's records, so it is a key in use to it too, and the survey names
            // whichever key its SCAN meets first: gone, only the read-write lock's keys
            // can refuse the plain client.
            for url in cluster.urls() {
                let _: () = raw(&url).await.del("app:redquorum:cluster").await.unwrap();
            }
        }
        let err = c.init_cluster().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ClusterNotEmpty, "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains("redquorum:rw:") || shown.contains(&format!("app:{name}")),
            "{err}"
        );
    }
    // The reader, its index and the readers' mark go (as they expire); the intent of a
    // writer that died is left.
    read.release().await.unwrap();
    let index = format!("redquorum:rw:app:{name}:readers");
    let intent = format!("redquorum:rw:app:{name}:intent");
    for url in cluster.urls() {
        let mut conn = raw(&url).await;
        let _: () = conn
            .del(&[index.clone(), format!("app:{name}")])
            .await
            .unwrap();
        let _: () = conn.pset_ex(&intent, "writer", 5000).await.unwrap();
    }
    let err = prefixed.init_cluster().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ClusterNotEmpty, "{err}");
    for url in cluster.urls() {
        let _: () = raw(&url).await.del(&intent).await.unwrap();
    }
    prefixed.init_cluster().await.unwrap();
}

/// Readers keep the readers' mark in the lock key (docs/design.md §16): a mutex is refused
/// as another kind, `inspect` shows another kind where it showed a free lock, and
/// `force_unlock_any` deletes nothing (`WrongKind`, permanent) and leaves the readers
/// holding. Once the readers are gone and their mark expired, a mutex gets the name.
#[tokio::test]
async fn readers_mark_the_name_for_every_other_kind_and_tool() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("10s").build().unwrap();
    let other = client_with(&cluster, |b| b.ttl("10s"));
    let name = unique_key("marked_by_readers");
    let read = client
        .rwlock(&name)
        .read_with(&AcquireOptions::new().ttl("300ms"))
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(2),
        "the reader is on every master",
        || held_everywhere(&cluster, read.key(), read.value()),
    )
    .await;
    let err = other.try_acquire(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let seen = other.inspect(&name).await.unwrap();
    assert!(
        matches!(seen.verdict(), redquorum::Verdict::OtherKind { kind } if kind == "rwlock"),
        "{seen}"
    );
    // The mark is nobody's value: a force-unlock of it is refused before any master is
    // asked, even where no owner record says whose it is.
    let err = other
        .force_unlock(&name, "redquorum:readers")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{err}");
    let _: () = raw(&cluster.server(0).url())
        .await
        .del(format!("redquorum:owner:{name}"))
        .await
        .unwrap();
    let seen = other.inspect(&name).await.unwrap();
    assert!(
        matches!(seen.verdict(), redquorum::Verdict::OtherKind { kind } if kind == "rwlock"),
        "{seen}"
    );
    let err = other.force_unlock_any(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("another kind of lock holds the name on 3 of 3 masters")
            && !shown.contains("reachable"),
        "{shown}"
    );
    for server in cluster.servers() {
        assert_eq!(
            value_on(server, read.key()).await.as_deref(),
            Some(read.value()),
            "the reader still holds"
        );
    }
    read.release().await.unwrap();
    // The mark lives at most the reader's TTL: then a mutex gets the name.
    let lease = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if let Ok(lease) = other.try_acquire(&name).await {
                break lease;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a mutex gets the name once the readers' mark expired");
    lease.release().await.unwrap();
}

/// A readers' mark left on one master (a reader's attempt that failed elsewhere) with
/// another master down is no reason to give up for good: `force_unlock_any` answers
/// `NoQuorum` (retryable) and names both, since once the master is back the others are
/// enough; with the mark on too many masters it is `WrongKind` (permanent).
#[tokio::test]
async fn force_unlock_any_blames_another_kind_only_where_it_alone_blocks() {
    let mut cluster = Cluster::start(3).await.unwrap();
    let name = unique_key("stale_mark");
    let operator = client(&cluster)
        .timeouts(Timeouts::new().node("200ms"))
        .build()
        .unwrap();
    let mark = async |url: String| {
        let mut conn = raw(&url).await;
        let _: () = conn
            .pset_ex(&name, "redquorum:readers", 60_000)
            .await
            .unwrap();
        let _: () = conn
            .hset(format!("redquorum:owner:{name}"), "kind", "rwlock")
            .await
            .unwrap();
    };
    mark(cluster.server(0).url()).await;
    cluster.server_mut(2).kill().unwrap();
    let err = operator.force_unlock_any(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoQuorum, "{err}");
    assert!(err.is_retryable(), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("another kind of lock holds the name on 1 of them")
            && shown.contains("reachable"),
        "{shown}"
    );
    // The mark on a second master: the one left cannot make N - quorum + 1 = 2.
    mark(cluster.server(1).url()).await;
    let err = operator.force_unlock_any(&name).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable(), "{err}");
}

/// A writer's release takes its owner record (kind `rwlock`) with its key: once the
/// read-write lock is free, the name is free for any kind, and a mutex on it is granted
/// at once instead of being refused as another kind until the record's expiry.
#[tokio::test]
async fn a_released_writer_leaves_the_name_free_for_another_kind() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("10s").build().unwrap();
    let name = unique_key("writer_then_mutex");
    let writer = client.rwlock(&name).write().await.unwrap();
    writer.release().await.unwrap();
    let owner = format!("redquorum:owner:{name}");
    wait_until(
        Duration::from_secs(2),
        "the writer's owner record is gone from every master",
        || {
            let (urls, owner) = (cluster.urls(), owner.clone());
            async move {
                for url in urls {
                    let mut conn = raw(&url).await;
                    let exists: bool = conn.exists(&owner).await.unwrap();
                    if exists {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    let lease = client.acquire_with(&name, &once()).await.unwrap();
    lease.release().await.unwrap();
}
