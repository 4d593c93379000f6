//! S25: an operator force-unlocks a lock whose fenced holder is alive, inside its critical
//! section. Exclusion breaks, by design: a contender gets in while the holder still has
//! validity by its own clock. Fencing must keep the storage safe (the holder's late write
//! is refused at the fenced register), and the holder must learn of the loss at its next
//! extension. S25e: the holder extends before anyone else comes; that extension must fail
//! (an extension never sets a force-unlocked key again), so the next acquirer gets in at
//! once.

use redquorum::{Retry, Watchdog};
use std::time::Duration;

use redquorum::{LostReason, Mutant, Redlock};
use redquorum_testkit::Persistence;
use tokio::time::timeout;

use crate::harness::*;
use crate::history::now_ns;

/// A fenced client (quarantine and fencing, `ttl_max` = `ttl`) with `mutant` planted.
fn fenced(urls: &[String], ttl: Duration, watchdog: bool, mutant: Option<Mutant>) -> Redlock {
    let builder = client_over(urls.to_vec())
        .ttl(ttl)
        .retry(Retry::new().wait(ttl * 3).attempts(1000))
        .watchdog(
            (if watchdog {
                Watchdog::on()
            } else {
                Watchdog::off()
            })
            .interval(ttl / 4),
        );
    build(Guards::RSV_F.apply(builder, ttl), mutant)
}

/// Starts the scenario's durable masters with an old data epoch, so that they vote at
/// once and count for fencing tokens.
async fn start(setup: Setup, ttl: Duration) -> Env {
    let mut env = Env::start(setup.persistence(Persistence::AofAlways)).await;
    env.ttl_max = ttl;
    seed_epochs(&env.cluster).await;
    env
}

