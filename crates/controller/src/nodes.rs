//! The node controller: initialisation and lifecycle of Nodes from their Nova servers.
//!
//! For a Node with the `node.cloudprovider.kubernetes.io/uninitialized` taint it finds the
//! server (by `spec.providerID`, else by exact name: an ambiguous or unknown name is a Warning
//! event, never a guess), writes the addresses, the providerID, the instance-type, zone and
//! region labels (and their legacy names), then removes the taint. Afterwards it keeps the
//! addresses in sync, taints a SHUTOFF server's Node with `node.cloudprovider.kubernetes.io/
//! shutdown` (and removes it when the server runs again), and deletes the Node only when Nova
//! says the server is gone (404 by id). Any other failure is logged, counted and retried.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use berth_config::CloudConfig;
use berth_openstack::compute::Server;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{Controller, controller::Action, watcher},
};
use serde_json::json;
use tracing::{info, instrument, warn};

use crate::{
    Error, addresses,
    events::{Kind as EventType, Publisher},
    inventory::Inventory,
    metrics::Metrics,
    provider_id,
};

/// The taint kubelets with `--cloud-provider=external` register with.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The taint of a Node whose server is shut off.
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// What the node controller needs.
pub struct Context {
    /// Kubernetes.
    pub kube: kube::Client,
    /// OpenStack.
    pub openstack: berth_openstack::Client,
    /// The cloud config.
    pub config: Arc<CloudConfig>,
    /// The shared server and port view.
    pub inventory: Arc<Inventory>,
    /// Publishes Events.
    pub events: Arc<Publisher>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// How often each Node is looked at again.
    pub sync_period: Duration,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("sync_period", &self.sync_period)
            .finish_non_exhaustive()
    }
}

/// Runs the controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: tokio_util::sync::CancellationToken) {
    let nodes = Api::<Node>::all(ctx.kube.clone());
    Controller::new(nodes, watcher::Config::default())
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

fn error_policy(node: Arc<Node>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(node = %node.name_any(), %error, "node reconcile failed; retrying");
    ctx.metrics.reconcile("node", error.kind());
    Action::requeue(Duration::from_secs(10))
}

fn has_taint(node: &Node, key: &str) -> bool {
    taints(node).iter().any(|t| t.key == key)
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// What Nova says about a Node's server.
enum Lookup {
    Found(Box<Server>),
    /// 404 by id: the server is gone for good.
    Gone(String),
    /// Nothing to do (or already reported with an event).
    Skip,
}

#[instrument(skip_all, fields(node = %node.name_any()))]
async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = node.name_any();
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uninitialized = has_taint(&node, UNINITIALIZED_TAINT);
    let provider = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .filter(|p| !p.is_empty());
    if provider.is_none() && !uninitialized {
        // Not a Node this controller set up: leave it alone.
        return Ok(Action::await_change());
    }
    let mut snap = ctx.inventory.snapshot().await?;
    // A Node to initialise whose server the snapshot does not know yet (the server is new):
    // look again, with a list at most a second old, before saying it does not exist.
    if uninitialized && provider.is_none() && !snap.by_name.contains_key(&name) {
        snap = ctx.inventory.snapshot_within(Duration::from_secs(1)).await?;
    }
    let lookup = match &provider {
        Some(pid) => match provider_id::parse(pid, ctx.config.global.region.as_deref()) {
            Err(reason) => {
                ctx.event(&node, EventType::Warning, "InvalidProviderID", reason)
                    .await;
                Lookup::Skip
            }
            Ok(id) => match snap.servers.get(id) {
                Some(s) => Lookup::Found(Box::new(s.clone())),
                // Not in the list: only a 404 on the server itself proves it is gone.
                None => match ctx.openstack.compute().server(id).await {
                    Ok(s) => Lookup::Found(Box::new(s)),
                    Err(e) if e.is_not_found() => Lookup::Gone(id.to_owned()),
                    Err(e) => return Err(e.into()),
                },
            },
        },
        None => match snap.by_name.get(&name).map(Vec::as_slice).unwrap_or_default() {
            [id] => Lookup::Found(Box::new(snap.servers[id].clone())),
            [] => {
                let note = format!(
                    "no server in the project is named exactly {name:?}; the node stays uninitialised (name the Node after its server, or set the kubelet's --provider-id)"
                );
                ctx.event(&node, EventType::Warning, "InstanceNotFound", note)
                    .await;
                Lookup::Skip
            }
            many => {
                let note = format!(
                    "{} servers are named {name:?} ({}): berth will not guess; set the kubelet's --provider-id",
                    many.len(),
                    many.join(", ")
                );
                ctx.event(&node, EventType::Warning, "AmbiguousInstanceName", note)
                    .await;
                Lookup::Skip
            }
        },
    };
    match lookup {
        Lookup::Skip => {}
        Lookup::Gone(id) => {
            info!(server = %id, "the node's server is gone (404): deleting the Node");
            match Api::<Node>::all(ctx.kube.clone())
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => ctx.metrics.node_deleted(),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            ctx.metrics.reconcile("node", "ok");
            return Ok(Action::await_change());
        }
        Lookup::Found(server) => {
            let ports = snap.ports_of(&server.id);
            if uninitialized {
                initialize(&node, &server, ports, &ctx).await?;
            } else {
                sync(&node, &server, ports, &ctx).await?;
            }
        }
    }
    ctx.metrics.reconcile("node", "ok");
    Ok(Action::requeue(ctx.sync_period))
}

