//! The route controller: kubenet-style pod routing on a Neutron router.
//!
//! For each Node with `spec.podCIDR(s)` and an InternalIP of the same family, a route
//! `destination = <pod CIDR>, nexthop = <InternalIP>` on the `[Route] router-id` router, and the
//! pod CIDR in the allowed address pairs of the node's port (when its port security is on, or
//! Neutron drops the pods' traffic as spoofed). Routes and pairs of Nodes that are gone are
//! removed. berth manages only routes and pairs whose destination lies inside `--cluster-cidr`:
//! anything else on the router or the ports is never touched. Route changes are atomic
//! (`extraroute-atomic`) where Neutron has it, otherwise a read-modify-write serialised per
//! router. A Node's `NetworkUnavailable` condition turns False once its route exists.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use berth_openstack::network::{AddressPair, Route};
use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::{Error, inventory::Inventory, metrics::Metrics, provider_id};

/// What the route controller needs.
pub struct Context {
    /// Kubernetes.
    pub kube: kube::Client,
    /// OpenStack.
    pub openstack: berth_openstack::Client,
    /// The router that carries the routes.
    pub router_id: String,
    /// The cluster's pod CIDRs: only routes and pairs inside them are berth's.
    pub cluster_cidrs: Vec<IpNet>,
    /// Whether Neutron has `extraroute-atomic`.
    pub atomic: bool,
    /// The shared server and port view.
    pub inventory: Arc<Inventory>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The region, to read provider IDs.
    pub region: Option<String>,
    /// How often routes are checked even when no Node changed (routes can be edited by
    /// hand); zero: only when Nodes change.
    pub period: Duration,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("router_id", &self.router_id)
            .field("atomic", &self.atomic)
            .finish_non_exhaustive()
    }
}

/// One wanted route, and the Node it is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Wanted {
    destination: String,
    nexthop: String,
    node: String,
}

