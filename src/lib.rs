//! redquorum: a distributed lock over N independent Redis masters (the Redlock algorithm).
//!
//! A [`Redlock`] client sends `SET key value NX PX ttl` to N independent masters at once,
//! counts the replies as they arrive, and grants a [`Lease`] as soon as a majority
//! (`N/2 + 1`) agreed with validity left: the TTL minus the time the round took (measured
//! from before the first request) minus a clock-drift allowance. A failed attempt is
//! released on every master it may have touched, and retried after a randomised pause.
//! A master that is down or hung adds no latency once a majority has answered.
//!
//! # Requirements
//! - **A tokio runtime** with time and I/O enabled (tokio features `rt` or
//!   `rt-multi-thread`, `time`, `net`, `macros`). Outside one, calls return
//!   [`ErrorKind::NoRuntime`] instead of panicking. A client can be built anywhere and
//!   used from any runtime: its background tasks start in the runtime of first use, and
//!   start again in the next one if that runtime shuts down.
//! - **Patience on a fresh cluster, or a bootstrap.** Brand-new masters abstain once, for
//!   `ttl_max` (restart quarantine: a fresh server cannot be told from one that lost its
//!   locks), so the first [`acquire`](Redlock::acquire) sleeps until they vote, within its
//!   wait budget (twice `ttl_max` by default); [`try_acquire`](Redlock::try_acquire)
//!   reports [`ErrorKind::NotEnoughVoters`] with [`Error::retry_after`]. An operator who
//!   just created the masters can say so once with [`Redlock::init_cluster`]: they vote
//!   at once, and every client is checked against the cluster's settings.
//!
//! # Where to start
//! - [`Redlock::with_lock`] runs a critical section while holding the lock: it keeps the
//!   lease extended, **drops the work the moment the lease is lost** (returning
//!   [`ErrorKind::LeaseLost`]), and releases the lock however the work ends. Use it for
//!   work of unknown length.
//! - [`Redlock::acquire`] returns a [`Lease`] to release yourself; its documentation says
//!   exactly when a lease is valid and when it is lost. [`Builder`] lists every setting.
//! - [`Redlock::acquire_many`] and [`Redlock::with_lock_many`] lock several resources at
//!   once, all or none, as one lease; callers that list them in different orders cannot
//!   deadlock.
//! - **Fencing**, where a late write would do damage: acquire with
//!   [`Builder::fencing`] or [`AcquireOptions::fencing`], and have the storage check each
//!   lease's [`FencingToken`] ([`fenced_set`] for Redis-backed data; a
//!   `WHERE fence <= $token` condition in SQL; with the feature `postgres`, a fence table
//!   claimed inside the writing transaction, `postgres::fenced`). Tokens count only
//!   durable masters (`appendonly yes`, `appendfsync always`).
//! - **Many readers or one writer**: [`Redlock::rwlock`] gives an [`RwLock`] whose read
//!   leases are shared and whose write lease is exclusive, both on a quorum of masters;
//!   a waiting writer is not starved by a stream of readers.
//!
//! # Guarantees, and what they rest on
//! Two clients never hold valid leases on the same resource at once, provided that
//! - masters keep lock keys until they expire (persistence with `appendfsync always`, or
//!   restart quarantine, on by default, which keeps a master that may have lost them from
//!   voting for `ttl_max`);
//! - clocks on clients and masters advance at about the same rate (the drift allowance,
//!   `ttl * drift_factor + 2 ms`, covers the difference);
//! - the holder stops touching the resource by its deadline, when
//!   [`LeaseHandle::remaining`] reaches zero ([`LeaseHandle::is_lost`] turns true a
//!   safety margin earlier, and [`Redlock::with_lock`] stops the work then).
//!
//! The last point cannot be guaranteed by any lease-based lock: a process pause (GC, swap,
//! a stopped VM) or a delayed network packet can carry a write past the deadline. Where
//! that matters, have the storage reject stale writes with fencing tokens. Liveness needs
//! only a reachable majority; a crashed holder's lock frees itself within one TTL. The
//! design, each invariant and why it holds: [docs/design.md] in the repository.
//!
//! [docs/design.md]: https://github.com/redquorum/redquorum/blob/main/docs/design.md
//!
//! # Quick start
//! ```no_run
//! use redquorum::{ErrorKind, Redlock};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Redlock::builder()
//!     .masters(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
//!     .ttl("10s")
//!     .build()?;
//!
//! match client.acquire("orders:42").await {
//!     Ok(lease) => {
//!         // ... charge the card, within lease.remaining() ...
//!         lease.release().await?;
//!     }
//!     // Held by another client for the whole wait budget (twice ttl_max by default).
//!     Err(e) if e.kind() == ErrorKind::WaitTimeout => println!("someone else is on it"),
//!     // No quorum of masters answered for the whole wait budget (down, unresolvable,
//!     // timing out): an outage, not contention. The message names each master's failure.
//!     Err(e) if e.kind() == ErrorKind::NoQuorum => {
//!         eprintln!("the lock's masters are unavailable: {e}");
//!         return Err(e.into());
//!     }
//!     Err(e) => return Err(e.into()),
//! }
//! // Before the process exits: finish the releases still running in the background.
//! client.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//! - `tls`: `rediss://` masters, over rustls (ring), checked against the system's roots or
//!   the CA given with [`Tls::ca_pem`]; a client certificate with
//!   [`Tls::client_cert_pem`].
//! - `metrics`: counters and histograms through the [`metrics`](https://docs.rs/metrics)
//!   facade (acquire time by outcome, per-master answers, leases lost, hand-offs, ...);
//!   the application installs the exporter it wants. Their names and labels, and every
//!   `tracing` span and event, are listed in [docs/observability.md] in the repository;
//!   [`Builder::trace_resource_names`] says whether traces show resource names.
//! - `postgres`: fencing checked in PostgreSQL, atomically with the writes (the module
//!   `postgres`): the fence table's `SCHEMA` and `CLAIM` as SQL for any driver, `claim`
//!   and `fenced` over `tokio-postgres` (the application's own client; the library opens
//!   no connection).
//!
//! Deliberately broken variants of the algorithm, with which the repository's chaos suite
//! and simulation prove that their checkers catch bugs, exist only with
//! `--cfg redquorum_mutants`, which the repository's own builds set and a dependent's build
//! never does: no feature can switch them on.
//!
//! Two more crates of this workspace stand beside the library:
//! - `redquorum-cli`, the `redquorum` command (`cargo install redquorum-cli`): runs a
//!   program while holding a lock and stops it before the lock can expire if the lock is
//!   lost; inspects, force-unlocks, initialises and checks the masters. It uses only this
//!   crate's public API.
//! - `redquorum-testkit`: real `redis-server` and PostgreSQL processes for tests (kill,
//!   pause, restart, proxies, clock jumps); add it as a dev-dependency.
//!
//! [docs/observability.md]: https://github.com/redquorum/redquorum/blob/main/docs/observability.md
#![doc(test(attr(deny(warnings), allow(dead_code))))]

