//! The `tracing` output of a real workload (docs/observability.md): with the default
//! settings no span or event shows a resource name, only its keyed hash; with
//! `trace_resource_names(true)` the names are there (which proves the capture sees them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod capture;
mod support;

use redquorum::Waiting;
use std::time::Duration;

use capture::Captured;
use redquorum::{AcquireOptions, ErrorKind};
use support::*;
use tracing_subscriber::fmt::format::FmtSpan;

/// A resource name that appears nowhere else in the output.
const SECRET: &str = "customer-7f3a:alice@example.com";

/// Runs a workload that passes through every span and event that names a resource (the
/// round, a waiting acquire, a watchdog reaching `max_hold`, a force-unlock, background
/// releases) with every level captured, and returns the output.
async fn traced_workload(shown: bool) -> String {
    // This thread only: the test's current-thread runtime runs every task of the client.
    let (captured, _subscriber) = Captured::install(tracing::Level::TRACE, FmtSpan::FULL);

    let cluster = Cluster::start(3).await.unwrap();
    // The waiting acquire below queues behind this client's own lease: without the opt-out
    // it would fail at once with AlreadyHeld and trace no wait.
    let client = client(&cluster)
        .key_prefix("locks:")
        .trace_resource_names(shown)
        .waiting(Waiting::new().own_leases(true))
        .build()
        .unwrap();
    let resource = format!("{SECRET}/{}", unique_key("r"));

    let lease = client.acquire(&resource).await.unwrap();
    let waiting = AcquireOptions::new().wait_timeout(Duration::from_millis(300));
    let err = client.acquire_with(&resource, &waiting).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WaitTimeout, "{err}");
    lease.release().await.unwrap();

    let capped = AcquireOptions::new().max_hold("100ms");
    let err = client
        .with_lock(&resource, &capped, |_| std::future::pending::<()>())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");

    let _held = client.acquire(&resource).await.unwrap();
    client.force_unlock_any(&resource).await.unwrap();
    client.shutdown().await;
    captured.text()
}

#[tokio::test]
async fn by_default_no_span_or_event_shows_a_resource_name() {
    let output = traced_workload(false).await;
    for expected in [
        "redquorum.round",
        "acquire attempt failed, waiting",
        "watchdog reached max_hold",
        "force-unlock",
        // Operators filter the force-unlocks' warnings by this target (docs/observability.md).
        "WARN redquorum::operate: force-unlock",
        "resource=#",
    ] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
    for leaked in ["customer-7f3a", "alice@example.com", "locks:"] {
        assert!(!output.contains(leaked), "{leaked:?} in:\n{output}");
    }
}

#[tokio::test]
async fn with_trace_resource_names_the_names_are_shown() {
    let output = traced_workload(true).await;
    assert!(output.contains(SECRET), "no resource name in:\n{output}");
    assert!(!output.contains("resource=#"), "{output}");
}
