//! Garbage collection: what berth made for Services that no longer exist.
//!
//! Everything berth makes carries the cluster tag and the Service's UID tag. A sweep lists the
//! cluster's tagged load balancers, floating IPs and security groups, then the Services (in
//! that order, so an object made for a Service that came after the Service list cannot be
//! mistaken for a leak), and deletes those whose Service UID is not among them. Objects
//! without the cluster tag, without a Service tag, in a `PENDING_*` state, floating IPs
//! marked to be kept, and load balancers (with their floating IP) that live Services still
//! share through `load-balancer-id`, are never touched.

use std::{collections::HashSet, sync::Arc, time::Duration};

use berth_openstack::Client;
use k8s_openapi::api::core::v1::Service;
use kube::{Api, ResourceExt, api::ListParams};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{desired::cluster_tag, octavia::KEEP_TAG};
use crate::{Error, metrics::Metrics};

/// One object the sweep found without its Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// `loadbalancer`, `floatingip` or `securitygroup`.
    pub kind: &'static str,
    /// Its id.
    pub id: String,
    /// Its name or address.
    pub name: String,
    /// The Service UID it was made for.
    pub service_uid: String,
    /// What the sweep did: `deleted`, `would delete`, or why it left it.
    pub action: String,
}

fn service_uid(tags: &[String]) -> Option<String> {
    tags.iter()
        .find_map(|t| t.strip_prefix("berth-service="))
        .map(str::to_owned)
}

/// Sweeps once: deletes (or, with `dry_run`, lists) what berth made for `cluster`'s Services
/// that are gone.
pub async fn sweep(
    os: &Client,
    kube: &kube::Client,
    cluster: &str,
    dry_run: bool,
) -> Result<Vec<Orphan>, Error> {
    let tag = cluster_tag(cluster);
    let lbs = os.load_balancer().list(&[("tags", tag.clone())]).await?;
    let fips = os.network().floating_ips(&[("tags", tag.clone())]).await?;
    let sgs = os.network().security_groups(&[("tags", tag.clone())]).await?;
    // After the OpenStack lists: a Service made since cannot own anything listed above.
    let services: HashSet<String> = Api::<Service>::all(kube.clone())
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(ResourceExt::uid)
        .collect();
    let mut orphans = Vec::new();
    let gone = |tags: &[String]| service_uid(tags).filter(|uid| !services.contains(uid));

    // A load balancer whose owner is gone but that other, live Services share
    // (`load-balancer-id`) stays, and so does the floating IP on its VIP.
    let mut shared = HashSet::new();
    let mut shared_ports = HashSet::new();
    for lb in &lbs {
        if gone(&lb.tags).is_none() {
            continue;
        }
        let listeners = os
            .load_balancer()
            .listeners(&[("loadbalancer_id", lb.id.clone())])
            .await?;
        let live = listeners
            .iter()
            .filter_map(|l| service_uid(&l.tags))
            .any(|uid| services.contains(&uid));
        if live {
            shared.insert(lb.id.clone());
            shared_ports.insert(lb.vip_port_id.clone());
        }
    }

    for f in &fips {
        let Some(uid) = gone(&f.tags) else { continue };
        if f.port_id.as_ref().is_some_and(|p| shared_ports.contains(p)) {
            continue;
        }
        let mut o = Orphan {
            kind: "floatingip",
            id: f.id.clone(),
            name: f.floating_ip_address.clone(),
            service_uid: uid,
            action: String::new(),
        };
        o.action = if f.tags.iter().any(|t| t == KEEP_TAG) {
            "kept (keep-floatingip)".into()
        } else if dry_run {
            "would delete".into()
        } else {
            os.network().delete_floating_ip(&f.id).await?;
            "deleted".into()
        };
        orphans.push(o);
    }
    for lb in &lbs {
        let Some(uid) = gone(&lb.tags) else { continue };
        let mut o = Orphan {
            kind: "loadbalancer",
            id: lb.id.clone(),
            name: lb.name.clone(),
            service_uid: uid,
            action: String::new(),
        };
        o.action = if shared.contains(&lb.id) {
            "kept (shared by a live Service)".into()
        } else if lb.provisioning_status.starts_with("PENDING") {
            format!("left for the next sweep ({})", lb.provisioning_status)
        } else if dry_run {
            "would delete".into()
        } else {
            os.load_balancer().delete(&lb.id, true).await?;
            "deleted".into()
        };
        orphans.push(o);
    }
    for sg in &sgs {
        let Some(uid) = gone(&sg.tags) else { continue };
        let mut o = Orphan {
            kind: "securitygroup",
            id: sg.id.clone(),
            name: sg.name.clone(),
            service_uid: uid,
            action: String::new(),
        };
        o.action = if dry_run {
            "would delete".into()
        } else {
            match super::security_group::delete_group(os, &sg.id).await {
                Ok(()) => "deleted".into(),
                // Still on a port that is going away with its load balancer: next sweep.
                Err(crate::Error::OpenStack(e)) if e.status().is_some_and(|s| s.as_u16() == 409) => {
                    "left for the next sweep (in use)".into()
                }
                Err(e) => return Err(e),
            }
        };
        orphans.push(o);
    }
    Ok(orphans)
}

/// One sweep, logged and counted in the metrics (a failure too: the next one retries).
pub async fn sweep_and_report(os: &Client, kube: &kube::Client, cluster: &str, metrics: &Metrics) {
    match sweep(os, kube, cluster, false).await {
        Ok(orphans) => {
            for o in &orphans {
                info!(kind = o.kind, id = %o.id, name = %o.name, service_uid = %o.service_uid, action = %o.action, "garbage collection");
            }
            let deleted = orphans.iter().filter(|o| o.action == "deleted").count();
            metrics.gc_deleted(deleted);
            metrics.reconcile("gc", "ok");
        }
        Err(e) => {
            warn!(error = %e, "garbage collection sweep failed");
            metrics.reconcile("gc", e.kind());
        }
    }
}

/// Sweeps at start-up and then every `period` (zero: only at start-up).
pub async fn run_periodically(
    os: Client,
    kube: kube::Client,
    cluster: String,
    period: Duration,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        sweep_and_report(&os, &kube, &cluster, &metrics).await;
        if period.is_zero() {
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}