mod backoff;
#[cfg(redquorum_bench_internals)]
#[doc(hidden)]
pub mod bench_internals;
mod client;
mod cluster;
mod config;
mod core;
mod deadline;
mod engine;
mod error;
mod fencing;
mod guard;
mod handed;
mod held;
mod lease;
mod lock;
mod many;
mod master;
// The planted bugs exist only with `--cfg redquorum_mutants`; the crate's own tests (the
// simulation) name them in their profiles, and plant them only with the feature too.
#[cfg(any(test, redquorum_mutants))]
#[cfg_attr(not(redquorum_mutants), allow(dead_code, unreachable_pub))]
mod mutants;
mod op;
mod ops;
#[cfg(feature = "postgres")]
pub mod postgres;
mod quarantine;
mod quorum;
mod rwlock;
mod scripts;
mod semaphore;
#[cfg(test)]
mod sim;
mod telemetry;
mod wait;

pub use client::Redlock;
pub use config::{
    Backoff, Builder, Clock, IntoDuration, RedactedUrl, Retry, Timeouts, Tls, Waiting, Watchdog,
    defaults, limits,
};
pub use engine::AcquireOptions;
pub use error::{Error, ErrorKind, MasterError, MasterErrorKind, MasterOutcome, MasterReport};
pub use fencing::{FencingToken, fenced_set};
pub use lease::{
    ExtendReport, Lease, LeaseHandle, LeaseMode, Lost, LostReason, Reentry, ReleaseReport,
};
#[cfg(redquorum_mutants)]
pub use mutants::Mutant;
pub use ops::{
    Check, ClockOffset, ClusterInit, ClusterRecord, Facts, Finding, HealthReport, Holding,
    InitOutcome, Inspection, MasterHealth, MasterView, OwnerInfo, QuarantineState, Role, Severity,
    UnlockReport, Verdict,
};
pub use rwlock::RwLock;
pub use semaphore::{LimitReplaced, Semaphore};

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct GuideDoctests;

/// The command's page, whose examples are shell: kept compiling as the README is.
#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
pub struct CliDoctests;
