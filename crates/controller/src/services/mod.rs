//! The service controller: LoadBalancer Services on Octavia, with floating IPs.
//!
//! - [`desired`]: what a Service asks for (spec, annotations, cloud config, Nodes);
//! - [`octavia`]: making Octavia and Neutron match it with as few calls as possible;
//! - [`gc`]: the sweep that deletes what berth made for Services that no longer exist.
//!
//! Services are reconciled concurrently, each by one task at a time (so one load balancer
//! sees one operation at a time). What berth applied is remembered, so a reconcile that finds
//! nothing changed makes no OpenStack call; Node changes that matter to members (readiness,
//! addresses, labels, schedulability; not heartbeats) are coalesced and re-check every
//! Service once. The finalizer `service.kubernetes.io/load-balancer-cleanup` keeps a Service
//! until its load balancer is gone.

pub mod desired;
pub mod gc;
pub mod octavia;
pub mod security_group;
pub mod waiter;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use berth_config::CloudConfig;
use berth_openstack::load_balancer::LoadBalancer;
use futures::{StreamExt, channel::mpsc};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Node, ObjectReference, Service};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::{
    desired::{Desired, FINALIZER, Features, Inputs, annotation},
    octavia::{ACTIVE_TIMEOUT, Applied, ServiceId},
};
use crate::{
    Error,
    events::{Kind, Publisher},
    metrics::Metrics,
};

/// What the service controller needs.
pub struct Context {
    /// Kubernetes.
    pub kube: kube::Client,
    /// OpenStack.
    pub openstack: berth_openstack::Client,
    /// The cloud config.
    pub config: Arc<CloudConfig>,
    /// The cluster's name (load balancer names and tags).
    pub cluster_name: String,
    /// The `spec.loadBalancerClass` berth serves; Services without a class are served too
    /// when this is unset.
    pub class: Option<String>,
    /// Events.
    pub events: Arc<Publisher>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// How many Services are reconciled at once.
    pub concurrency: u16,
    /// How often the garbage collector sweeps (zero: only at start-up).
    pub gc_period: Duration,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("cluster_name", &self.cluster_name)
            .field("class", &self.class)
            .finish_non_exhaustive()
    }
}

/// Cloud facts read once at start-up.
#[derive(Debug, Clone)]
struct Facts {
    features: Features,
    floating_network: Option<String>,
}

