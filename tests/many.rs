//! Several resources at once (`acquire_many`, docs/design.md §14) against real masters:
//! all or none, no deadlock whatever the order of the list, waiting on the held keys,
//! one fencing token per resource, extension that counts a master only if it holds every
//! key, and bad lists refused before any master is asked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Timeouts};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::limits::MAX_RESOURCES;
use redquorum::{AcquireOptions, ErrorKind, LeaseMode, Redlock};
use support::*;
use tokio::time::Instant;

/// Both keys absent on every master: a failed or cancelled attempt left nothing behind.
async fn none_left(cluster: &Cluster, keys: &[&str]) {
    for key in keys {
        wait_until(Duration::from_secs(2), "released everywhere", || {
            gone_everywhere(cluster, key)
        })
        .await;
    }
}

#[tokio::test]
async fn every_key_is_locked_under_one_value_sorted_and_released_together() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let (a, b) = (unique_key("many_a"), unique_key("many_b"));
    let lease = client.acquire_many(&[&b, &a]).await.unwrap();
    assert_eq!(lease.resources().collect::<Vec<_>>(), [&*a, &*b]);
    assert_eq!(lease.resource(), a);
    assert_eq!(lease.mode(), LeaseMode::Exclusive);
    assert!(lease.remaining() > Duration::from_secs(4));
    for key in [&a, &b] {
        wait_until(Duration::from_secs(2), "set everywhere", || {
            held_everywhere(&cluster, key, lease.value())
        })
        .await;
    }
    // Single locks of either resource are refused meanwhile: by the masters to another
    // client, at once to this one (its own lease holds the key).
    let other = support::client(&cluster).build().unwrap();
    let err = other.try_acquire(&b).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended);
    let err = client.try_acquire(&b).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyHeld);
    let report = lease.release().await.unwrap();
    assert!(report.released() >= 2, "{report:?}");
    none_left(&cluster, &[&a, &b]).await;
}

/// One key held by another client on a quorum: the attempt gets nothing, and the free key
/// it may have set on the other masters is released everywhere, not left to its TTL.
// Checks I14 (no two leases share a resource, whatever lists).
#[tokio::test]
async fn one_held_key_refuses_them_all_and_leaves_nothing() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).build().unwrap();
    let waiter = client(&cluster).build().unwrap();
    let (x, y) = (unique_key("held_x"), unique_key("held_y"));
    let held = holder.acquire(&y).await.unwrap();
    let err = waiter
        .acquire_many_with(&[&x, &y], &AcquireOptions::new().attempts(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Contended, "{err}");
    assert!(err.is_retryable());
    none_left(&cluster, &[&x]).await;
    // A master where `y` is held but `x` free set nothing (all or none per master).
    for server in cluster.servers() {
        assert_eq!(value_on(server, &x).await, None);
    }
    held.release().await.unwrap();
}

