//! Making Octavia and Neutron match a [`Desired`], with as few calls as the change needs.
//!
//! A new Service's load balancer is made in one fully populated call and its floating IP in
//! one more. What berth applied is kept ([`Applied`]), so later changes are a diff against
//! it: a Node joining costs one batch member update per pool, and nothing changing costs
//! nothing. A load balancer berth does not know yet (after a restart, or one made by
//! kube-controller-manager's in-tree provider) is read once and adopted in place.
//!
//! Ownership: berth deletes a load balancer only if it is this Service's by name (upstream's
//! or the in-tree provider's) or by berth's Service tag, and a floating IP only if berth (or
//! upstream, by its description) allocated it for this Service.

use std::{collections::BTreeSet, time::Duration};

use berth_openstack::{
    Client,
    load_balancer::{
        HealthMonitor, Listener, LoadBalancer, LoadBalancerTree, Member, NewHealthMonitor, NewListener,
        NewLoadBalancer, NewMember, NewPool, Pool,
    },
    network::FloatingIp,
};
use serde_json::{Value, json};
use tracing::{debug, info};

use super::desired::{
    Desired, ListenerSpec, MemberSpec, MonitorSpec, PoolSpec, PortSpec, floating_ip_description, service_tag,
};
use crate::Error;

/// How long a load balancer may take to become ACTIVE (upstream allows about 5 minutes).
pub const ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a delete may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(300);

/// A listener berth knows, with its pool and monitor ids and their settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedPort {
    /// The listener.
    pub listener_id: String,
    /// Its default pool.
    pub pool_id: Option<String>,
    /// The pool's monitor.
    pub monitor_id: Option<String>,
    /// The settings as they are in Octavia.
    pub spec: PortSpec,
}

/// A floating IP berth knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedFloatingIp {
    /// Its id.
    pub id: String,
    /// Its address.
    pub address: String,
    /// berth (or upstream) allocated it for this Service.
    pub ours: bool,
}

/// A load balancer as berth last left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The load balancer.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether it is this Service's (berth may delete it whole, attach floating IPs).
    pub owned: bool,
    /// The VIP address.
    pub vip_address: String,
    /// The VIP port.
    pub vip_port_id: String,
    /// The VIP's subnet.
    pub vip_subnet_id: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// The Service's listeners on it.
    pub ports: Vec<AppliedPort>,
    /// The floating IP on the VIP.
    pub floating_ip: Option<AppliedFloatingIp>,
    /// Whether the floating IP was looked for (a load balancer made by others may have one).
    pub floating_ip_known: bool,
    /// The security group on the members' ports (`manage-security-groups`), once ensured.
    pub security_group: Option<super::security_group::AppliedGroup>,
}

impl Applied {
    /// The address clients use: the floating IP, else the VIP.
    pub fn address(&self) -> &str {
        self.floating_ip
            .as_ref()
            .map_or(self.vip_address.as_str(), |f| f.address.as_str())
    }
}

/// What to tell the Service about a change that could not be made as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The event reason.
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

fn is_gone(lb: &LoadBalancer) -> bool {
    matches!(lb.provisioning_status.as_str(), "DELETED" | "PENDING_DELETE")
}

/// Whether `lb` is this Service's own load balancer.
pub fn owns(desired_name: &str, legacy_name: &str, uid: &str, lb: &LoadBalancer) -> bool {
    lb.name == desired_name || lb.name == legacy_name || lb.tags.contains(&service_tag(uid))
}