/// What the reconciles share.
struct Shared {
    ctx: Arc<Context>,
    facts: Facts,
    nodes: Store<Node>,
    /// What berth applied, by Service UID, with the desire it matched.
    applied: Mutex<HashMap<String, (Desired, Applied)>>,
    /// The project's load balancers at start-up: a Service berth has not seen yet finds its
    /// load balancer here instead of asking Octavia.
    known: Mutex<Vec<LoadBalancer>>,
    /// Services whose create may have reached Octavia without an answer: ask before making
    /// another.
    uncertain: Mutex<HashSet<String>>,
    /// The load balancer of each Service as soon as it is known, even when the rest of a
    /// reconcile failed: the next attempt reads it again instead of making another.
    lb_ids: Mutex<HashMap<String, String>>,
    /// Consecutive failures by Service UID, for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The VIP subnet found from a Node's port, when none is configured.
    detected_subnet: tokio::sync::Mutex<Option<String>>,
    /// One status poller for every load balancer being waited on.
    waiter: waiter::ActiveWaiter,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn facts(ctx: &Context) -> Result<Facts, Error> {
    let os = &ctx.openstack;
    let version = os.load_balancer().api_version().await?;
    let floating_network = if ctx.config.load_balancer.floating_network_id.is_some() {
        None
    } else {
        let external = os
            .network()
            .networks(&[("router:external", "true".into())])
            .await?;
        (external.len() == 1).then(|| external[0].id.clone())
    };
    Ok(Facts {
        features: Features::of_version(version),
        floating_network,
    })
}

/// Runs the controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) {
    // The cloud's facts and the load balancers that exist: read once, retried until they come.
    let (facts, known) = loop {
        let read = async {
            let f = facts(&ctx).await?;
            let known = ctx.openstack.load_balancer().list(&[]).await?;
            Ok::<_, Error>((f, known))
        };
        match read.await {
            Ok(v) => break v,
            Err(e) => warn!(error = %e, "cannot read Octavia's version and load balancers yet; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    };
    info!(
        octavia_tags = facts.features.tags,
        load_balancers = known.len(),
        "service controller starting"
    );

    let (nodes, writer) = reflector::store::<Node>();
    let (trigger_tx, trigger_rx) = mpsc::unbounded::<String>();
    let node_reader = nodes.clone();
    let node_watch = watcher(Api::<Node>::all(ctx.kube.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .touched_objects()
        .for_each(move |node| {
            if let Ok(node) = node {
                let _ = trigger_tx.unbounded_send(node.name_any());
            }
            async {}
        });
    let node_task = tokio::spawn(node_watch);
    tokio::select! {
        () = shutdown.cancelled() => { node_task.abort(); return; }
        r = nodes.wait_until_ready() => if r.is_err() { node_task.abort(); return; },
    }
    // Node events come with every heartbeat; only changes of what members are made of
    // re-check the Services, and a burst of them (many Nodes joining) makes one re-check.
    let member_changes = coalesce(trigger_rx, node_reader);

    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        facts,
        nodes,
        applied: Mutex::new(HashMap::new()),
        known: Mutex::new(known),
        uncertain: Mutex::new(HashSet::new()),
        lb_ids: Mutex::new(HashMap::new()),
        failures: Mutex::new(HashMap::new()),
        detected_subnet: tokio::sync::Mutex::new(None),
        waiter: waiter::ActiveWaiter::start(ctx.openstack.clone()),
    });

    let gc = tokio::spawn(gc::run_periodically(
        ctx.openstack.clone(),
        ctx.kube.clone(),
        ctx.cluster_name.clone(),
        ctx.gc_period,
        ctx.metrics.clone(),
        shutdown.clone(),
    ));

    let stop = shutdown.clone();
    Controller::new(Api::<Service>::all(ctx.kube.clone()), watcher::Config::default())
        .with_config(
            controller::Config::default()
                .concurrency(ctx.concurrency)
                .debounce(Duration::from_millis(50)),
        )
        .reconcile_all_on(member_changes)
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
    node_task.abort();
    gc.abort();
}

/// Turns Node events (the touched Node's name) into one `()` per change of the member view,
/// after a short pause so a burst becomes one. Each event costs a look at its own Node only:
/// heartbeats of thousands of Nodes stay cheap.
fn coalesce(
    mut events: mpsc::UnboundedReceiver<String>,
    nodes: Store<Node>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    let (tx, rx) = mpsc::unbounded::<()>();
    tokio::spawn(async move {
        let mut views: HashMap<String, desired::MemberView> = nodes
            .state()
            .iter()
            .map(|n| (n.name_any(), desired::member_view(n)))
            .collect();
        // Whether the Node's view changed (a Node gone from the store has none).
        let mut changed = |name: String| -> bool {
            let now = nodes
                .get(&reflector::ObjectRef::new(&name))
                .and_then(|n| desired::member_view(&n));
            let before = if now.is_none() {
                views.remove(&name).flatten()
            } else {
                views.insert(name, now.clone()).flatten()
            };
            before != now
        };
        while let Some(name) = events.next().await {
            if !changed(name) {
                continue;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            // Take what else came in the meantime: one re-check for the burst.
            while let Ok(name) = events.try_recv() {
                changed(name);
            }
            if tx.unbounded_send(()).is_err() {
                return;
            }
        }
    });
    rx
}

fn reference(svc: &Service) -> ObjectReference {
    svc.object_ref(&())
}

fn error_policy(svc: Arc<Service>, error: &Error, shared: Arc<Shared>) -> Action {
    let uid = svc.uid().unwrap_or_default();
    let n = {
        let mut f = lock(&shared.failures);
        let n = f.entry(uid).or_insert(0);
        *n += 1;
        *n
    };
    let base = Duration::from_secs(1 << n.min(8)).min(Duration::from_secs(300));
    let wait = base.mul_f64(0.75 + fastrand::f64() / 2.0);
    warn!(service = %format!("{}/{}", svc.namespace().unwrap_or_default(), svc.name_any()), %error, retry_in = ?wait, "load balancer sync failed");
    Action::requeue(wait)
}

fn has_finalizer(svc: &Service) -> bool {
    svc.finalizers().iter().any(|f| f == FINALIZER)
}

fn ingress_for(desired: &Desired, applied: &Applied) -> Vec<LoadBalancerIngress> {
    let address = applied.address().to_owned();
    if address.is_empty() {
        return Vec::new();
    }
    if let Some(h) = &desired.hostname {
        return vec![LoadBalancerIngress {
            hostname: Some(h.clone()),
            ..LoadBalancerIngress::default()
        }];
    }
    if let Some(suffix) = &desired.hostname_suffix {
        return vec![LoadBalancerIngress {
            hostname: Some(format!("{address}.{suffix}")),
            ..LoadBalancerIngress::default()
        }];
    }
    vec![LoadBalancerIngress {
        ip: Some(address),
        ..LoadBalancerIngress::default()
    }]
}

fn current_ingress(svc: &Service) -> Vec<LoadBalancerIngress> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.clone())
        .unwrap_or_default()
}

fn same_ingress(a: &[LoadBalancerIngress], b: &[LoadBalancerIngress]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.ip == y.ip && x.hostname == y.hostname)
}

fn annotations_match(svc: &Service, applied: &Applied) -> bool {
    let a = svc.annotations();
    a.get(annotation::LOAD_BALANCER_ID) == Some(&applied.id)
        && a.get(annotation::LOAD_BALANCER_ADDRESS).map(String::as_str) == Some(applied.address())
}

async fn reconcile(svc: Arc<Service>, shared: Arc<Shared>) -> Result<Action, Error> {
    let ctx = &shared.ctx;
    let uid = svc.uid().unwrap_or_default();
    let wanted = desired::wants_load_balancer(&svc, ctx.class.as_deref());
    let result = if svc.meta().deletion_timestamp.is_some() || !wanted {
        if has_finalizer(&svc) {
            let started = std::time::Instant::now();
            let r = remove(&svc, &shared, !wanted && svc.meta().deletion_timestamp.is_none()).await;
            ctx.metrics.lb_operation(
                "delete",
                r.as_ref().err().map_or("ok", Error::kind),
                started.elapsed(),
            );
            r
        } else {
            Ok(())
        }
    } else {
        ensure(&svc, &shared).await
    };
    match &result {
        Ok(()) => {
            lock(&shared.failures).remove(&uid);
            ctx.metrics.reconcile("service", "ok");
        }
        Err(e) => {
            ctx.metrics.reconcile("service", e.kind());
            ctx.events
                .publish(
                    &reference(&svc),
                    Kind::Warning,
                    "SyncLoadBalancerFailed",
                    &format!("Error syncing load balancer: {e}"),
                )
                .await;
        }
    }
    result.map(|()| Action::await_change())
}

fn inputs<'a>(shared: &'a Shared) -> Inputs<'a> {
    Inputs {
        config: &shared.ctx.config,
        cluster: &shared.ctx.cluster_name,
        features: shared.facts.features,
        detected_floating_network: shared.facts.floating_network.as_deref(),
    }
}