/// A waiter is woken by the release of the key that was held, long before its TTL.
#[tokio::test]
async fn a_waiter_wakes_when_the_held_key_is_released() {
    let cluster = Cluster::start(3).await.unwrap();
    let holder = client(&cluster).ttl("10s").build().unwrap();
    let waiter = client(&cluster)
        .ttl("10s")
        .retry(Retry::new().delay(Duration::from_secs(5)))
        .build()
        .unwrap();
    let (x, y) = (unique_key("wake_x"), unique_key("wake_y"));
    let held = holder.acquire(&x).await.unwrap();
    let (x2, y2) = (x.clone(), y.clone());
    let waiting = tokio::spawn(async move {
        let options = AcquireOptions::new().wait_timeout("8s");
        waiter.acquire_many_with(&[&y2, &x2], &options).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let released = Instant::now();
    held.release().await.unwrap();
    let lease = waiting.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woke after {:?}, not by the notice",
        released.elapsed()
    );
    lease.release().await.unwrap();
}

/// How many masters of `cluster` have a subscriber on the release channel of `key`.
async fn subscribed_on(cluster: &Cluster, key: &str) -> usize {
    let channel = format!("redquorum:released:{key}");
    let mut n = 0;
    for url in cluster.urls() {
        let mut conn = raw(&url).await;
        let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await
            .unwrap();
        n += usize::from(subscribers > 0);
    }
    n
}

/// The key that keeps a waiter out changes between attempts: `x` held first, then, once
/// `x` is released, `y`. The waiter also waits on `y`'s release notice, and takes both
/// as soon as `y` is released, not at its retry timer or `y`'s expiry.
// Checks I10 (no release is missed while subscribing).
#[tokio::test]
async fn a_waiter_also_wakes_on_a_key_found_held_later() {
    let cluster = Cluster::start(3).await.unwrap();
    let first = client(&cluster).ttl("20s").build().unwrap();
    let second = client(&cluster).ttl("20s").build().unwrap();
    let waiter = client(&cluster)
        .ttl("10s")
        .retry(Retry::new().delay(Duration::from_secs(15)))
        .build()
        .unwrap();
    let (x, y) = (unique_key("later_x"), unique_key("later_y"));
    let on_x = first.acquire(&x).await.unwrap();
    let (x2, y2) = (x.clone(), y.clone());
    let waiting = tokio::spawn(async move {
        let options = AcquireOptions::new().wait_timeout("18s");
        waiter.acquire_many_with(&[&x2, &y2], &options).await
    });
    wait_until(Duration::from_secs(5), "the waiter waits on x", || {
        let (cluster, x) = (&cluster, &x);
        async move { subscribed_on(cluster, x).await >= 2 }
    })
    .await;
    let on_y = second.acquire(&y).await.unwrap();
    on_x.release().await.unwrap();
    // Woken by `x`'s release, the waiter finds `y` held: it must now wait on `y` too.
    wait_until(Duration::from_secs(5), "the waiter waits on y", || {
        let (cluster, y) = (&cluster, &y);
        async move { subscribed_on(cluster, y).await >= 2 }
    })
    .await;
    assert!(!waiting.is_finished());
    let released = Instant::now();
    on_y.release().await.unwrap();
    let lease = waiting.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woke after {:?}, not by y's release notice",
        released.elapsed()
    );
    lease.release().await.unwrap();
}

/// A name of the list that holds another kind of lock: `WrongKind`, not retryable, and the
/// message says which name, nothing set; the longest list allowed is locked and released.
#[tokio::test]
async fn a_name_of_another_kind_is_named_and_the_longest_list_is_locked() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let names: Vec<String> = (0..MAX_RESOURCES)
        .map(|i| unique_key(&format!("longest{i}")))
        .collect();
    let list: Vec<&str> = names.iter().map(String::as_str).collect();
    let lease = client.acquire_many(&list).await.unwrap();
    assert_eq!(lease.resources().len(), MAX_RESOURCES);
    lease.release().await.unwrap();
    none_left(&cluster, &list).await;
    let odd = &names[17];
    let mut conn = raw(&cluster.urls()[0]).await;
    let _: () = conn.set(odd, "v").await.unwrap();
    let owner = format!("redquorum:owner:{odd}");
    let _: () = conn.hset(&owner, "kind", "semaphore").await.unwrap();
    let err = client
        .acquire_many_with(&list, &AcquireOptions::new().attempts(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains(odd.as_str()), "{err}");
    assert!(err.to_string().contains("semaphore"), "{err}");
    let others: Vec<&str> = list.iter().copied().filter(|n| *n != odd).collect();
    none_left(&cluster, &others).await;
}