/// Finds the Service's load balancer: by `existing_id`, else by upstream's name, else by the
/// in-tree provider's. Two live ones of one name are an error (a human must choose).
pub async fn find(
    os: &Client,
    name: &str,
    legacy_name: &str,
    existing_id: Option<&str>,
) -> Result<Option<LoadBalancer>, Error> {
    if let Some(id) = existing_id {
        match os.load_balancer().get(id).await {
            Ok(lb) if !is_gone(&lb) => return Ok(Some(lb)),
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    for n in [name, legacy_name] {
        let found: Vec<LoadBalancer> = os
            .load_balancer()
            .list(&[("name", n.to_owned())])
            .await?
            .into_iter()
            .filter(|lb| !is_gone(lb))
            .collect();
        match found.len() {
            0 => {}
            1 => return Ok(found.into_iter().next()),
            _ => {
                let ids: Vec<&str> = found.iter().map(|l| l.id.as_str()).collect();
                return Err(Error::Invalid(format!(
                    "{} load balancers are named {n:?} ({}): delete the extra ones by hand",
                    found.len(),
                    ids.join(", ")
                )));
            }
        }
    }
    Ok(None)
}

fn timeouts_of(l: &Listener) -> Option<[u32; 4]> {
    Some([
        l.timeout_client_data?,
        l.timeout_member_connect?,
        l.timeout_member_data?,
        l.timeout_tcp_inspect?,
    ])
}

fn xff_of(l: &Listener) -> bool {
    l.insert_headers
        .as_ref()
        .and_then(|h| h.get("X-Forwarded-For"))
        .and_then(Value::as_str)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn observed_port(
    l: &Listener,
    pool: Option<&Pool>,
    members: &[Member],
    monitor: Option<&HealthMonitor>,
    want: Option<&PortSpec>,
) -> AppliedPort {
    let mut allowed = l.allowed_cidrs.clone().unwrap_or_default();
    allowed.sort();
    if allowed == ["0.0.0.0/0"] {
        allowed.clear();
    }
    // Timeouts on UDP listeners are not berth's to manage; compare them as berth wants them.
    let timeouts = match want {
        Some(w) if w.listener.timeouts.is_none() => None,
        _ => timeouts_of(l),
    };
    AppliedPort {
        listener_id: l.id.clone(),
        pool_id: pool.map(|p| p.id.clone()),
        monitor_id: monitor.map(|m| m.id.clone()),
        spec: PortSpec {
            listener: ListenerSpec {
                protocol: l.protocol.clone(),
                port: l.protocol_port,
                connection_limit: l.connection_limit,
                allowed_cidrs: allowed,
                timeouts,
                x_forwarded_for: xff_of(l),
            },
            pool: PoolSpec {
                protocol: pool.map(|p| p.protocol.clone()).unwrap_or_default(),
                lb_algorithm: pool.map(|p| p.lb_algorithm.clone()).unwrap_or_default(),
                persistence: pool
                    .and_then(|p| p.session_persistence.as_ref())
                    .and_then(|s| s.get("type"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            members: members
                .iter()
                .map(|m| MemberSpec {
                    address: m.address.clone(),
                    port: m.protocol_port,
                    monitor_port: m.monitor_port,
                    name: m.name.clone(),
                })
                .collect(),
            monitor: monitor.map(|m| MonitorSpec {
                kind: m.kind.clone(),
                delay: m.delay,
                timeout: m.timeout,
                max_retries: m.max_retries,
                max_retries_down: m.max_retries_down,
                url_path: m.url_path.clone().filter(|_| m.kind.starts_with("HTTP")),
            }),
        },
    }
}

fn applied_from(lb: &LoadBalancer, owned: bool, ports: Vec<AppliedPort>) -> Applied {
    Applied {
        id: lb.id.clone(),
        name: lb.name.clone(),
        owned,
        vip_address: lb.vip_address.clone(),
        vip_port_id: lb.vip_port_id.clone(),
        vip_subnet_id: lb.vip_subnet_id.clone(),
        tags: lb.tags.clone(),
        ports,
        floating_ip: None,
        floating_ip_known: false,
        security_group: None,
    }
}

const SERVICE_TAG_PREFIX: &str = "berth-service=";

/// The UIDs of the Services other than `uid` that use `lb`: its owner (by its tag) and those
/// whose listeners are on it.
pub fn sharers(lb_tags: &[String], listeners: &[Listener], uid: &str) -> BTreeSet<String> {
    lb_tags
        .iter()
        .chain(listeners.iter().flat_map(|l| l.tags.iter()))
        .filter_map(|t| t.strip_prefix(SERVICE_TAG_PREFIX))
        .filter(|u| *u != uid)
        .map(str::to_owned)
        .collect()
}

/// Reads a load balancer's listeners (the Service's own: on a shared one, those tagged for
/// it; on its own, all but other Services' tagged ones) with their pools, members and
/// monitors. A Service that would join a load balancer already shared by `max-shared-lb`
/// Services is refused.
pub async fn read(os: &Client, lb: &LoadBalancer, owned: bool, desired: &Desired) -> Result<Applied, Error> {
    let octavia = os.load_balancer();
    let by_lb = [("loadbalancer_id", lb.id.clone())];
    let listeners = octavia.listeners(&by_lb).await?;
    let pools = octavia.pools(&by_lb).await?;
    let tag = service_tag(&desired.uid);
    // Other Services' listeners on it (`load-balancer-id`): never this Service's to change.
    let others = sharers(&lb.tags, &listeners, &desired.uid);
    let mine = |l: &Listener| {
        l.tags.contains(&tag) || (owned && !l.tags.iter().any(|t| t.starts_with(SERVICE_TAG_PREFIX)))
    };
    if !owned
        && let Some(max) = desired.max_shared_lb
        && !listeners.iter().any(|l| l.tags.contains(&tag))
        && others.len() + 1 > max
    {
        return Err(Error::Invalid(format!(
            "load balancer {} is shared by {} Services already, the most [LoadBalancer] max-shared-lb ({max}) allows",
            lb.id,
            others.len()
        )));
    }
    let mut ports = Vec::new();
    for l in listeners {
        if !mine(&l) {
            continue;
        }
        let pool = l
            .default_pool_id
            .as_ref()
            .and_then(|id| pools.iter().find(|p| &p.id == id));
        let members = match pool {
            Some(p) => octavia.members(&p.id).await?,
            None => Vec::new(),
        };
        let monitor = match pool.and_then(|p| p.healthmonitor_id.as_deref()) {
            Some(id) => Some(octavia.health_monitor(id).await?),
            None => None,
        };
        let want = desired
            .ports
            .iter()
            .find(|w| w.listener.port == l.protocol_port && w.listener.protocol == l.protocol);
        ports.push(observed_port(&l, pool, &members, monitor.as_ref(), want));
    }
    Ok(applied_from(lb, owned, ports))
}

/// The subnet the members are said to be on: none when it is the VIP's. Octavia takes a
/// member without one to be on the VIP subnet, and each member subnet it is told costs it
/// Neutron calls: five per member in a create, one per member in every worker flow.
pub(crate) fn member_subnet(desired: &Desired, vip_subnet_id: &str) -> Option<String> {
    desired
        .member_subnet_id
        .clone()
        .filter(|s| s.as_str() != vip_subnet_id)
}

fn new_members(desired: &Desired, port: &PortSpec, vip_subnet_id: &str) -> Vec<NewMember> {
    let subnet_id = member_subnet(desired, vip_subnet_id);
    port.members
        .iter()
        .map(|m| NewMember {
            name: m.name.clone(),
            address: m.address.clone(),
            protocol_port: m.port,
            subnet_id: subnet_id.clone(),
            monitor_port: m.monitor_port,
        })
        .collect()
}

fn new_monitor(name: &str, m: &MonitorSpec) -> NewHealthMonitor {
    NewHealthMonitor {
        name: name.into(),
        kind: m.kind.clone(),
        delay: m.delay,
        timeout: m.timeout,
        max_retries: m.max_retries,
        max_retries_down: Some(m.max_retries_down),
        url_path: m.url_path.clone(),
        pool_id: None,
    }
}

fn persistence(p: &PoolSpec) -> Option<Value> {
    p.persistence.as_ref().map(|t| json!({ "type": t }))
}

fn new_pool(
    desired: &Desired,
    index: usize,
    port: &PortSpec,
    tags: &[String],
    vip_subnet_id: &str,
) -> NewPool {
    NewPool {
        name: format!("pool_{index}_{}", desired.name),
        protocol: port.pool.protocol.clone(),
        lb_algorithm: port.pool.lb_algorithm.clone(),
        listener_id: None,
        session_persistence: persistence(&port.pool),
        tags: tags.to_vec(),
        // Serially, members and monitor come in steps of their own.
        members: if desired.serial_api_calls {
            Vec::new()
        } else {
            new_members(desired, port, vip_subnet_id)
        },
        healthmonitor: port
            .monitor
            .as_ref()
            .filter(|_| !desired.serial_api_calls)
            .map(|m| new_monitor(&format!("monitor_{index}_{}", desired.name), m)),
    }
}

fn new_listener(
    desired: &Desired,
    index: usize,
    port: &PortSpec,
    tags: &[String],
    vip_subnet_id: &str,
) -> NewListener {
    let l = &port.listener;
    NewListener {
        name: format!("listener_{index}_{}", desired.name),
        protocol: l.protocol.clone(),
        protocol_port: l.port,
        loadbalancer_id: None,
        connection_limit: Some(l.connection_limit),
        allowed_cidrs: l.allowed_cidrs.clone(),
        timeout_client_data: l.timeouts.map(|t| t[0]),
        timeout_member_connect: l.timeouts.map(|t| t[1]),
        timeout_member_data: l.timeouts.map(|t| t[2]),
        timeout_tcp_inspect: l.timeouts.map(|t| t[3]),
        insert_headers: l.x_forwarded_for.then(|| json!({ "X-Forwarded-For": "true" })),
        tags: tags.to_vec(),
        default_pool: (!desired.serial_api_calls)
            .then(|| new_pool(desired, index, port, tags, vip_subnet_id)),
    }
}

fn listener_fields(l: &ListenerSpec) -> Value {
    let mut v = json!({
        "connection_limit": l.connection_limit,
        "allowed_cidrs": if l.allowed_cidrs.is_empty() { Value::Null } else { json!(l.allowed_cidrs) },
    });
    if let Some(t) = l.timeouts {
        v["timeout_client_data"] = json!(t[0]);
        v["timeout_member_connect"] = json!(t[1]);
        v["timeout_member_data"] = json!(t[2]);
        v["timeout_tcp_inspect"] = json!(t[3]);
    }
    v
}

/// Creates the whole load balancer in one call; the answer carries every id.
pub async fn create(os: &Client, desired: &Desired, vip_subnet: Option<String>) -> Result<Applied, Error> {
    let vip_subnet_id = vip_subnet
        .or_else(|| desired.vip.subnet_id.clone())
        .unwrap_or_default();
    let lb = NewLoadBalancer {
        name: desired.name.clone(),
        description: desired.description.clone(),
        vip_subnet_id: vip_subnet_id.clone(),
        vip_network_id: desired.vip.network_id.clone(),
        vip_port_id: desired.vip.port_id.clone(),
        vip_address: desired.vip.address.clone(),
        flavor_id: desired.flavor_id.clone(),
        availability_zone: desired.availability_zone.clone(),
        provider: desired.provider.clone(),
        tags: desired.tags.clone(),
        // Serially: a bare load balancer; `update` then adds the rest one call at a time.
        listeners: if desired.serial_api_calls {
            Vec::new()
        } else {
            desired
                .ports
                .iter()
                .enumerate()
                .map(|(i, p)| new_listener(desired, i, p, &desired.tags, &vip_subnet_id))
                .collect()
        },
    };
    let tree: LoadBalancerTree = os.load_balancer().create_tree(&lb).await?;
    info!(service = %desired.service, lb = %tree.loadbalancer.id, "load balancer created");
    let ports = tree
        .listeners
        .iter()
        .map(|l| {
            let pool = tree
                .pools
                .iter()
                .find(|p| l.default_pool_id.as_deref() == Some(p.pool.id.as_str()));
            let want = desired
                .ports
                .iter()
                .find(|w| w.listener.port == l.protocol_port && w.listener.protocol == l.protocol);
            observed_port(
                l,
                pool.map(|p| &p.pool),
                pool.map_or(&[][..], |p| &p.members),
                pool.and_then(|p| p.healthmonitor.as_ref()),
                want,
            )
        })
        .collect();
    let mut applied = applied_from(&tree.loadbalancer, true, ports);
    // A new VIP port has no floating IP yet.
    applied.floating_ip_known = true;
    Ok(applied)
}

/// Waits for ACTIVE: a first look after the time Octavia usually needs, then a capped,
/// jittered backoff, so many load balancers do not poll in step.
pub async fn wait_active(os: &Client, id: &str) -> Result<LoadBalancer, Error> {
    tokio::time::sleep(Duration::from_millis(400 + fastrand::u64(0..200))).await;
    Ok(os.load_balancer().wait_active(id, ACTIVE_TIMEOUT).await?)
}

/// One change to make on a load balancer (each makes it PENDING_UPDATE for a moment).
#[derive(Debug)]
enum Step {
    AddListener(usize),
    RemoveListener(Box<AppliedPort>),
    UpdateListener(usize, String),
    ReplacePool(usize, String),
    AddPool(usize, String),
    UpdatePool(usize, String),
    Members(usize, String),
    AddMonitor(usize, String),
    RemoveMonitor(String),
    UpdateMonitor(usize, String),
    Tags,
}

fn plan(desired: &Desired, applied: &Applied) -> Vec<Step> {
    let mut steps = Vec::new();
    if applied.owned && !desired.tags.is_empty() {
        let have: BTreeSet<&String> = applied.tags.iter().collect();
        if desired.tags.iter().any(|t| !have.contains(t)) {
            steps.push(Step::Tags);
        }
    }
    let mut matched = BTreeSet::new();
    for (i, want) in desired.ports.iter().enumerate() {
        let have = applied.ports.iter().find(|p| {
            p.spec.listener.port == want.listener.port && p.spec.listener.protocol == want.listener.protocol
        });
        let Some(have) = have else {
            steps.push(Step::AddListener(i));
            continue;
        };
        matched.insert(have.listener_id.clone());
        let (hl, wl) = (&have.spec.listener, &want.listener);
        if hl.connection_limit != wl.connection_limit
            || hl.allowed_cidrs != wl.allowed_cidrs
            || (wl.timeouts.is_some() && hl.timeouts != wl.timeouts)
        {
            steps.push(Step::UpdateListener(i, have.listener_id.clone()));
        }
        let Some(pool_id) = have.pool_id.clone() else {
            steps.push(Step::AddPool(i, have.listener_id.clone()));
            continue;
        };
        if have.spec.pool.protocol != want.pool.protocol {
            steps.push(Step::ReplacePool(i, pool_id));
            continue;
        }
        if have.spec.pool.lb_algorithm != want.pool.lb_algorithm
            || have.spec.pool.persistence != want.pool.persistence
        {
            steps.push(Step::UpdatePool(i, pool_id.clone()));
        }
        let key = |m: &MemberSpec| (m.address.clone(), m.port, m.monitor_port);
        let have_members: BTreeSet<_> = have.spec.members.iter().map(key).collect();
        let want_members: BTreeSet<_> = want.members.iter().map(key).collect();
        if have_members != want_members {
            steps.push(Step::Members(i, pool_id.clone()));
        }
        match (&have.spec.monitor, &want.monitor, &have.monitor_id) {
            (None, Some(_), _) | (Some(_), Some(_), None) => steps.push(Step::AddMonitor(i, pool_id)),
            (Some(_), None, Some(id)) => steps.push(Step::RemoveMonitor(id.clone())),
            (Some(h), Some(w), Some(id)) if h.kind != w.kind || h.url_path != w.url_path => {
                steps.push(Step::RemoveMonitor(id.clone()));
                steps.push(Step::AddMonitor(i, pool_id));
            }
            (Some(h), Some(w), Some(id)) if h != w => steps.push(Step::UpdateMonitor(i, id.clone())),
            _ => {}
        }
    }
    for p in &applied.ports {
        if !matched.contains(&p.listener_id) {
            steps.push(Step::RemoveListener(Box::new(p.clone())));
        }
    }
    steps
}

/// Makes the load balancer's listeners, pools, members and monitors match `desired`, one
/// step at a time (Octavia takes one change at a time per load balancer), waiting for ACTIVE
/// between steps but not after the last.
pub async fn update(os: &Client, desired: &Desired, applied: &mut Applied) -> Result<usize, Error> {
    let mut count = 0;
    // A new listener comes bare, then its pool (with members and monitor, or serially those
    // in a third round): a round each.
    let rounds = if desired.serial_api_calls { 3 } else { 2 };
    for round in 0..rounds {
        let steps = plan(desired, applied);
        if steps.is_empty() {
            break;
        }
        if round > 0 {
            wait_active(os, &applied.id).await?;
        }
        count += apply(os, desired, applied, steps).await?;
    }
    Ok(count)
}

async fn apply(
    os: &Client,
    desired: &Desired,
    applied: &mut Applied,
    steps: Vec<Step>,
) -> Result<usize, Error> {
    let octavia = os.load_balancer();
    // No look first: a load balancer still PENDING answers 409, which the client waits out,
    // so a joining Node costs one call per pool.
    let tags: Vec<String> = if applied.owned {
        desired.tags.clone()
    } else {
        vec![service_tag(&desired.uid)]
    };
    let count = steps.len();
    for (n, step) in steps.into_iter().enumerate() {
        if n > 0 {
            wait_active(os, &applied.id).await?;
        }
        debug!(service = %desired.service, ?step, "load balancer step");
        match step {
            Step::Tags => {
                let mut all: Vec<String> = applied.tags.clone();
                for t in &desired.tags {
                    if !all.contains(t) {
                        all.push(t.clone());
                    }
                }
                let lb = octavia.update(&applied.id, json!({ "tags": all })).await?;
                applied.tags = lb.tags;
            }
            Step::AddListener(i) => {
                // Bare: Octavia (2.x up to at least Zed) answers 500 to a listener create with a
                // nested default pool; the pool is the next round's, with its members.
                let mut l = new_listener(desired, i, &desired.ports[i], &tags, &applied.vip_subnet_id);
                l.loadbalancer_id = Some(applied.id.clone());
                l.default_pool = None;
                let made = octavia.create_listener(&l).await?;
                applied.ports.push(AppliedPort {
                    listener_id: made.id.clone(),
                    pool_id: None,
                    monitor_id: None,
                    spec: made_spec(desired, i),
                });
            }
            Step::RemoveListener(p) => {
                if let Some(pool) = &p.pool_id {
                    octavia.delete_pool(pool).await?;
                    wait_active(os, &applied.id).await?;
                }
                octavia.delete_listener(&p.listener_id).await?;
                applied.ports.retain(|x| x.listener_id != p.listener_id);
            }
            Step::UpdateListener(i, id) => {
                octavia
                    .update_listener(&id, listener_fields(&desired.ports[i].listener))
                    .await?;
                set_port(applied, &id, |p| {
                    p.spec.listener = desired.ports[i].listener.clone()
                });
            }
            Step::ReplacePool(i, pool_id) => {
                octavia.delete_pool(&pool_id).await?;
                wait_active(os, &applied.id).await?;
                let listener_id = listener_of(applied, &pool_id);
                add_pool(os, desired, i, &listener_id, &tags, applied).await?;
            }
            Step::AddPool(i, listener_id) => {
                add_pool(os, desired, i, &listener_id, &tags, applied).await?;
            }
            Step::UpdatePool(i, id) => {
                let p = &desired.ports[i].pool;
                octavia
                    .update_pool(
                        &id,
                        json!({
                            "lb_algorithm": p.lb_algorithm,
                            "session_persistence": persistence(p),
                        }),
                    )
                    .await?;
                set_pool(applied, &id, |a| a.spec.pool = p.clone());
            }
            Step::Members(i, id) => {
                octavia
                    .batch_update_members(
                        &id,
                        &new_members(desired, &desired.ports[i], &applied.vip_subnet_id),
                    )
                    .await?;
                set_pool(applied, &id, |a| {
                    a.spec.members = desired.ports[i].members.clone()
                });
            }
            Step::AddMonitor(i, pool_id) => {
                let Some(m) = &desired.ports[i].monitor else {
                    continue;
                };
                let mut new = new_monitor(&format!("monitor_{i}_{}", desired.name), m);
                new.pool_id = Some(pool_id.clone());
                let made = octavia.create_health_monitor(&new).await?;
                set_pool(applied, &pool_id, |a| {
                    a.monitor_id = Some(made.id.clone());
                    a.spec.monitor = Some(m.clone());
                });
            }
            Step::RemoveMonitor(id) => {
                octavia.delete_health_monitor(&id).await?;
                for p in &mut applied.ports {
                    if p.monitor_id.as_deref() == Some(id.as_str()) {
                        p.monitor_id = None;
                        p.spec.monitor = None;
                    }
                }
            }
            Step::UpdateMonitor(i, id) => {
                let Some(m) = &desired.ports[i].monitor else {
                    continue;
                };
                octavia
                    .update_health_monitor(
                        &id,
                        json!({
                            "delay": m.delay,
                            "timeout": m.timeout,
                            "max_retries": m.max_retries,
                            "max_retries_down": m.max_retries_down,
                        }),
                    )
                    .await?;
                for p in &mut applied.ports {
                    if p.monitor_id.as_deref() == Some(id.as_str()) {
                        p.spec.monitor = Some(m.clone());
                    }
                }
            }
        }
    }
    Ok(count)
}

fn listener_of(applied: &Applied, pool_id: &str) -> String {
    applied
        .ports
        .iter()
        .find(|p| p.pool_id.as_deref() == Some(pool_id))
        .map(|p| p.listener_id.clone())
        .unwrap_or_default()
}

fn set_port(applied: &mut Applied, listener_id: &str, f: impl FnOnce(&mut AppliedPort)) {
    if let Some(p) = applied.ports.iter_mut().find(|p| p.listener_id == listener_id) {
        f(p);
    }
}

fn set_pool(applied: &mut Applied, pool_id: &str, f: impl FnOnce(&mut AppliedPort)) {
    if let Some(p) = applied
        .ports
        .iter_mut()
        .find(|p| p.pool_id.as_deref() == Some(pool_id))
    {
        f(p);
    }
}

/// What a new listener or pool of port `i` holds as made: everything, or serially no members
/// and no monitor yet (the next round of steps adds them).
fn made_spec(desired: &Desired, i: usize) -> PortSpec {
    let mut spec = desired.ports[i].clone();
    if desired.serial_api_calls {
        spec.members.clear();
        spec.monitor = None;
    }
    spec
}

async fn add_pool(
    os: &Client,
    desired: &Desired,
    i: usize,
    listener_id: &str,
    tags: &[String],
    applied: &mut Applied,
) -> Result<(), Error> {
    let mut pool = new_pool(desired, i, &desired.ports[i], tags, &applied.vip_subnet_id);
    pool.listener_id = Some(listener_id.to_owned());
    let made = os.load_balancer().create_pool(&pool).await?;
    let spec = made_spec(desired, i);
    set_port(applied, listener_id, |p| {
        p.pool_id = Some(made.id.clone());
        p.monitor_id = made.healthmonitor_id.clone();
        p.spec.pool = spec.pool;
        p.spec.members = spec.members;
        p.spec.monitor = spec.monitor;
    });
    Ok(())
}

/// The floating IPs on a port, or tagged for a Service.
async fn floating_ips(os: &Client, query: (&str, String)) -> Result<Vec<FloatingIp>, Error> {
    Ok(os.network().floating_ips(&[query]).await?)
}

fn is_ours(fip: &FloatingIp, desired: &Desired, namespace: &str, name: &str, cluster: &str) -> bool {
    fip.tags.contains(&service_tag(&desired.uid))
        || fip.description == floating_ip_description(namespace, name, cluster)
}

/// Whether `fip`, on the VIP of the in-tree provider's load balancer (`a<uid>`) that berth
/// adopted, is one that provider allocated: it gave them no description and no tags, and
/// released whatever sat on the VIP when the Service went. An address the Service asks for by
/// `spec.loadBalancerIP` may be the user's own, so it is never counted as inherited.
fn inherited_from_in_tree(fip: &FloatingIp, applied: &Applied, uid: &str, requested: Option<&str>) -> bool {
    applied.name == super::desired::legacy_lb_name(uid)
        && fip.port_id.as_deref() == Some(applied.vip_port_id.as_str())
        && fip.description.is_empty()
        && fip.tags.is_empty()
        && requested != Some(fip.floating_ip_address.as_str())
}

/// The identity of a Service, for floating IP descriptions.
#[derive(Debug, Clone, Copy)]
pub struct ServiceId<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The cluster.
    pub cluster: &'a str,
}

/// Gives a public Service's VIP a floating IP (or takes it away from an internal one).
/// Returns a notice when the floating IP could not be made as asked.
pub async fn ensure_floating_ip(
    os: &Client,
    desired: &Desired,
    id: ServiceId<'_>,
    applied: &mut Applied,
) -> Result<Option<Notice>, Error> {
    if !applied.owned {
        // Only the owner of a shared load balancer may attach a floating IP (as upstream).
        return Ok(None);
    }
    if !applied.floating_ip_known {
        let on_port = floating_ips(os, ("port_id", applied.vip_port_id.clone())).await?;
        let requested = desired.floating.as_ref().and_then(|w| w.address.as_deref());
        applied.floating_ip = match on_port.first() {
            None => None,
            Some(f) if inherited_from_in_tree(f, applied, &desired.uid, requested) => {
                // Tagged now, so that it is released with the Service and the garbage
                // collector knows it, like one berth allocated.
                let mut tags = desired.tags.clone();
                if desired.keep_floating_ip {
                    tags.push(KEEP_TAG.into());
                }
                os.network().set_tags("floatingips", &f.id, &tags).await?;
                info!(service = %desired.service, fip = %f.floating_ip_address, "took over the in-tree provider's floating IP");
                Some(AppliedFloatingIp {
                    id: f.id.clone(),
                    address: f.floating_ip_address.clone(),
                    ours: true,
                })
            }
            Some(f) => Some(AppliedFloatingIp {
                id: f.id.clone(),
                address: f.floating_ip_address.clone(),
                ours: is_ours(f, desired, id.namespace, id.name, id.cluster),
            }),
        };
        applied.floating_ip_known = true;
    }
    let Some(want) = &desired.floating else {
        if let Some(f) = applied.floating_ip.take() {
            release(os, &f, desired.keep_floating_ip).await?;
        }
        return Ok(None);
    };
    if let Some(f) = &applied.floating_ip {
        match &want.address {
            Some(a) if a != &f.address => {
                let f = f.clone();
                applied.floating_ip = None;
                release(os, &f, desired.keep_floating_ip).await?;
            }
            _ => return Ok(None),
        }
    }
    // One of this Service's own that lost its port (the Service was internal for a while, or
    // the load balancer was deleted by hand) is reused rather than leaked.
    let tagged = floating_ips(os, ("tags", service_tag(&desired.uid))).await?;
    let reusable = tagged
        .into_iter()
        .find(|f| f.port_id.is_none() && want.address.as_ref().is_none_or(|a| a == &f.floating_ip_address));
    if let Some(f) = reusable {
        bind_to_vip(os, applied, &f.id, true).await?;
        return Ok(None);
    }
    if let Some(address) = &want.address {
        // spec.loadBalancerIP: a floating IP the user allocated, or one to allocate.
        let existing = floating_ips(os, ("floating_ip_address", address.clone())).await?;
        if let Some(f) = existing.first() {
            if f.port_id.as_deref().is_some_and(|p| p != applied.vip_port_id) {
                return Err(Error::Invalid(format!(
                    "spec.loadBalancerIP {address} is a floating IP in use by another port ({})",
                    f.port_id.as_deref().unwrap_or_default()
                )));
            }
            bind_to_vip(os, applied, &f.id, false).await?;
            return Ok(None);
        }
    }
    let Some(network) = &want.network_id else {
        return Ok(Some(Notice {
            reason: "LoadBalancerExternalNetworkSearchFailed",
            message: "no floating-network-id is configured and the cloud has not exactly one external network: the load balancer stays internal".into(),
        }));
    };
    let subnet = match (&want.subnet_id, &want.subnet_pattern, &want.subnet_tags) {
        (Some(s), _, _) => Some(s.clone()),
        (None, None, None) => None,
        (None, pattern, tags) => Some(pick_subnet(os, network, pattern.as_deref(), tags.as_deref()).await?),
    };
    let mut tags = desired.tags.clone();
    if desired.keep_floating_ip {
        tags.push(KEEP_TAG.into());
    }
    let mut fields = json!({
        "floating_network_id": network,
        "port_id": applied.vip_port_id,
        "description": floating_ip_description(id.namespace, id.name, id.cluster),
    });
    if let Some(s) = subnet {
        fields["subnet_id"] = json!(s);
    }
    if let Some(a) = &want.address {
        fields["floating_ip_address"] = json!(a);
    }
    let f = os.network().create_floating_ip(fields).await?;
    info!(service = %desired.service, fip = %f.floating_ip_address, "floating IP allocated");
    // Neutron takes no tags in a floating IP create (`tag-creation` covers other resources):
    // if this call is lost, the description still marks the address as this Service's.
    if !tags.is_empty() {
        os.network().set_tags("floatingips", &f.id, &tags).await?;
    }
    applied.floating_ip = Some(AppliedFloatingIp {
        id: f.id,
        address: f.floating_ip_address,
        ours: true,
    });
    Ok(None)
}

/// Binds floating IP `id` to the VIP port and remembers it (`ours`: berth may release it).
async fn bind_to_vip(os: &Client, applied: &mut Applied, id: &str, ours: bool) -> Result<(), Error> {
    let f = os
        .network()
        .associate_floating_ip(id, Some(&applied.vip_port_id))
        .await?;
    applied.floating_ip = Some(AppliedFloatingIp {
        id: f.id,
        address: f.floating_ip_address,
        ours,
    });
    Ok(())
}

/// The tag that tells the garbage collector to leave a floating IP alone.
pub const KEEP_TAG: &str = "berth-keep-floatingip";

async fn release(os: &Client, f: &AppliedFloatingIp, keep: bool) -> Result<(), Error> {
    if f.ours && !keep {
        info!(fip = %f.address, "releasing the floating IP");
        os.network().delete_floating_ip(&f.id).await?;
    } else {
        os.network().associate_floating_ip(&f.id, None).await?;
    }
    Ok(())
}

/// Picks a subnet of the external network by name pattern and tags (upstream's rules: a
/// glob, or `~regex`; `!` negates; tags `a,b` any of them, `&a,b` all; `!` negates).
async fn pick_subnet(
    os: &Client,
    network: &str,
    pattern: Option<&str>,
    tags: Option<&str>,
) -> Result<String, Error> {
    let subnets = os
        .network()
        .subnets(&[("network_id", network.to_owned())])
        .await?;
    let name_ok = |name: &str| match pattern {
        None => Ok(true),
        Some(p) => name_matches(p, name),
    };
    for s in &subnets {
        if name_ok(&s.name)? && tags.is_none_or(|t| tags_match(t, &s.tags)) {
            return Ok(s.id.clone());
        }
    }
    Err(Error::Invalid(format!(
        "no subnet of floating network {network} matches floating-subnet {:?} / floating-subnet-tags {:?}",
        pattern.unwrap_or(""),
        tags.unwrap_or("")
    )))
}

/// Upstream's subnet name match: a glob, or `~regex`; a leading `!` negates.
pub fn name_matches(pattern: &str, name: &str) -> Result<bool, Error> {
    let (negate, p) = match pattern.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    };
    let re = match p.strip_prefix('~') {
        Some(r) => r.to_owned(),
        None => {
            let mut r = String::from("^");
            for c in p.chars() {
                match c {
                    '*' => r.push_str(".*"),
                    '?' => r.push('.'),
                    c => r.push_str(&regex::escape(&c.to_string())),
                }
            }
            r.push('$');
            r
        }
    };
    let re = regex::Regex::new(&re)
        .map_err(|e| Error::Invalid(format!("floating-subnet {pattern:?} is not a valid pattern: {e}")))?;
    Ok(re.is_match(name) != negate)
}

/// Upstream's subnet tag match: `a,b` any, `&a,b` all; a leading `!` negates.
pub fn tags_match(spec: &str, tags: &[String]) -> bool {
    let (negate, s) = match spec.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let (all, s) = match s.strip_prefix('&') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let wanted: Vec<&str> = s.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
    let has = |t: &&str| tags.iter().any(|x| x == t);
    let m = if all {
        wanted.iter().all(has)
    } else {
        wanted.iter().any(has)
    };
    m != negate
}

/// Deletes the Service's listeners and their pools, one at a time.
async fn delete_listeners(os: &Client, applied: &Applied) -> Result<(), Error> {
    for p in &applied.ports {
        if let Some(pool) = &p.pool_id {
            wait_active(os, &applied.id).await?;
            os.load_balancer().delete_pool(pool).await?;
        }
        wait_active(os, &applied.id).await?;
        os.load_balancer().delete_listener(&p.listener_id).await?;
    }
    Ok(())
}

/// How a Service's load balancer is deleted.
#[derive(Debug, Clone, Copy)]
pub struct DeleteOptions<'a> {
    /// `keep-floatingip`: the floating IP is unbound, not released.
    pub keep_floating_ip: bool,
    /// `spec.loadBalancerIP`: never counted as inherited from the in-tree provider.
    pub requested_ip: Option<&'a str>,
    /// `[LoadBalancer] cascade-delete`.
    pub cascade: bool,
    /// `[LoadBalancer] manage-security-groups`: its group goes too.
    pub security_groups: bool,
}

/// What [`delete`] left of a load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Nothing: it is gone.
    All,
    /// The Service's listeners went; other Services still use the load balancer.
    Listeners,
    /// The Service's listeners went and it has none left: the load balancer of a Service that
    /// is gone was kept for this one, so the sweep can take it now.
    LastSharer,
}

/// Deletes what berth made for the Service: the floating IP (unless kept, or not berth's),
/// then the load balancer with everything under it; on a shared load balancer only the
/// Service's own listeners and pools.
pub async fn delete(
    os: &Client,
    waiter: &super::waiter::ActiveWaiter,
    applied: &Applied,
    desired_uid: &str,
    id: ServiceId<'_>,
    options: DeleteOptions<'_>,
) -> Result<Deleted, Error> {
    let DeleteOptions {
        keep_floating_ip,
        requested_ip,
        cascade,
        security_groups,
    } = options;
    let octavia = os.load_balancer();
    if !applied.owned {
        delete_listeners(os, applied).await?;
        // Deleted listeners are listed (PENDING_DELETE) until Octavia is done. An owner has a
        // listener while it lives. A load balancer that does not settle is the periodic sweep's.
        let last = match wait_active(os, &applied.id).await {
            Ok(_) => octavia
                .listeners(&[("loadbalancer_id", applied.id.clone())])
                .await?
                .is_empty(),
            Err(_) => false,
        };
        return Ok(if last {
            Deleted::LastSharer
        } else {
            Deleted::Listeners
        });
    }
    // Still used by other Services (`load-balancer-id`): only this Service's listeners go; the
    // load balancer and its address stay for them (the sweep takes it once they are gone).
    let listeners = octavia
        .listeners(&[("loadbalancer_id", applied.id.clone())])
        .await?;
    let others = sharers(&applied.tags, &listeners, desired_uid);
    if !others.is_empty() {
        delete_listeners(os, applied).await?;
        info!(lb = %applied.id, sharers = others.len(), "load balancer kept: other Services share it");
        return Ok(Deleted::Listeners);
    }
    // Floating IPs: the one on the VIP, and any of the Service's that lost their port.
    let mut fips = floating_ips(os, ("port_id", applied.vip_port_id.clone())).await?;
    if !desired_uid.is_empty() {
        for f in floating_ips(os, ("tags", service_tag(desired_uid))).await? {
            if !fips.iter().any(|x| x.id == f.id) {
                fips.push(f);
            }
        }
    }
    for f in fips {
        let ours = f.tags.contains(&service_tag(desired_uid))
            || f.description == floating_ip_description(id.namespace, id.name, id.cluster)
            || inherited_from_in_tree(&f, applied, desired_uid, requested_ip);
        let applied_fip = AppliedFloatingIp {
            id: f.id.clone(),
            address: f.floating_ip_address.clone(),
            ours,
        };
        if ours && !keep_floating_ip {
            release(os, &applied_fip, false).await?;
        } else if f.port_id.is_some() {
            // Not berth's, or kept: unbind it, so the VIP port can go.
            release(os, &applied_fip, true).await?;
        }
    }
    // Its security group off the Nodes' ports (one left from when the option was on is the
    // sweep's: tagged like the rest).
    if security_groups {
        super::security_group::delete(os, &applied.id).await?;
    }
    if cascade {
        octavia.delete(&applied.id, true).await?;
    } else {
        delete_listeners(os, applied).await?;
        wait_active(os, &applied.id).await?;
        octavia.delete(&applied.id, false).await?;
    }
    waiter.wait_deleted(&applied.id, DELETE_TIMEOUT).await?;
    info!(lb = %applied.id, name = %applied.name, "load balancer deleted");
    Ok(Deleted::All)
}

/// The ids Octavia has as of a read, for tests.
#[cfg(test)]
pub(crate) fn plan_names(desired: &Desired, applied: &Applied) -> Vec<String> {
    plan(desired, applied)
        .iter()
        .map(|s| {
            let dbg = format!("{s:?}");
            dbg.split(['(', ' ']).next().unwrap_or_default().to_owned()
        })
        .collect()
}
