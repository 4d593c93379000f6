//! S0 (contention without faults) and S19 (split votes and retry storms).

use std::time::Duration;

use redquorum::Mutant;
use tokio::time::sleep;

use crate::harness::*;

/// S0: 8 clients on 2 resources, no faults.
pub async fn s0(n: usize, mutant: Option<Mutant>, expect: Expect) -> Outcome {
    let mut env = Env::start(Setup::new("S0", "contention, no faults", expect, n)).await;
    let urls = env.urls();
    let workers = env.spawn_workers(8, 2, Work::default(), |_| {
        let mut b = client_over(urls.clone());
        if let Some(m) = mutant {
            b = b.mutant(m);
        }
        b.build().unwrap()
    });
    env.mark_heal();
    sleep(phase()).await;
    env.finish(
        workers,
        Checks {
            liveness: Some(TTL + Duration::from_millis(1500)),
            ..Checks::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s0_contention_n3() {
    s0(3, None, Expect::Hold).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s0_contention_n5() {
    s0(5, None, Expect::Hold).await.check();
}