/// A name held by readers of a read-write lock holds the readers' mark, with its owner
/// record (kind `rwlock`) and the reader keys: another kind of lock to `acquire_many`,
/// refused as `WrongKind` (permanent), with nothing set and the readers' records left as
/// they were; a mutex on the name stays refused while the reader holds.
#[tokio::test]
async fn a_name_held_by_readers_is_refused_as_another_kind() {
    let cluster = Cluster::start(3).await.unwrap();
    let readers = client(&cluster).build().unwrap();
    let locker = client(&cluster).build().unwrap();
    let (doc, other) = (unique_key("read_doc"), unique_key("read_other"));
    let read = readers.rwlock(&doc).read().await.unwrap();
    let owner = format!("redquorum:owner:{doc}");
    let index = format!("redquorum:rw:{doc}:readers");
    // The read round returns on a quorum: await its records on every master.
    wait_until(
        Duration::from_secs(2),
        "the reader is on every master",
        || held_everywhere(&cluster, read.key(), read.value()),
    )
    .await;
    let err = match locker
        .acquire_many_with(&[&doc, &other], &AcquireOptions::new().attempts(1))
        .await
    {
        Ok(lease) => panic!(
            "acquire_many granted {doc:?} while a reader holds it: {:?}",
            lease.masters()
        ),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains(doc.as_str()), "{err}");
    assert!(err.to_string().contains("read-write lock"), "{err}");
    none_left(&cluster, &[&other]).await;
    for server in cluster.servers() {
        assert_eq!(
            value_on(server, &doc).await.as_deref(),
            Some("redquorum:readers"),
            "the readers' mark changed"
        );
        let mut conn = raw(&server.url()).await;
        let record: std::collections::HashMap<String, String> = conn.hgetall(&owner).await.unwrap();
        assert_eq!(
            record,
            [("kind".to_owned(), "rwlock".to_owned())].into(),
            "the owner record of the read-write lock changed"
        );
        let pttl: i64 = conn.pttl(&owner).await.unwrap();
        assert!(pttl > 0, "the owner record lost its expiry: {pttl}");
        let member: bool = conn.sismember(&index, read.value()).await.unwrap();
        assert!(member, "the reader left the index");
        assert_eq!(
            value_on(server, read.key()).await.as_deref(),
            Some(read.value())
        );
    }
    let err = locker.try_acquire(&doc).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongKind, "{err}");
    assert!(!read.handle().is_lost());
    read.release().await.unwrap();
}

