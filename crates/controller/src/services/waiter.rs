//! One poller for every load balancer a reconcile waits on to become ACTIVE or to be gone.
//!
//! With 20 Services reconciled at once, a GET per waiter every second or so kept Octavia's API
//! answering polls instead of creates (measured: the creates slowed from 0.7 s to several
//! seconds apart). Here one light list call per round (`fields=id,provisioning_status`)
//! answers every waiter, and a finished load balancer costs one GET for its full state.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use berth_openstack::{Client, load_balancer::LoadBalancer};
use tokio::sync::{Notify, oneshot};
use tracing::debug;

use crate::Error;

type Answer = Result<Option<LoadBalancer>, String>;

/// What a waiter waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Goal {
    Active,
    Gone,
}

type Waiting = HashMap<(String, Goal), Vec<oneshot::Sender<Answer>>>;

/// The shared poller; cheap to clone.
#[derive(Clone)]
pub struct ActiveWaiter {
    waiting: Arc<Mutex<Waiting>>,
    wake: Arc<Notify>,
}

/// How long Octavia usually needs: the first look comes after this.
const FIRST_LOOK: Duration = Duration::from_millis(500);
/// The time between rounds while anything is waited on.
const ROUND: Duration = Duration::from_millis(1000);

impl ActiveWaiter {
    /// Starts the poller (it stops when the last clone is dropped).
    pub fn start(os: Client) -> Self {
        let waiter = Self {
            waiting: Arc::new(Mutex::new(HashMap::new())),
            wake: Arc::new(Notify::new()),
        };
        let weak = Arc::downgrade(&waiter.waiting);
        let wake = waiter.wake.clone();
        tokio::spawn(async move {
            loop {
                let Some(waiting) = weak.upgrade() else { return };
                let idle = lock(&waiting).is_empty();
                drop(waiting);
                if idle {
                    wake.notified().await;
                    tokio::time::sleep(FIRST_LOOK).await;
                }
                let Some(waiting) = weak.upgrade() else { return };
                round(&os, &waiting).await;
                drop(waiting);
                tokio::time::sleep(ROUND.mul_f64(0.9 + fastrand::f64() / 5.0)).await;
            }
        });
        waiter
    }

    async fn wait(&self, id: &str, goal: Goal, timeout: Duration) -> Result<Option<LoadBalancer>, Error> {
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting)
            .entry((id.to_owned(), goal))
            .or_default()
            .push(tx);
        self.wake.notify_one();
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(lb))) => Ok(lb),
            Ok(Ok(Err(reason))) => Err(Error::Invalid(reason)),
            Ok(Err(_)) => Err(Error::Invalid(format!(
                "load balancer {id}: the status poller stopped"
            ))),
            Err(_) => Err(Error::Invalid(format!(
                "load balancer {id} did not become {} within {} s",
                if goal == Goal::Active { "ACTIVE" } else { "deleted" },
                timeout.as_secs()
            ))),
        }
    }

    /// Waits until load balancer `id` is ACTIVE (its full state), or fails on ERROR or after
    /// `timeout`.
    pub async fn wait_active(&self, id: &str, timeout: Duration) -> Result<LoadBalancer, Error> {
        self.wait(id, Goal::Active, timeout)
            .await?
            .ok_or_else(|| Error::Invalid(format!("load balancer {id} is gone")))
    }

    /// Waits until load balancer `id` is gone (or DELETED), or fails after `timeout`.
    pub async fn wait_deleted(&self, id: &str, timeout: Duration) -> Result<(), Error> {
        self.wait(id, Goal::Gone, timeout).await.map(|_| ())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One list call; answers the waiters whose load balancer is done.
async fn round(os: &Client, waiting: &Mutex<Waiting>) {
    // Waiters that gave up (timed out) are dropped, and with them ids nobody waits on.
    lock(waiting).retain(|_, senders| {
        senders.retain(|s| !s.is_closed());
        !senders.is_empty()
    });
    if lock(waiting).is_empty() {
        return;
    }
    let statuses: HashMap<String, String> = match os
        .load_balancer()
        .list(&[
            ("fields", "id".to_owned()),
            ("fields", "provisioning_status".to_owned()),
        ])
        .await
    {
        Ok(s) => s.into_iter().map(|l| (l.id, l.provisioning_status)).collect(),
        Err(e) => {
            // Transient: the next round tries again; each waiter has its own deadline.
            debug!(error = %e, "load balancer status list failed");
            return;
        }
    };
    let keys: Vec<(String, Goal)> = lock(waiting).keys().cloned().collect();
    for (id, goal) in keys {
        let status = statuses.get(&id).map(String::as_str);
        let answer = match (goal, status) {
            (Goal::Gone, None | Some("DELETED")) => Ok(None),
            (Goal::Active, Some("ERROR")) => Err(format!("load balancer {id} went to ERROR")),
            (Goal::Active, None | Some("DELETED")) => Err(format!("load balancer {id} is gone")),
            (Goal::Active, Some("ACTIVE")) => match os.load_balancer().get(&id).await {
                // PENDING again (changed meanwhile): the next round.
                Ok(lb) if lb.provisioning_status != "ACTIVE" => continue,
                Ok(lb) => Ok(Some(lb)),
                // Transient: the next round.
                Err(e) => {
                    debug!(error = %e, lb = %id, "load balancer read failed");
                    continue;
                }
            },
            _ => continue,
        };
        let senders = lock(waiting).remove(&(id, goal)).unwrap_or_default();
        for s in senders {
            let _ = s.send(answer.clone());
        }
    }
}