/// Kubernetes label values: `[A-Za-z0-9._-]`, at most 63, starting and ending alphanumeric.
pub fn sanitize_label(value: &str) -> String {
    let mapped: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

fn desired_addresses(
    node: &Node,
    server: &Server,
    ports: &[berth_openstack::network::Port],
    config: &CloudConfig,
) -> Vec<serde_json::Value> {
    let mut out = addresses::node_addresses(server, ports, &config.networking);
    // The kubelet's Hostname stays when the cloud has none to offer.
    if !out.iter().any(|a| a.kind == "Hostname")
        && let Some(hostname) = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "Hostname"))
    {
        out.push(addresses::Address {
            kind: "Hostname",
            address: hostname.address.clone(),
        });
    }
    out.iter()
        .map(|a| json!({ "type": a.kind, "address": a.address }))
        .collect()
}

fn current_addresses(node: &Node) -> Vec<serde_json::Value> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| json!({ "type": a.type_, "address": a.address }))
                .collect()
        })
        .unwrap_or_default()
}

async fn patch_addresses(name: &str, addresses: Vec<serde_json::Value>, ctx: &Context) -> Result<(), Error> {
    // A JSON merge patch replaces the list (a strategic one would merge by type).
    let patch = json!({ "status": { "addresses": addresses } });
    Api::<Node>::all(ctx.kube.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn taints_json(taints: &[Taint]) -> serde_json::Value {
    serde_json::to_value(taints).unwrap_or_else(|_| json!([]))
}

async fn initialize(
    node: &Node,
    server: &Server,
    ports: &[berth_openstack::network::Port],
    ctx: &Context,
) -> Result<(), Error> {
    let name = node.name_any();
    patch_addresses(&name, desired_addresses(node, server, ports, &ctx.config), ctx).await?;

    let mut labels = BTreeMap::new();
    let flavor = server.flavor.as_ref().map(|f| sanitize_label(&f.original_name));
    if let Some(flavor) = &flavor {
        labels.insert("node.kubernetes.io/instance-type", flavor.clone());
        labels.insert("beta.kubernetes.io/instance-type", flavor.clone());
    }
    let zone = server
        .availability_zone
        .as_deref()
        .map(sanitize_label)
        .filter(|z| !z.is_empty());
    if let Some(zone) = &zone {
        labels.insert("topology.kubernetes.io/zone", zone.clone());
        labels.insert("failure-domain.beta.kubernetes.io/zone", zone.clone());
    }
    if let Some(region) = ctx.config.global.region.as_deref().map(sanitize_label) {
        labels.insert("topology.kubernetes.io/region", region.clone());
        labels.insert("failure-domain.beta.kubernetes.io/region", region);
    }
    let mut taints: Vec<Taint> = taints(node)
        .into_iter()
        .filter(|t| t.key != UNINITIALIZED_TAINT)
        .collect();
    apply_shutdown_taint(&mut taints, server);
    let mut spec = json!({ "taints": taints_json(&taints) });
    if node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .is_none_or(str::is_empty)
    {
        spec["providerID"] = json!(provider_id::format(&server.id));
    }
    // resourceVersion makes this a compare-and-swap: a concurrent change of the taints is
    // answered with 409 and retried, never overwritten.
    let patch = json!({
        "metadata": { "labels": labels, "resourceVersion": node.resource_version() },
        "spec": spec,
    });
    Api::<Node>::all(ctx.kube.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let note = format!(
        "initialised from server {} ({}): instance type {}, zone {}, region {}",
        server.name,
        server.id,
        flavor.as_deref().unwrap_or("-"),
        zone.as_deref().unwrap_or("-"),
        ctx.config.global.region.as_deref().unwrap_or("-")
    );
    info!(server = %server.id, "{note}");
    ctx.event(node, EventType::Normal, "NodeInitialized", note).await;
    Ok(())
}

fn apply_shutdown_taint(taints: &mut Vec<Taint>, server: &Server) {
    let shut_off = server.status == "SHUTOFF";
    let has = taints.iter().any(|t| t.key == SHUTDOWN_TAINT);
    if shut_off && !has {
        taints.push(Taint {
            key: SHUTDOWN_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
    } else if !shut_off && has {
        taints.retain(|t| t.key != SHUTDOWN_TAINT);
    }
}

async fn sync(
    node: &Node,
    server: &Server,
    ports: &[berth_openstack::network::Port],
    ctx: &Context,
) -> Result<(), Error> {
    let name = node.name_any();
    let desired = desired_addresses(node, server, ports, &ctx.config);
    if desired != current_addresses(node) && !desired.is_empty() {
        info!(addresses = %serde_json::Value::from(desired.clone()), "node addresses changed");
        patch_addresses(&name, desired, ctx).await?;
    }
    let before = taints(node);
    let mut after = before.clone();
    apply_shutdown_taint(&mut after, server);
    if after != before {
        let shut = server.status == "SHUTOFF";
        let patch = json!({
            "metadata": { "resourceVersion": node.resource_version() },
            "spec": { "taints": taints_json(&after) },
        });
        Api::<Node>::all(ctx.kube.clone())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let (reason, note) = if shut {
            (
                "NodeShutdown",
                format!(
                    "server {} ({}) is SHUTOFF: tainted {SHUTDOWN_TAINT}",
                    server.name, server.id
                ),
            )
        } else {
            (
                "NodeStarted",
                format!(
                    "server {} ({}) is {} again: taint {SHUTDOWN_TAINT} removed",
                    server.name, server.id, server.status
                ),
            )
        };
        info!("{note}");
        ctx.event(node, EventType::Normal, reason, note).await;
    }
    Ok(())
}

impl Context {
    async fn event(&self, node: &Node, kind: EventType, reason: &str, note: String) {
        // kubelet and kube-controller-manager put the Node's name in the reference's uid, and
        // `kubectl describe node` looks Events up that way.
        let mut reference = node.object_ref(&());
        reference.uid = Some(node.name_any());
        self.events.publish(&reference, kind, reason, &note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_sanitised_like_upstream() {
        assert_eq!(sanitize_label("zone a"), "zone-a");
        assert_eq!(sanitize_label("nova"), "nova");
        assert_eq!(sanitize_label("-x:y-"), "x-y");
        assert_eq!(sanitize_label(&"z".repeat(80)).len(), 63);
    }

    #[test]
    fn shutdown_taint_follows_the_server() {
        let mut server: Server =
            serde_json::from_value(json!({"id": "s", "name": "n", "status": "SHUTOFF"})).unwrap();
        let mut taints = vec![Taint {
            key: "other".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }];
        apply_shutdown_taint(&mut taints, &server);
        assert_eq!(
            taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["other", SHUTDOWN_TAINT]
        );
        server.status = "ACTIVE".into();
        apply_shutdown_taint(&mut taints, &server);
        assert_eq!(
            taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["other"]
        );
    }
}