/// S25: the holder (watchdog on) is inside, its counter and register read; the operator
/// calls `force_unlock_any`; a contender gets in at once and reads; the holder's write
/// lands only then, and must be refused at the fenced register; the holder's watchdog
/// must signal the loss at its next extension.
pub async fn s25(n: usize, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S25",
        "force-unlock of a live fenced holder [RSV+F]",
        expect,
        n,
    );
    let ttl = TTL;
    let mut env = start(setup, ttl).await;
    let urls = env.urls();
    let resource = env.resource(0);
    let holder = fenced(&urls, ttl, true, None);
    let contender = fenced(&urls, ttl, false, None);
    let operator = fenced(&urls, ttl, false, None);
    for client in [&holder, &contender, &operator] {
        settle(client, &env.prefix).await;
    }
    let mut store = env.store().await;

    let Ok(held) = enter(
        &holder,
        env.history.recorder("S25-H", &resource),
        &mut store,
    )
    .await
    else {
        panic!("S25: the holder could not acquire a free lock");
    };
    let old = held.rec.token();
    let report = operator.force_unlock_any(&resource).await.unwrap();
    if report.removed() != [held.lease.value()] {
        env.violation(format!("the force-unlock removed {:?}", report.removed()));
    }
    let counter = report.fence_counter();
    match (old, counter) {
        (Some(old), Some(counter)) if counter > old => {}
        _ => env.violation(format!(
            "fence counter {counter:?} not raised past the holder's token {old:?}"
        )),
    }
    // The lock is free, though its holder still has validity by its own clock.
    let Ok(inside) = enter(
        &contender,
        env.history.recorder("S25-C", &resource),
        &mut store,
    )
    .await
    else {
        panic!("S25: the contender could not acquire the force-unlocked lock");
    };
    // Every master holds the holder's token or no counter (a fresh resource), so the next
    // token is above the raised counter as well as the holder's token.
    match (inside.rec.token(), counter) {
        (Some(token), Some(counter)) if token > counter => {}
        (token, _) => env.violation(format!(
            "the next token {token:?} is not above the raised counter {counter:?}"
        )),
    }
    // The old holder's write arrives late, after the contender's read.
    let mut held = held.write(&mut store).await;
    let wrote_at = now_ns();
    match timeout(ttl, held.lease.lost()).await {
        Ok(LostReason::ExtendFailed) => env.note("the holder's watchdog signalled the loss"),
        other => env.violation(format!(
            "the holder's lease was not lost at its next extension: {other:?}"
        )),
    }
    match held.lease.extend().await {
        Ok(_) => {
            held.rec.ext_ok(&held.lease);
            env.violation("the force-unlocked holder extended its lease");
        }
        Err(e) => held.rec.ext_fail(&e),
    }
    held.end_at(wrote_at).await;
    inside.leave(&mut store).await;
    env.note(format!("{report}"));
    env.finish(Workers::none(), Checks::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s25_force_unlock_of_a_live_fenced_holder_n3() {
    let out = s25(3, Expect::Fenced).await;
    out.check();
    assert_eq!(out.violations_noted, 0, "{}", out.line);
}

/// S25e: the holder (no watchdog) is inside; the operator calls `force_unlock_any`; the
/// holder extends before anyone else comes. The extension must fail, the holder then
/// leaves without writing, and a contender that starts right after must get in at once:
/// its acquire is held to the time of a couple of attempts (checker `slow_acq`). An
/// extension that sets the missing keys again undoes the unlock and keeps the contender
/// waiting until the holder's lease runs out.
pub async fn s25e(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let setup = Setup::new(
        "S25e",
        "force-unlock, then the holder extends first [RSV+F]",
        expect,
        n,
    );
    // Long enough that a contender kept out by re-created keys waits far past the bound.
    let ttl = Duration::from_millis(1500);
    let mut env = start(setup, ttl).await;
    let urls = env.urls();
    let resource = env.resource(0);
    let holder = fenced(&urls, ttl, false, mutant);
    let contender = fenced(&urls, ttl, false, None);
    let operator = fenced(&urls, ttl, false, None);
    for client in [&holder, &contender, &operator] {
        settle(client, &env.prefix).await;
    }
    let round = measure_round(&contender, &env.prefix).await;
    let bound = attempts_bound(2, round);
    let mut store = env.store().await;

    let Ok(mut held) = enter(
        &holder,
        env.history.recorder("S25e-H", &resource),
        &mut store,
    )
    .await
    else {
        panic!("S25e: the holder could not acquire a free lock");
    };
    let report = operator.force_unlock_any(&resource).await.unwrap();
    if report.deleted() == 0 {
        env.violation(format!("the force-unlock deleted nothing: {report}"));
    }
    match held.lease.extend().await {
        Ok(_) => {
            held.rec.ext_ok(&held.lease);
            env.violation("the force-unlocked holder's extension succeeded: the unlock was undone");
        }
        Err(e) => held.rec.ext_fail(&e),
    }
    // A holder that knows it lost the lock leaves at once; one that does not works on
    // until its lease runs out, as a careful holder would.
    let held = if held.lease.is_lost() {
        held.abandon().await;
        None
    } else {
        Some(held)
    };
    let store_url = env.store.url();
    let rec = env.history.recorder("S25e-C", &resource);
    let contending = tokio::spawn(async move {
        let mut store = crate::support::raw(&store_url).await;
        match enter(&contender, rec, &mut store).await {
            Ok(inside) => {
                inside.leave(&mut store).await;
                None
            }
            Err((_, e)) => Some(format!("{:?}", e.kind())),
        }
    });
    if let Some(held) = held {
        let _ = timeout(ttl * 2, held.lease.lost()).await;
        held.abandon().await;
    }
    if let Some(kind) = contending.await.unwrap() {
        env.note(format!("the contender failed: {kind}"));
    }
    env.finish(
        Workers::none(),
        Checks {
            acquire_bound: Some(bound),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s25e_force_unlock_then_the_holder_extends_n3() {
    s25e(3, None, Expect::Hold).await.check();
}