/// Runs the controller until `shutdown` fires: on every Node change, and every period.
pub async fn run(ctx: Arc<Context>, shutdown: tokio_util::sync::CancellationToken) {
    let (reader, writer) = reflector::store::<Node>();
    let changed = Arc::new(Notify::new());
    let notify = changed.clone();
    let watch = watcher(Api::<Node>::all(ctx.kube.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .touched_objects()
        .for_each(move |_| {
            notify.notify_one();
            async {}
        });
    let watching = tokio::spawn(watch);
    tokio::select! {
        () = shutdown.cancelled() => { watching.abort(); return; }
        r = reader.wait_until_ready() => if r.is_err() { watching.abort(); return; },
    }
    // OpenStack is asked only when what is wanted changes (a Node's pod CIDR, address or
    // existence; not its heartbeats), after a failure, and every resync period as a safety net
    // against hand edits of the router. While nothing changes, no call is made.
    let mut done: Option<BTreeSet<Wanted>> = None;
    let mut retry = Duration::from_secs(1);
    let mut last_full = tokio::time::Instant::now();
    loop {
        let want = wanted(&reader.state(), &ctx);
        let resync = !ctx.period.is_zero() && last_full.elapsed() >= ctx.period;
        if done.as_ref() != Some(&want) || resync {
            match reconcile(&reader.state(), &want, &ctx).await {
                Ok(()) => {
                    ctx.metrics.reconcile("route", "ok");
                    done = Some(want);
                    retry = Duration::from_secs(1);
                    last_full = tokio::time::Instant::now();
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?retry, "route reconcile failed; retrying");
                    ctx.metrics.reconcile("route", e.kind());
                    done = None;
                }
            }
        }
        let wait = if done.is_none() {
            retry = (retry * 2).min(Duration::from_secs(30));
            retry
        } else if ctx.period.is_zero() {
            Duration::from_secs(3600)
        } else {
            ctx.period.saturating_sub(last_full.elapsed())
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = changed.notified() => {
                // Let a burst of Node changes settle into one pass.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
    watching.abort();
}

fn parse_net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>().ok().map(|n| n.trunc())
}

impl Context {
    fn manages(&self, destination: &str) -> bool {
        parse_net(destination).is_some_and(|d| self.cluster_cidrs.iter().any(|c| c.contains(&d)))
    }
}

fn wanted(nodes: &[Arc<Node>], ctx: &Context) -> BTreeSet<Wanted> {
    let mut out = BTreeSet::new();
    for node in nodes.iter().filter(|n| n.metadata.deletion_timestamp.is_none()) {
        let Some(spec) = &node.spec else { continue };
        let mut cidrs: Vec<String> = spec.pod_cidrs.clone().unwrap_or_default();
        if let Some(c) = &spec.pod_cidr
            && !cidrs.contains(c)
        {
            cidrs.push(c.clone());
        }
        let internal: Vec<String> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(|a| {
                a.iter()
                    .filter(|a| a.type_ == "InternalIP")
                    .map(|a| a.address.clone())
                    .collect()
            })
            .unwrap_or_default();
        for cidr in cidrs.iter().filter(|c| ctx.manages(c)) {
            let v6 = cidr.contains(':');
            if let Some(ip) = internal.iter().find(|ip| ip.contains(':') == v6) {
                out.insert(Wanted {
                    destination: cidr.clone(),
                    nexthop: ip.clone(),
                    node: node.name_any(),
                });
            }
        }
    }
    out
}

async fn reconcile(nodes: &[Arc<Node>], wanted: &BTreeSet<Wanted>, ctx: &Context) -> Result<(), Error> {
    let net = ctx.openstack.network();
    let router = net.router(&ctx.router_id).await?;
    let present: BTreeSet<(String, String)> = router
        .routes
        .iter()
        .filter(|r| ctx.manages(&r.destination))
        .map(|r| (r.destination.clone(), r.nexthop.clone()))
        .collect();
    let want: BTreeSet<(String, String)> = wanted
        .iter()
        .map(|w| (w.destination.clone(), w.nexthop.clone()))
        .collect();
    let to_route = |set: &BTreeSet<(String, String)>| -> Vec<Route> {
        set.iter()
            .map(|(d, n)| Route {
                destination: d.clone(),
                nexthop: n.clone(),
            })
            .collect()
    };
    let add = to_route(&want.difference(&present).cloned().collect());
    let remove = to_route(&present.difference(&want).cloned().collect());
    if !add.is_empty() || !remove.is_empty() {
        if ctx.atomic {
            if !add.is_empty() {
                net.add_extraroutes(&ctx.router_id, &add).await?;
            }
            if !remove.is_empty() {
                net.remove_extraroutes(&ctx.router_id, &remove).await?;
            }
        } else {
            net.update_routes_serially(&ctx.router_id, &add, &remove).await?;
        }
        for r in &add {
            info!(destination = %r.destination, nexthop = %r.nexthop, router = %ctx.router_id, "route created");
        }
        for r in &remove {
            info!(destination = %r.destination, nexthop = %r.nexthop, router = %ctx.router_id, "route removed");
        }
    }
    ctx.metrics.set_routes(want.len());

    let routed: Vec<&Arc<Node>> = nodes
        .iter()
        .filter(|n| wanted.iter().any(|w| w.node == n.name_any()))
        .collect();
    for chunk in routed.chunks(8) {
        futures::future::join_all(chunk.iter().map(|n| mark_network_available(n, ctx)))
            .await
            .into_iter()
            .collect::<Result<Vec<()>, Error>>()?;
    }
    sync_address_pairs(nodes, wanted, ctx).await
}

/// Puts each routed pod CIDR on its node's port and takes stale ones (inside the cluster
/// CIDRs, on any port of the project's servers) off.
async fn sync_address_pairs(
    nodes: &[Arc<Node>],
    wanted: &BTreeSet<Wanted>,
    ctx: &Context,
) -> Result<(), Error> {
    // Routes changed because Nodes did: their servers' ports must be current.
    let snap = ctx.inventory.snapshot_within(Duration::from_secs(1)).await?;
    // port id -> pod CIDRs it should carry
    let mut per_port: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for w in wanted {
        let Some(node) = nodes.iter().find(|n| n.name_any() == w.node) else {
            continue;
        };
        let server_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|p| provider_id::parse(p, ctx.region.as_deref()).ok())
            .map(str::to_owned)
            .or_else(|| {
                snap.by_name
                    .get(&w.node)
                    .filter(|ids| ids.len() == 1)
                    .map(|ids| ids[0].clone())
            });
        let Some(server_id) = server_id else { continue };
        if let Some(port) = snap
            .ports_of(&server_id)
            .iter()
            .find(|p| p.fixed_ips.iter().any(|ip| ip.ip_address == w.nexthop))
        {
            per_port
                .entry(port.id.clone())
                .or_default()
                .insert(w.destination.clone());
        }
    }
    let mut updates = Vec::new();
    for port in snap.ports.values().flatten() {
        let keep: Vec<AddressPair> = port
            .allowed_address_pairs
            .iter()
            .filter(|p| !ctx.manages(&p.ip_address))
            .cloned()
            .collect();
        let mut desired = keep;
        if port.port_security_enabled != Some(false)
            && let Some(cidrs) = per_port.get(&port.id)
        {
            desired.extend(cidrs.iter().map(|c| AddressPair {
                ip_address: c.clone(),
                mac_address: None,
            }));
        }
        let now: BTreeSet<&str> = port
            .allowed_address_pairs
            .iter()
            .map(|p| p.ip_address.as_str())
            .collect();
        let then: BTreeSet<&str> = desired.iter().map(|p| p.ip_address.as_str()).collect();
        if now != then {
            updates.push((port.id.clone(), desired));
        }
    }
    // Neutron has no bulk port update: a few at a time, so fifty nodes take a second, not ten.
    let changed = !updates.is_empty();
    let net = ctx.openstack.network();
    let results: Vec<Result<(), Error>> = futures::stream::iter(updates)
        .map(|(port, pairs)| {
            async move {
                net.set_allowed_address_pairs(&port, &pairs).await?;
                info!(%port, pairs = ?pairs.iter().map(|p| p.ip_address.as_str()).collect::<Vec<_>>(), "allowed address pairs updated");
                Ok(())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    if changed {
        ctx.inventory.invalidate().await;
    }
    results.into_iter().collect::<Result<Vec<()>, Error>>()?;
    Ok(())
}

async fn mark_network_available(node: &Node, ctx: &Context) -> Result<(), Error> {
    let already = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
        });
    if already {
        return Ok(());
    }
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let patch = json!({ "status": { "conditions": [{
        "type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
        "message": "berth created a route for the pod CIDR", "lastTransitionTime": now, "lastHeartbeatTime": now
    }] } });
    Api::<Node>::all(ctx.kube.clone())
        .patch_status(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_routes_inside_the_cluster_cidrs_are_managed() {
        let cidrs: [IpNet; 2] = [
            "10.244.0.0/16".parse().unwrap(),
            "fd00:10:244::/56".parse().unwrap(),
        ];
        let manages = |d: &str| parse_net(d).is_some_and(|d| cidrs.iter().any(|c| c.contains(&d)));
        assert!(manages("10.244.3.0/24"));
        assert!(manages("fd00:10:244:1::/64"));
        assert!(!manages("10.245.0.0/24"));
        assert!(!manages("10.0.0.0/8"), "wider than the cluster CIDR");
        assert!(!manages("not-a-cidr"));
    }
}