/// Two clients list the same two resources in opposite orders and contend in a loop: no
/// hold-and-wait, so both finish every cycle, and never hold a resource at once.
// Checks I15 (no deadlock over several resources).
#[tokio::test]
async fn opposite_orders_never_deadlock() {
    let cluster = Cluster::start(3).await.unwrap();
    let (x, y) = (unique_key("order_x"), unique_key("order_y"));
    let busy: Arc<[AtomicBool; 2]> = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for order in [[x.clone(), y.clone()], [y.clone(), x.clone()]] {
        let client = client(&cluster).ttl("2s").build().unwrap();
        let (busy, done, x) = (Arc::clone(&busy), Arc::clone(&done), x.clone());
        tasks.push(tokio::spawn(async move {
            let options = AcquireOptions::new().wait_timeout("5s");
            for _ in 0..15 {
                let names = [order[0].as_str(), order[1].as_str()];
                let lease = client.acquire_many_with(&names, &options).await.unwrap();
                for r in lease.resources() {
                    let i = usize::from(r != x);
                    assert!(!busy[i].swap(true, Ordering::SeqCst), "{r} held twice");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for flag in busy.iter() {
                    flag.store(false, Ordering::SeqCst);
                }
                lease.release().await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let all = futures::future::try_join_all(tasks);
    tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("the two clients deadlocked")
        .unwrap();
    assert_eq!(done.load(Ordering::Relaxed), 30);
}

#[tokio::test]
async fn bad_lists_are_refused_with_what_to_change() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let too_many: Vec<String> = (0..=MAX_RESOURCES).map(|i| format!("r{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    let cases: [(&[&str], &str); 5] = [
        (&[], "name at least one"),
        (&["a", "b", "a"], "list each resource once"),
        (&too_many, "MAX_RESOURCES"),
        (&["a", ""], "it is empty"),
        (&["a", "redquorum:epoch"], "use another name"),
    ];
    for (list, hint) in cases {
        let err = client.acquire_many(list).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResource, "{list:?}: {err}");
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains(hint), "{list:?}: {err}");
    }
    // The long list is named briefly in the error.
    let err = client.acquire_many(&too_many).await.unwrap_err();
    assert!(err.to_string().len() < 400, "{err}");
}

/// The extension of a lease over several keys counts a master only if it still holds
/// every key: a master that lost one key extends none of them.
// Checks I7 (validity the masters hold) and I14 (exclusion over several resources).
#[tokio::test]
async fn an_extension_counts_only_masters_that_hold_every_key() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let (x, y) = (unique_key("ext_x"), unique_key("ext_y"));
    let lease = client.acquire_many(&[&x, &y]).await.unwrap();
    for key in [&x, &y] {
        wait_until(Duration::from_secs(2), "set everywhere", || {
            held_everywhere(&cluster, key, lease.value())
        })
        .await;
    }
    // One master loses `y`: the others still make a quorum.
    let mut first = raw(&cluster.urls()[0]).await;
    let _: () = first.del(&y).await.unwrap();
    let _: () = first.pexpire(&x, 1000).await.unwrap();
    let report = lease.extend().await.unwrap();
    assert_eq!(
        report
            .masters()
            .iter()
            .filter(|m| m.outcome().is_granted())
            .count(),
        2,
        "{report:?}"
    );
    // That master's `x` was not extended: nothing is extended where a key is missing.
    let pttl: i64 = first.pttl(&x).await.unwrap();
    assert!(pttl <= 1000, "{pttl}");
    // A second master loses `y`: no quorum holds both keys, the lease is lost.
    let mut second = raw(&cluster.urls()[1]).await;
    let _: () = second.del(&y).await.unwrap();
    let err = lease.extend().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(lease.is_lost());
    lease.release().await.unwrap();
    none_left(&cluster, &[&x, &y]).await;
}

#[tokio::test]
async fn with_lock_many_runs_the_work_and_releases_every_key() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).build().unwrap();
    let (x, y) = (unique_key("with_x"), unique_key("with_y"));
    let seen = client
        .with_lock_many(&[&y, &x], &AcquireOptions::new(), |lease| async move {
            lease.resources().map(str::to_owned).collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert_eq!(seen, [x.clone(), y.clone()]);
    none_left(&cluster, &[&x, &y]).await;
}

/// Dropped after each of its polls, an `acquire_many` leaves no key behind beyond its
/// TTL: whatever the attempt in flight set is released in the background (the keys are
/// gone long before their 10 s TTL).
// Checks I5 (a failed or cancelled attempt leaves no key behind).
#[tokio::test]
async fn a_dropped_acquire_many_leaves_no_key() {
    let cluster = Cluster::start(3).await.unwrap();
    let client = client(&cluster).ttl("10s").build().unwrap();
    let (x, y) = (unique_key("drop_x"), unique_key("drop_y"));
    let list = [x.as_str(), y.as_str()];
    for k in 1..=50 {
        let done = {
            let mut acquiring = pin!(client.acquire_many(&list));
            let mut done = None;
            for _ in 0..k {
                if let std::task::Poll::Ready(out) = futures::poll!(acquiring.as_mut()) {
                    done = Some(out);
                    break;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            done
            // The future is dropped here, after its k-th poll.
        };
        if let Some(lease) = done {
            lease.unwrap().release().await.unwrap();
            none_left(&cluster, &[&x, &y]).await;
            return;
        }
        none_left(&cluster, &[&x, &y]).await;
    }
    panic!("acquire_many never completed within 50 polls");
}

/// With fencing, each resource gets a token from its own counter: larger than every
/// earlier token of that resource, whether it was locked alone or with others.
// Checks I12 (fencing tokens are unique and ordered).
#[tokio::test]
async fn each_resource_gets_its_own_fencing_token() {
    let cluster = Cluster::start_with(3, &ServerOptions::new().persistence(Persistence::AofAlways))
        .await
        .unwrap();
    for url in cluster.urls() {
        seed_old_epoch(&url).await;
    }
    let client: Redlock = client(&cluster)
        .quarantine(true)
        .fencing(true)
        .ttl("1s")
        .timeouts(Timeouts::new().node("100ms"))
        .build()
        .unwrap();
    let (x, y) = (unique_key("tok_x"), unique_key("tok_y"));
    let mut last_x = 0;
    for _ in 0..3 {
        let lease = client.acquire(&x).await.unwrap();
        last_x = lease.fencing_token().unwrap().get();
        lease.release().await.unwrap();
    }
    let lease = client.acquire_many(&[&y, &x]).await.unwrap();
    let tokens: Vec<(String, u64)> = lease
        .fencing_tokens()
        .map(|(r, t)| (r.to_owned(), t.get()))
        .collect();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0].0, x);
    assert!(tokens[0].1 > last_x, "{tokens:?} after {last_x}");
    assert_eq!(lease.fencing_token().map(|t| t.get()), Some(tokens[0].1));
    let first_y = tokens[1].1;
    lease.release().await.unwrap();
    let again = client.acquire(&y).await.unwrap();
    assert!(again.fencing_token().unwrap().get() > first_y);
    again.release().await.unwrap();
}
