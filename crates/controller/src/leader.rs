//! Leader election on a `coordination.k8s.io/v1` Lease, as kube-controller-manager does it.
//!
//! A candidate takes the Lease when it is free or expired (`renewTime + leaseDurationSeconds`
//! in the past), then renews it every retry period. Updates carry the Lease's
//! `resourceVersion`, so two candidates cannot both win: the loser gets a 409. A leader that
//! cannot renew within the renew deadline has lost: [`Elector::run`] returns and the process
//! stops reconciling at once (the caller exits, as kube-controller-manager does).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{Api, api::PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

/// Leader election settings (upstream's `--leader-elect-*` flags).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// Who we are: unique per replica (host name plus a random suffix).
    pub identity: String,
    /// How long a Lease stays ours without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often candidates try, and leaders renew.
    pub retry_period: Duration,
}

/// Runs the election.
#[derive(Debug)]
pub struct Elector {
    api: Api<Lease>,
    settings: Settings,
    leading: watch::Sender<bool>,
}

/// Why [`Elector::run`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// We were leader and could not renew in time: stop now.
    Lost,
    /// Shutdown was asked for.
    Shutdown,
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(t)
}

impl Elector {
    /// An elector for `settings`; the receiver says whether we lead.
    pub fn new(client: kube::Client, settings: Settings) -> (Self, watch::Receiver<bool>) {
        let (leading, rx) = watch::channel(false);
        (
            Self {
                api: Api::namespaced(client, &settings.namespace),
                settings,
                leading,
            },
            rx,
        )
    }

    /// Campaigns, then renews, until the lease is lost or `shutdown` fires. On shutdown a
    /// leader gives the Lease up so another replica takes over at once.
    pub async fn run(&self, shutdown: tokio_util::sync::CancellationToken) -> Outcome {
        let mut last_renew: Option<tokio::time::Instant> = None;
        loop {
            let leading = *self.leading.borrow();
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    if !leading {
                        info!(lease = %self.settings.name, identity = %self.settings.identity, "became leader");
                        self.leading.send_replace(true);
                    }
                    last_renew = Some(tokio::time::Instant::now());
                }
                Ok(false) => {
                    if leading {
                        warn!(lease = %self.settings.name, "another replica holds the lease: stopping");
                        self.leading.send_replace(false);
                        return Outcome::Lost;
                    }
                }
                Err(e) => {
                    warn!(lease = %self.settings.name, error = %e, "lease update failed");
                    if leading && last_renew.is_some_and(|t| t.elapsed() >= self.settings.renew_deadline) {
                        warn!(lease = %self.settings.name, "could not renew within the renew deadline: stopping");
                        self.leading.send_replace(false);
                        return Outcome::Lost;
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => {
                    if *self.leading.borrow() {
                        self.release().await;
                        self.leading.send_replace(false);
                    }
                    return Outcome::Shutdown;
                }
                () = tokio::time::sleep(self.settings.retry_period) => {}
            }
        }
    }

    /// One round: `Ok(true)` if we hold the Lease afterwards.
    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let duration_secs = i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(15);
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.settings.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(micro(now)),
                    renew_time: Some(micro(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.settings.identity;
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(secs)) => renewed.0 + SignedDuration::from_secs(i64::from(secs)) < now,
            _ => true,
        };
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.settings.identity.clone());
            spec.acquire_time = Some(micro(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(micro(now));
        spec.lease_duration_seconds = Some(duration_secs);
        // `replace` sends our resourceVersion: if someone else wrote in between, we get a 409.
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (empty holder), so a standby takes over without waiting it out.
    async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.settings.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            match self
                .api
                .replace(&self.settings.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => info!(lease = %self.settings.name, "released the lease"),
                Err(e) => warn!(lease = %self.settings.name, error = %e, "could not release the lease"),
            }
        }
    }
}
