//! Review finding (rev2): a master that runs every script but never votes (here one that
//! may evict keys; equally one in restart quarantine, or one whose answer came after the
//! node timeout) hands the key back to a waiter after its failed confirm, and that
//! hand-back notice counts as evidence. Together with the one granting master it looks
//! like a quorum, so the waiter confirms again at once, in a loop, while the third
//! master still holds another value: each loop spends an attempt, and the call fails
//! long before the lock frees (docs/design.md §17: "It never confirms again on the same
//! minority").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use redquorum::{Retry, Waiting};
use std::time::Duration;

use redis::AsyncCommands;
use redquorum::AcquireOptions;
use support::*;
use tokio::time::{Instant, timeout};

async fn queued_everywhere(cluster: &Cluster, key: &str) -> bool {
    for server in cluster.servers() {
        let mut conn = raw(&server.url()).await;
        let members: Vec<String> = conn
            .zrange(format!("redquorum:queue:{key}"), 0, -1)
            .await
            .unwrap();
        if members.is_empty() {
            return false;
        }
    }
    true
}

// Checks I18 (hand-off never gives two waiters a quorum).
#[tokio::test]
async fn a_minority_hand_back_through_a_master_that_never_votes_is_no_quorum() {
    let cluster = Cluster::start(3).await.unwrap();
    // Master 3 may evict keys: it runs every script, and never votes.
    {
        let mut conn = raw(&cluster.servers()[2].url()).await;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg("64mb")
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("allkeys-lru")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // The lease outlives the 15 s the test gives the waiter to queue.
    let holder = client(&cluster)
        .ttl(Duration::from_secs(20))
        .build()
        .unwrap();
    // Refreshes every 1.5 s. An attempt may end as no quorum rather than held (master 2's
    // answer pending at the decision, master 3 not voting), often several in a row on a
    // loaded machine: a timed retry a second later then finds the lock held and queues.
    let waiter = client(&cluster)
        .retry(Retry::new().delay("1s").jitter("1ms"))
        .waiting(Waiting::new().waiter_ttl("4500ms"))
        .build()
        .unwrap();
    let key = unique_key("never-votes");
    let lease = holder.acquire(&key).await.unwrap();
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move {
            // 16 attempts: the retries before it queues, then two or three refreshes in
            // the ~3 s until the lock frees. A confirm loop spends them in milliseconds.
            let options = AcquireOptions::new().wait_timeout("30s").attempts(16);
            waiter.acquire_with(&key, &options).await
        }
    });
    wait_until(Duration::from_secs(15), "the waiter registered", || {
        let (cluster, key) = (&cluster, &key);
        async move { queued_everywhere(cluster, key).await }
    })
    .await;
    // The holder's release misses master 2 (a timeout): its value stays there for 3 s.
    // Stand-in: another value that expires in 3 s.
    {
        let mut conn = raw(&cluster.servers()[1].url()).await;
        let _: () = conn
            .set_options(
                &key,
                "left-behind",
                redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(3000)),
            )
            .await
            .unwrap();
    }
    let released = Instant::now();
    let _ = lease.release().await;
    let result = timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the call ends within its budget")
        .unwrap();
    let elapsed = released.elapsed();
    assert!(
        result.is_ok(),
        "the waiter gave up after {elapsed:?}, before the lock freed (~3 s): {result:?}"
    );
}
