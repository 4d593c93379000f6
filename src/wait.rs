//! Release notices for waiters (docs/design.md §6, I10).
//!
//! The release script publishes on the lock's channel. A waiting `acquire` subscribes to
//! that channel on every master and retries as soon as a notice arrives from any of them,
//! instead of sleeping out a polling interval. Notices are hints, never trusted for
//! correctness: every wakeup is followed by an ordinary quorum round, and the waiter also
//! wakes when the holder's key expires and after a jittered fallback delay.
//!
//! One pub/sub connection per master serves every waiter of a client, multiplexing
//! channels. Each connection is driven by one task that owns it and handles, in order,
//! subscribe and unsubscribe requests and incoming messages; a channel is unsubscribed
//! only when no waiter wants it any more at the moment the request is handled, so a
//! late unsubscribe never cancels a newer waiter's subscription. After a reconnect the
//! task subscribes again to every channel that still has waiters.
//!
//! Ordering for waiters (the reason for subscribe-before-try):
//! 1. attempt fails: the lock is held;
//! 2. subscribe, and wait until the masters confirmed the subscription;
//! 3. attempt again at once: a release between 1 and 2 is seen by this attempt;
//! 4. from now on any release publishes a notice that reaches the subscription.
//!
//! # Hand-off notices (docs/design.md §17)
//! A queued waiter is notified alone: the release script publishes the waiter's id on the
//! hand-off channel of the waiter's client. Each client subscribes to its hand-off channel
//! once, when its first waiter queues, and keeps the subscription; the connection tasks
//! route a notice on it by its payload to the waiting call that owns that id
//! ([`Notifier::waiter`]), and drop a notice for an id nobody waits for. A waiter is known
//! to the router before it registers on any master, and the subscription is confirmed
//! before then too, so a hand-off after its registration reaches it.
//!
//! Layer: beside the round (docs/design.md §10); it must not use the round, the core,
//! leases or the facade.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Client;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::backoff::Doubling;
use crate::config::MasterSpec;

/// The waiters of one channel.
struct Channel {
    waiters: usize,
    /// Bumped on every notice; each waiter holds a receiver.
    notices: watch::Sender<u64>,
    /// True once every master confirmed (or failed) the subscription.
    ready: watch::Sender<bool>,
}

/// Which channels have waiters; shared by the notifier and its connection tasks.
#[derive(Default)]
struct Registry {
    channels: Mutex<HashMap<Arc<str>, Channel>>,
    /// The client's hand-off channel, once a waiter queued.
    handoff: Mutex<Option<Arc<str>>>,
    /// The queued waiters by id: each master's count of hand-off notices naming the id
    /// (indexed as the client's masters), bumped on every such notice.
    waiters: Mutex<HashMap<Arc<str>, watch::Sender<Vec<u64>>>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Channel>> {
        // Entries are inserted and removed whole; a poisoned map is still consistent.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn notify(&self, channel: &str) {
        if let Some(entry) = self.lock().get(channel) {
            entry.notices.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Routes a message on `channel` from master `from`: a hand-off notice to the waiter
    /// its payload names (dropped when none waits), any other notice to the channel's
    /// waiters.
    fn deliver(&self, from: usize, channel: &str, payload: Option<String>) {
        let handoff = self
            .handoff
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .is_some_and(|h| h == channel);
        if !handoff {
            self.notify(channel);
            return;
        }
        let Some(waiter) = payload else { return };
        // Entries are inserted and removed whole; a poisoned map is still consistent.
        let waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let notices = waiters.get(waiter.as_str());
        tracing::trace!(%waiter, from, known = notices.is_some(), "hand-off notice routed");
        if let Some(notices) = notices {
            notices.send_modify(|counts| {
                if counts.len() <= from {
                    counts.resize(from + 1, 0);
                }
                if let Some(n) = counts.get_mut(from) {
                    *n = n.wrapping_add(1);
                }
            });
        }
    }

    fn wanted(&self, channel: &str) -> bool {
        self.lock().contains_key(channel)
    }

    fn all(&self) -> Vec<Arc<str>> {
        self.lock().keys().cloned().collect()
    }
}

enum Command {
    Subscribe(Arc<str>, oneshot::Sender<()>),
    Unsubscribe(Arc<str>),
}

/// One master's driver, started on first use in the runtime of that use.
struct Slot {
    /// The master's place among the client's masters.
    index: usize,
    name: Arc<str>,
    client: Client,
    /// The running driver's command queue; its task ends when this sender is dropped.
    /// Closed when the runtime that ran the driver is gone.
    queue: Mutex<Option<mpsc::UnboundedSender<Command>>>,
}

/// Release-notice subscriptions over every master of a client.
pub(crate) struct Notifier {
    registry: Arc<Registry>,
    masters: Vec<Slot>,
    node_timeout: Duration,
    connect_timeout: Duration,
    /// How long to wait for the masters to confirm a subscription.
    confirm_timeout: Duration,
    /// Confirmations that suffice: any quorum intersects the masters a holder's release
    /// deletes on, so one of them publishes the notice.
    quorum: usize,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("masters", &self.masters.len())
            .field("channels", &self.registry.lock().len())
            .finish()
    }
}

impl Notifier {
    /// A notifier over `masters`. Nothing runs and no connection is opened until the
    /// first subscription, which starts each master's driver in the runtime it runs in;
    /// so a client built outside any runtime gets notices once used inside one.
    pub(crate) fn new(
        masters: &[MasterSpec],
        quorum: usize,
        node_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let masters = masters
            .iter()
            .enumerate()
            .map(|(index, spec)| Slot {
                index,
                name: Arc::clone(&spec.name),
                // The master's own client: TLS for a `rediss://` master, like its lock
                // connection.
                client: spec.client.clone(),
                queue: Mutex::new(None),
            })
            .collect();
        Self {
            registry: Arc::new(Registry::default()),
            masters,
            node_timeout,
            connect_timeout,
            confirm_timeout: connect_timeout.saturating_add(node_timeout),
            quorum,
        }
    }