async fn ensure(svc: &Service, shared: &Shared) -> Result<(), Error> {
    let ctx = &shared.ctx;
    let uid = svc.uid().unwrap_or_default();
    let namespace = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let api = Api::<Service>::namespaced(ctx.kube.clone(), &namespace);
    if !has_finalizer(svc) {
        let patch = json!({ "metadata": { "finalizers": svc.finalizers().iter().cloned().chain([FINALIZER.to_owned()]).collect::<Vec<_>>(), "resourceVersion": svc.resource_version() } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let state = shared.nodes.state();
    let desired = desired::build(svc, state.iter().map(|n| n.as_ref()), &inputs(shared))?;
    let cached = lock(&shared.applied).get(&uid).cloned();
    if let Some((d, a)) = &cached
        && d == &desired
        && same_ingress(&current_ingress(svc), &ingress_for(&desired, a))
        && annotations_match(svc, a)
    {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let id = ServiceId {
        namespace: &namespace,
        name: &name,
        cluster: &ctx.cluster_name,
    };
    let only_members = cached.as_ref().is_some_and(|(d, _)| {
        let mut d = d.clone();
        for (p, w) in d.ports.iter_mut().zip(&desired.ports) {
            p.members = w.members.clone();
        }
        d == desired
    });
    let reference = reference(svc);
    if !only_members {
        ctx.events
            .publish(
                &reference,
                Kind::Normal,
                "EnsuringLoadBalancer",
                "Ensuring load balancer",
            )
            .await;
    }
    let outcome = apply(svc, shared, &desired, cached.map(|(_, a)| a), id).await;
    let operation = if only_members { "update" } else { "ensure" };
    ctx.metrics.lb_operation(
        operation,
        outcome.as_ref().err().map_or("ok", Error::kind),
        started.elapsed(),
    );
    let (applied, notice) = match outcome {
        Ok(v) => v,
        Err(e) => {
            lock(&shared.applied).remove(&uid);
            return Err(e);
        }
    };
    lock(&shared.applied).insert(uid.clone(), (desired.clone(), applied.clone()));
    if let Some(n) = notice {
        ctx.events
            .publish(&reference, Kind::Warning, n.reason, &n.message)
            .await;
    }
    let ingress = ingress_for(&desired, &applied);
    if !same_ingress(&current_ingress(svc), &ingress) {
        let patch = json!({ "status": { "loadBalancer": { "ingress": ingress } } });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    if !annotations_match(svc, &applied) {
        let patch = json!({ "metadata": { "annotations": {
            annotation::LOAD_BALANCER_ID: applied.id,
            annotation::LOAD_BALANCER_ADDRESS: applied.address(),
        } } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    if only_members {
        ctx.events
            .publish(
                &reference,
                Kind::Normal,
                "UpdatedLoadBalancer",
                "Updated load balancer with new hosts",
            )
            .await;
    } else {
        ctx.events
            .publish(
                &reference,
                Kind::Normal,
                "EnsuredLoadBalancer",
                "Ensured load balancer",
            )
            .await;
    }
    Ok(())
}

/// Finds (in the start-up list, else by asking), creates or adopts the load balancer, brings
/// its tree up to date and its floating IP.
async fn apply(
    svc: &Service,
    shared: &Shared,
    desired: &Desired,
    cached: Option<Applied>,
    id: ServiceId<'_>,
) -> Result<(Applied, Option<octavia::Notice>), Error> {
    let os = &shared.ctx.openstack;
    let existing_id = svc.annotations().get(annotation::LOAD_BALANCER_ID).cloned();
    let mut applied = match cached {
        Some(a) => a,
        None => {
            let remembered = lock(&shared.lb_ids).get(&desired.uid).cloned();
            let found = remembered.map(|id| LoadBalancer {
                id,
                name: String::new(),
                description: String::new(),
                vip_address: String::new(),
                vip_port_id: String::new(),
                vip_subnet_id: String::new(),
                vip_network_id: String::new(),
                provisioning_status: String::new(),
                operating_status: String::new(),
                listeners: Vec::new(),
                pools: Vec::new(),
                tags: Vec::new(),
            });
            let found = found.or_else(|| {
                let mut known = lock(&shared.known);
                let pos = known.iter().position(|lb| {
                    Some(&lb.id) == existing_id.as_ref()
                        || octavia::owns(&desired.name, &desired.legacy_name, &desired.uid, lb)
                });
                pos.map(|i| known.swap_remove(i))
            });
            let uncertain = lock(&shared.uncertain).contains(&desired.uid);
            let found = match found {
                Some(lb) => match os.load_balancer().get(&lb.id).await {
                    Ok(lb) if matches!(lb.provisioning_status.as_str(), "DELETED" | "PENDING_DELETE") => None,
                    Ok(lb) => Some(lb),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(e.into()),
                },
                None if uncertain || existing_id.is_some() => {
                    octavia::find(os, &desired.name, &desired.legacy_name, existing_id.as_deref()).await?
                }
                None => None,
            };
            match found {
                Some(lb) => {
                    lock(&shared.lb_ids).insert(desired.uid.clone(), lb.id.clone());
                    let owned = octavia::owns(&desired.name, &desired.legacy_name, &desired.uid, &lb);
                    info!(service = %desired.service, lb = %lb.id, name = %lb.name, owned, "adopting an existing load balancer");
                    if lb.provisioning_status.starts_with("PENDING") {
                        shared.waiter.wait_active(&lb.id, ACTIVE_TIMEOUT).await?;
                    }
                    octavia::read(os, &lb, owned, desired).await?
                }
                None => {
                    let subnet = if desired.detect_subnet {
                        Some(detect_subnet(shared, desired).await?)
                    } else {
                        None
                    };
                    lock(&shared.uncertain).insert(desired.uid.clone());
                    let created = octavia::create(os, desired, subnet).await?;
                    lock(&shared.lb_ids).insert(desired.uid.clone(), created.id.clone());
                    lock(&shared.uncertain).remove(&desired.uid);
                    let lb = shared.waiter.wait_active(&created.id, ACTIVE_TIMEOUT).await?;
                    let mut created = created;
                    created.vip_address = lb.vip_address;
                    created.vip_port_id = lb.vip_port_id;
                    created
                }
            }
        }
    };
    octavia::update(os, desired, &mut applied).await?;
    let notice = octavia::ensure_floating_ip(os, desired, id, &mut applied).await?;
    if shared.ctx.config.load_balancer.manage_security_groups && applied.owned {
        security_group::ensure(os, desired, &mut applied).await?;
    }
    Ok((applied, notice))
}

/// The subnet of the first member's port, when no VIP subnet or network is configured.
async fn detect_subnet(shared: &Shared, desired: &Desired) -> Result<String, Error> {
    let mut cached = shared.detected_subnet.lock().await;
    if let Some(s) = cached.as_ref() {
        return Ok(s.clone());
    }
    let address = desired
        .ports
        .iter()
        .flat_map(|p| p.members.iter())
        .map(|m| m.address.clone())
        .next()
        .ok_or_else(|| {
            Error::Invalid(
                "no [LoadBalancer] subnet-id or network-id is set, and no Node is ready to find the subnet from".into(),
            )
        })?;
    let ports = shared
        .ctx
        .openstack
        .network()
        .ports(&[("fixed_ips", format!("ip_address={address}"))])
        .await?;
    let subnet = ports
        .iter()
        .flat_map(|p| p.fixed_ips.iter())
        .find(|f| f.ip_address == address)
        .map(|f| f.subnet_id.clone())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "no [LoadBalancer] subnet-id is set and no port has the Node address {address}"
            ))
        })?;
    *cached = Some(subnet.clone());
    Ok(subnet)
}

/// Deletes the Service's load balancer and floating IP, then lets the Service go (or, when
/// it merely stopped being a LoadBalancer, clears its status).
async fn remove(svc: &Service, shared: &Shared, type_changed: bool) -> Result<(), Error> {
    let ctx = &shared.ctx;
    let uid = svc.uid().unwrap_or_default();
    let namespace = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let reference = reference(svc);
    let cached = lock(&shared.applied).get(&uid).cloned();
    let lb_name = desired::lb_name(&ctx.cluster_name, &namespace, &name);
    let legacy = desired::legacy_lb_name(&uid);
    let keep = svc
        .annotations()
        .get(annotation::KEEP_FLOATING_IP)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let existing_id = svc.annotations().get(annotation::LOAD_BALANCER_ID).cloned();
    let applied = match cached {
        Some((_, a)) => Some(a),
        None => {
            match octavia::find(&ctx.openstack, &lb_name, &legacy, existing_id.as_deref()).await? {
                None => None,
                Some(lb) => {
                    let owned = octavia::owns(&lb_name, &legacy, &uid, &lb);
                    // Only the listeners matter for a shared one; `read` needs a desire to
                    // compare with, and any will do for ids.
                    let stub = Desired {
                        service: format!("{namespace}/{name}"),
                        uid: uid.clone(),
                        name: lb_name.clone(),
                        legacy_name: legacy.clone(),
                        description: String::new(),
                        tags: Vec::new(),
                        vip: desired::Vip::default(),
                        member_subnet_id: None,
                        flavor_id: None,
                        availability_zone: None,
                        provider: None,
                        ports: Vec::new(),
                        floating: None,
                        keep_floating_ip: keep,
                        hostname: None,
                        hostname_suffix: None,
                        detect_subnet: false,
                        serial_api_calls: false,
                        max_shared_lb: None,
                    };
                    Some(octavia::read(&ctx.openstack, &lb, owned, &stub).await?)
                }
            }
        }
    };
    let mut last_sharer_of = None;
    if let Some(applied) = &applied {
        ctx.events
            .publish(
                &reference,
                Kind::Normal,
                "DeletingLoadBalancer",
                "Deleting load balancer",
            )
            .await;
        let id = ServiceId {
            namespace: &namespace,
            name: &name,
            cluster: &ctx.cluster_name,
        };
        let options = octavia::DeleteOptions {
            keep_floating_ip: keep,
            requested_ip: svc
                .spec
                .as_ref()
                .and_then(|s| s.load_balancer_ip.as_deref())
                .filter(|ip| !ip.is_empty()),
            cascade: ctx.config.load_balancer.cascade_delete,
            security_groups: ctx.config.load_balancer.manage_security_groups,
        };
        let left = octavia::delete(&ctx.openstack, &shared.waiter, applied, &uid, id, options).await?;
        if left == octavia::Deleted::LastSharer {
            last_sharer_of = Some(applied.id.clone());
        }
        ctx.events
            .publish(
                &reference,
                Kind::Normal,
                "DeletedLoadBalancer",
                "Deleted load balancer",
            )
            .await;
    }
    lock(&shared.applied).remove(&uid);
    lock(&shared.lb_ids).remove(&uid);
    let api = Api::<Service>::namespaced(ctx.kube.clone(), &namespace);
    if type_changed {
        let patch = json!({ "status": { "loadBalancer": { "ingress": null } } });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let rest: Vec<String> = svc
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    let mut patch = json!({ "metadata": { "finalizers": rest, "resourceVersion": svc.resource_version() } });
    if type_changed && applied.as_ref().is_some_and(|a| a.owned) {
        // Stale ids would tie a later LoadBalancer incarnation to a deleted load balancer.
        patch["metadata"]["annotations"] = json!({
            annotation::LOAD_BALANCER_ID: null,
            annotation::LOAD_BALANCER_ADDRESS: null,
        });
    }
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(lb_id) = last_sharer_of {
        sweep_after_last_sharer(shared, &lb_id).await;
    }
    Ok(())
}

/// The last Service on a load balancer kept for it after its owner was deleted has left: the
/// sweep takes the load balancer (and its floating IP) now, not at its next period.
/// ([`octavia::delete`] saw it ACTIVE again: the sweep leaves `PENDING_*` ones alone.)
async fn sweep_after_last_sharer(shared: &Shared, lb_id: &str) {
    let ctx = &shared.ctx;
    info!(lb = %lb_id, "the last sharer left: sweeping");
    gc::sweep_and_report(&ctx.openstack, &ctx.kube, &ctx.cluster_name, &ctx.metrics).await;
}
