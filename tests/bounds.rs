//! The public types and futures can cross threads: `Send` (and `Sync` where shared), so
//! they work with `tokio::spawn` and multi-threaded runtimes.
#![allow(clippy::unwrap_used)]

use redquorum::{
    AcquireOptions, Builder, Error, ExtendReport, FencingToken, Lease, LeaseHandle, LeaseMode,
    Lost, MasterReport, Redlock, ReleaseReport, Semaphore,
};

fn assert_send<T: Send>(_: &T) {}
fn assert_send_sync<T: Send + Sync + 'static>() {}

#[test]
fn types_are_send_and_sync() {
    assert_send_sync::<Redlock>();
    assert_send_sync::<Builder>();
    assert_send_sync::<AcquireOptions>();
    assert_send_sync::<Lease>();
    assert_send_sync::<LeaseHandle>();
    assert_send_sync::<Error>();
    assert_send_sync::<MasterReport>();
    assert_send_sync::<ReleaseReport>();
    assert_send_sync::<ExtendReport>();
    assert_send_sync::<FencingToken>();
    assert_send_sync::<Semaphore>();
    assert_send_sync::<LeaseMode>();
    fn send_static<T: Send + 'static>() {}
    send_static::<Lost>();
}

#[tokio::test]
async fn futures_are_send() {
    let client = Redlock::builder()
        .master("redis://127.0.0.1:1")
        .build()
        .unwrap();
    assert_send(&client.acquire("k"));
    assert_send(&client.try_acquire("k"));
    assert_send(&client.acquire_with("k", &AcquireOptions::new()));
    assert_send(
        &client.with_lock("k", &AcquireOptions::new(), |lease| async move {
            lease.remaining()
        }),
    );
    let semaphore = client.semaphore("s", 2).unwrap();
    assert_send(&semaphore.acquire(1));
    assert_send(&semaphore.acquire_with(1, &AcquireOptions::new()));
    assert_send(
        &semaphore.with_permits(
            1,
            &AcquireOptions::new(),
            |lease| async move { lease.permits() },
        ),
    );
    assert_send(&client.acquire_many(&["a", "b"]));
    assert_send(&client.acquire_many_with(&["a", "b"], &AcquireOptions::new()));
    assert_send(
        &client.with_lock_many(&["a", "b"], &AcquireOptions::new(), |lease| async move {
            lease.remaining()
        }),
    );
}

/// A lease can be released from a spawned task.
#[allow(dead_code)]
fn lease_futures_are_send(lease: Lease) {
    assert_send(&lease.extend());
    assert_send(&lease.lost());
    assert_send(&lease.release());
}