    /// A notifier that never delivers notices.
    pub(crate) fn disabled() -> Self {
        Self {
            registry: Arc::new(Registry::default()),
            masters: Vec::new(),
            node_timeout: Duration::ZERO,
            connect_timeout: Duration::ZERO,
            confirm_timeout: Duration::ZERO,
            quorum: 0,
        }
    }

    /// The command queue of `slot`'s driver, starting the driver in the current runtime
    /// when none runs: never started, or its runtime is gone (its queue is closed). The
    /// new driver subscribes again to every channel that has waiters. `None` outside a
    /// runtime.
    fn queue(&self, slot: &Slot) -> Option<mpsc::UnboundedSender<Command>> {
        // The queue is replaced whole under the lock; a poisoned one is still consistent.
        let mut queue = slot.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(live) = queue.as_ref().filter(|q| !q.is_closed()) {
            return Some(live.clone());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(
            Driver {
                index: slot.index,
                name: Arc::clone(&slot.name),
                client: slot.client.clone(),
                registry: Arc::clone(&self.registry),
                commands: rx,
                node_timeout: self.node_timeout,
                connect_timeout: self.connect_timeout,
            }
            .run(),
        );
        *queue = Some(tx.clone());
        Some(tx)
    }

    /// The command queue of `slot`'s driver if one runs; never starts one.
    fn running(slot: &Slot) -> Option<mpsc::UnboundedSender<Command>> {
        let queue = slot.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.as_ref().filter(|q| !q.is_closed()).cloned()
    }

    /// Subscribes to `channel` on every master and returns once each master confirmed or
    /// failed (bounded by the connect and node timeouts).
    pub(crate) async fn subscribe(self: &Arc<Self>, channel: Arc<str>) -> Subscription {
        let (notices, ready) = self.enter(&channel);
        // Made before waiting: dropped meanwhile, it leaves the channel again.
        let subscription = Subscription {
            notifier: Arc::clone(self),
            channel,
            notices,
        };
        self.confirmed(ready).await;
        subscription
    }

    /// Waits until a subscription is confirmed by a quorum of masters (or the
    /// confirmation timed out).
    async fn confirmed(&self, mut ready: watch::Receiver<bool>) {
        let _ = tokio::time::timeout(self.confirm_timeout, ready.wait_for(|r| *r)).await;
    }

    /// Subscribes to the client's hand-off `channel` for good, once (later calls return
    /// at once, or once the first one's confirmation is in), and returns once a quorum of
    /// masters confirmed it or the confirmation timed out.
    pub(crate) async fn keep_handoffs(&self, channel: &Arc<str>) {
        let first = {
            let mut handoff = self
                .registry
                .handoff
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let first = handoff.is_none();
            if first {
                *handoff = Some(Arc::clone(channel));
            }
            first
        };
        if first {
            // Entered once and never left: the subscription lasts as long as the client.
            let (_, ready) = self.enter(channel);
            self.confirmed(ready).await;
            return;
        }
        // A driver whose runtime is gone (the client is used from another runtime now) is
        // started again here, and subscribes anew; wait for those.
        let mut acks: FuturesUnordered<_> = self
            .masters
            .iter()
            .filter(|slot| Self::running(slot).is_none())
            .filter_map(|slot| {
                let queue = self.queue(slot)?;
                let (ack, done) = oneshot::channel();
                queue
                    .send(Command::Subscribe(Arc::clone(channel), ack))
                    .ok()
                    .map(|()| done)
            })
            .collect();
        if !acks.is_empty() {
            let all = async { while acks.next().await.is_some() {} };
            let _ = tokio::time::timeout(self.confirm_timeout, all).await;
            return;
        }
        // Subscribed already, or being subscribed: wait for its confirmation.
        let ready = self
            .registry
            .lock()
            .get(channel)
            .map(|c| c.ready.subscribe());
        if let Some(ready) = ready {
            self.confirmed(ready).await;
        }
    }

    /// Makes `waiter` known to the router: the returned handle is notified of every
    /// hand-off notice naming it, and of the master that sent it, until dropped.
    pub(crate) fn waiter(self: &Arc<Self>, waiter: Arc<str>) -> Handoffs {
        let (tx, notices) = watch::channel(Vec::new());
        self.registry
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(Arc::clone(&waiter), tx);
        Handoffs {
            notifier: Arc::clone(self),
            waiter,
            notices,
            seen: Vec::new(),
        }
    }

    /// Counts one more waiter of `channel`, subscribing on every master when it is the
    /// first (confirmed in the background). Returns the channel's notices and its
    /// confirmation.
    fn enter(&self, channel: &Arc<str>) -> (watch::Receiver<u64>, watch::Receiver<bool>) {
        let channel = Arc::clone(channel);
        let (notices, ready, first) = {
            let mut channels = self.registry.lock();
            let entry = channels
                .entry(Arc::clone(&channel))
                .or_insert_with(|| Channel {
                    waiters: 0,
                    notices: watch::channel(0).0,
                    ready: watch::channel(false).0,
                });
            entry.waiters += 1;
            (
                entry.notices.subscribe(),
                entry.ready.subscribe(),
                entry.waiters == 1,
            )
        };
        if first {
            let mut acks: FuturesUnordered<_> = self
                .masters
                .iter()
                .filter_map(|slot| {
                    let queue = self.queue(slot)?;
                    let (ack, done) = oneshot::channel();
                    queue
                        .send(Command::Subscribe(Arc::clone(&channel), ack))
                        .ok()
                        .map(|()| done)
                })
                .collect();
            // The confirmations are collected by a task of their own, which marks the channel
            // ready however they end: a first waiter that gives up (or is dropped) meanwhile
            // must not leave later waiters of the channel waiting out the whole timeout.
            let (registry, quorum, limit) = (
                Arc::clone(&self.registry),
                self.quorum,
                self.confirm_timeout,
            );
            let channel = Arc::clone(&channel);
            let confirm = async move {
                let confirmed = async {
                    let mut confirmed = 0;
                    while let Some(ack) = acks.next().await {
                        confirmed += usize::from(ack.is_ok());
                        if confirmed >= quorum {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(limit, confirmed).await;
                if let Some(entry) = registry.lock().get(&channel) {
                    entry.ready.send_replace(true);
                }
            };
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(confirm);
            }
        }
        (notices, ready)
    }

    fn release(&self, channel: &Arc<str>) {
        let last = {
            let mut channels = self.registry.lock();
            match channels.get_mut(channel) {
                Some(entry) if entry.waiters > 1 => {
                    entry.waiters -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(channel);
                    true
                }
                None => false,
            }
        };
        if last {
            for queue in self.masters.iter().filter_map(Self::running) {
                let _ = queue.send(Command::Unsubscribe(Arc::clone(channel)));
            }
        }
    }
}

/// One waiter's interest in a channel; unsubscribes when the last one is dropped.
pub(crate) struct Subscription {
    notifier: Arc<Notifier>,
    channel: Arc<str>,
    notices: watch::Receiver<u64>,
}

impl Subscription {
    /// Resolves at the next notice since the last call (or since subscribing). Never
    /// resolves if notices stopped for good; always race it with a timer.
    pub(crate) async fn notified(&mut self) {
        if self.notices.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.notifier.release(&self.channel);
    }
}

/// One queued waiter's hand-off notices; forgotten by the router when dropped.
pub(crate) struct Handoffs {
    notifier: Arc<Notifier>,
    waiter: Arc<str>,
    notices: watch::Receiver<Vec<u64>>,
    /// Each master's count of notices already taken by [`Handoffs::fresh`].
    seen: Vec<u64>,
}

impl Handoffs {
    /// Resolves at the next hand-off notice for this waiter since the last call or the
    /// last [`Handoffs::fresh`] (or since it was made known). Never resolves without
    /// notices; always race it with a timer. Notices are counted per master, not
    /// flagged: one that arrives while nobody waits for it is not lost.
    pub(crate) async fn notified(&mut self) {
        if self.notices.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The masters (by index) that sent a notice since the last call, which forgets them.
    pub(crate) fn fresh(&mut self) -> Vec<usize> {
        let counts = self.notices.borrow_and_update();
        if self.seen.len() < counts.len() {
            self.seen.resize(counts.len(), 0);
        }
        let fresh = counts
            .iter()
            .zip(&self.seen)
            .enumerate()
            .filter(|(_, (now, seen))| now != seen)
            .map(|(i, _)| i)
            .collect();
        self.seen.clone_from(&counts);
        fresh
    }
}

impl Drop for Handoffs {
    fn drop(&mut self) {
        self.notifier
            .registry
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.waiter);
    }
}

/// Owns one master's pub/sub connection.
struct Driver {
    /// The master's place among the client's masters.
    index: usize,
    name: Arc<str>,
    client: Client,
    registry: Arc<Registry>,
    commands: mpsc::UnboundedReceiver<Command>,
    node_timeout: Duration,
    connect_timeout: Duration,
}

impl Driver {
    async fn run(mut self) {
        let mut backoff = Doubling::RECONNECT;
        // Subscriptions to confirm once connected.
        let mut acks: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            // Connect when some channel has waiters; otherwise wait for a request.
            if self.registry.all().is_empty() && acks.is_empty() {
                match self.commands.recv().await {
                    None => return,
                    Some(Command::Unsubscribe(_)) => continue,
                    Some(Command::Subscribe(_, ack)) => acks.push(ack),
                }
            }
            let Some((mut sink, mut stream)) = self.connect().await else {
                // Unconfirmed waiters go on with their timers.
                acks.clear();
                while self.commands.try_recv().is_ok() {}
                tokio::time::sleep(backoff.pause()).await;
                if self.commands.is_closed() {
                    return;
                }
                continue;
            };
            backoff.reset();
            for channel in self.registry.all() {
                self.send(&mut sink, true, &channel).await;
            }
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
            loop {
                tokio::select! {
                    cmd = self.commands.recv() => match cmd {
                        None => return,
                        Some(Command::Subscribe(channel, ack)) => {
                            if self.send(&mut sink, true, &channel).await {
                                let _ = ack.send(());
                            }
                        }
                        Some(Command::Unsubscribe(channel)) => {
                            if !self.registry.wanted(&channel) {
                                self.send(&mut sink, false, &channel).await;
                            }
                        }
                    },
                    msg = stream.next() => match msg {
                        Some(msg) => self
                            .registry
                            .deliver(self.index, msg.get_channel_name(), msg.get_payload().ok()),
                        None => {
                            tracing::debug!(master = %self.name, "pub/sub connection lost");
                            break;
                        }
                    },
                }
            }
        }
    }

    async fn connect(&self) -> Option<(PubSubSink, PubSubStream)> {
        match tokio::time::timeout(self.connect_timeout, self.client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => Some(pubsub.split()),
            Ok(Err(error)) => {
                tracing::debug!(master = %self.name, %error, "pub/sub connect failed");
                None
            }
            Err(_) => {
                tracing::debug!(master = %self.name, "pub/sub connect timed out");
                None
            }
        }
    }

    /// Sends one (un)subscribe request; whether the master confirmed it in time.
    async fn send(&self, sink: &mut PubSubSink, subscribe: bool, channel: &str) -> bool {
        let request = async {
            if subscribe {
                sink.subscribe(channel).await
            } else {
                sink.unsubscribe(channel).await
            }
        };
        match tokio::time::timeout(self.node_timeout, request).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::debug!(master = %self.name, %error, subscribe, "pub/sub request failed");
                false
            }
            Err(_) => {
                tracing::debug!(master = %self.name, subscribe, "pub/sub request timed out");
                false
            }
        }
    }
}
