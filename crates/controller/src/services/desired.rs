//! What a Service asks of Octavia: read from its spec, its annotations, the cloud config and
//! the Nodes, without calling anything.
//!
//! The result ([`Desired`]) is compared with what berth last applied, so a Service whose
//! desire did not change costs no OpenStack call. Bad annotations fail here, with the
//! annotation, the value and what is accepted.

use std::collections::{BTreeMap, BTreeSet};

use berth_config::cloud_conf::{CloudConfig, LoadBalancerClass};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;

use crate::Error;

/// The finalizer that keeps a Service until its load balancer is gone.
pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
/// The Node label that keeps a Node out of every load balancer.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// Annotations read (upstream's names).
pub mod annotation {
    #![allow(missing_docs)]
    pub const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";
    pub const SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
    pub const FLOATING_NETWORK_ID: &str = "loadbalancer.openstack.org/floating-network-id";
    pub const FLOATING_SUBNET_ID: &str = "loadbalancer.openstack.org/floating-subnet-id";
    pub const FLOATING_SUBNET: &str = "loadbalancer.openstack.org/floating-subnet";
    pub const FLOATING_SUBNET_TAGS: &str = "loadbalancer.openstack.org/floating-subnet-tags";
    pub const CLASS: &str = "loadbalancer.openstack.org/class";
    pub const SUBNET_ID: &str = "loadbalancer.openstack.org/subnet-id";
    pub const NETWORK_ID: &str = "loadbalancer.openstack.org/network-id";
    pub const MEMBER_SUBNET_ID: &str = "loadbalancer.openstack.org/member-subnet-id";
    pub const PORT_ID: &str = "loadbalancer.openstack.org/port-id";
    pub const CONNECTION_LIMIT: &str = "loadbalancer.openstack.org/connection-limit";
    pub const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";
    pub const PROXY_PROTOCOL: &str = "loadbalancer.openstack.org/proxy-protocol";
    pub const X_FORWARDED_FOR: &str = "loadbalancer.openstack.org/x-forwarded-for";
    pub const LB_METHOD: &str = "loadbalancer.openstack.org/lb-method";
    pub const TIMEOUT_CLIENT_DATA: &str = "loadbalancer.openstack.org/timeout-client-data";
    pub const TIMEOUT_MEMBER_CONNECT: &str = "loadbalancer.openstack.org/timeout-member-connect";
    pub const TIMEOUT_MEMBER_DATA: &str = "loadbalancer.openstack.org/timeout-member-data";
    pub const TIMEOUT_TCP_INSPECT: &str = "loadbalancer.openstack.org/timeout-tcp-inspect";
    pub const FLAVOR_ID: &str = "loadbalancer.openstack.org/flavor-id";
    pub const AVAILABILITY_ZONE: &str = "loadbalancer.openstack.org/availability-zone";
    pub const ENABLE_HEALTH_MONITOR: &str = "loadbalancer.openstack.org/enable-health-monitor";
    pub const HEALTH_MONITOR_DELAY: &str = "loadbalancer.openstack.org/health-monitor-delay";
    pub const HEALTH_MONITOR_TIMEOUT: &str = "loadbalancer.openstack.org/health-monitor-timeout";
    pub const HEALTH_MONITOR_MAX_RETRIES: &str = "loadbalancer.openstack.org/health-monitor-max-retries";
    pub const HEALTH_MONITOR_MAX_RETRIES_DOWN: &str =
        "loadbalancer.openstack.org/health-monitor-max-retries-down";
    pub const LOAD_BALANCER_ID: &str = "loadbalancer.openstack.org/load-balancer-id";
    pub const LOAD_BALANCER_ADDRESS: &str = "loadbalancer.openstack.org/load-balancer-address";
    pub const HOSTNAME: &str = "loadbalancer.openstack.org/hostname";
    pub const NODE_SELECTOR: &str = "loadbalancer.openstack.org/node-selector";
}

/// The load-balancing algorithms Octavia knows.
const LB_METHODS: &[&str] = &["ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"];

/// What this Octavia can do (from its API version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Listener timeouts (2.1).
    pub timeouts: bool,
    /// Tags (2.5).
    pub tags: bool,
    /// Flavors (2.6).
    pub flavors: bool,
    /// Listener allowed CIDRs (2.12).
    pub allowed_cidrs: bool,
    /// Availability zones (2.14).
    pub availability_zones: bool,
}

impl Features {
    /// The features of Octavia API version `major.minor`.
    pub fn of_version((major, minor): (u32, u32)) -> Self {
        let at_least = |m| major > 2 || (major == 2 && minor >= m);
        Self {
            timeouts: at_least(1),
            tags: at_least(5),
            flavors: at_least(6),
            allowed_cidrs: at_least(12),
            availability_zones: at_least(14),
        }
    }
}

/// Where the VIP goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vip {
    /// The VIP subnet.
    pub subnet_id: Option<String>,
    /// The VIP network.
    pub network_id: Option<String>,
    /// A pre-made port.
    pub port_id: Option<String>,
    /// A fixed VIP address (`spec.loadBalancerIP` of an internal Service).
    pub address: Option<String>,
}

/// The floating IP a public Service wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Floating {
    /// The external network.
    pub network_id: Option<String>,
    /// The subnet, by id.
    pub subnet_id: Option<String>,
    /// The subnet, by name pattern (glob, `~regex`, `!` negates).
    pub subnet_pattern: Option<String>,
    /// The subnet, by tags (`a,b` any, `&a,b`… see upstream: `&` all, `!` negates).
    pub subnet_tags: Option<String>,
    /// A wanted address (`spec.loadBalancerIP`).
    pub address: Option<String>,
}

/// One listener, its pool, members and monitor: one Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The listener.
    pub listener: ListenerSpec,
    /// The pool.
    pub pool: PoolSpec,
    /// The members.
    pub members: BTreeSet<MemberSpec>,
    /// The health monitor.
    pub monitor: Option<MonitorSpec>,
}

/// A listener's settings that berth manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// `TCP`, `UDP` or `HTTP` (X-Forwarded-For).
    pub protocol: String,
    /// The Service port.
    pub port: u16,
    /// -1 for none.
    pub connection_limit: i64,
    /// Empty: everyone.
    pub allowed_cidrs: Vec<String>,
    /// client data, member connect, member data, TCP inspect (ms), where Octavia has them.
    pub timeouts: Option<[u32; 4]>,
    /// Insert `X-Forwarded-For`.
    pub x_forwarded_for: bool,
}

/// A pool's settings that berth manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// `TCP`, `UDP`, `PROXY`, `PROXYV2` or `HTTP`.
    pub protocol: String,
    /// The algorithm.
    pub lb_algorithm: String,
    /// `SOURCE_IP` for `sessionAffinity: ClientIP`.
    pub persistence: Option<String>,
}

/// A member: a Node's InternalIP and the Service's NodePort.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemberSpec {
    /// The Node's InternalIP.
    pub address: String,
    /// The NodePort.
    pub port: u16,
    /// The health-check NodePort (`externalTrafficPolicy: Local`).
    pub monitor_port: Option<u16>,
    /// The Node's name.
    pub name: String,
}

/// A health monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorSpec {
    /// `TCP`, `UDP-CONNECT` or `HTTP`.
    pub kind: String,
    /// Seconds between checks.
    pub delay: u32,
    /// Seconds a check may take.
    pub timeout: u32,
    /// Successes before up.
    pub max_retries: u32,
    /// Failures before down.
    pub max_retries_down: u32,
    /// `/healthz` for HTTP monitors.
    pub url_path: Option<String>,
}

/// Everything a LoadBalancer Service asks of Octavia and Neutron.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// `namespace/name`, for messages.
    pub service: String,
    /// The Service's UID.
    pub uid: String,
    /// The load balancer's name (upstream's).
    pub name: String,
    /// The name kube-controller-manager's in-tree provider gives it: `a` + the UID without dashes.
    pub legacy_name: String,
    /// The description (upstream's).
    pub description: String,
    /// The tags berth puts on what it makes: the name, the cluster and the Service UID.
    pub tags: Vec<String>,
    /// Where the VIP goes.
    pub vip: Vip,
    /// The subnet members are on.
    pub member_subnet_id: Option<String>,
    /// Octavia flavor.
    pub flavor_id: Option<String>,
    /// Octavia availability zone.
    pub availability_zone: Option<String>,
    /// Octavia provider.
    pub provider: Option<String>,
    /// One entry per Service port.
    pub ports: Vec<PortSpec>,
    /// A floating IP, unless the Service is internal.
    pub floating: Option<Floating>,
    /// Keep the floating IP when the Service goes (or turns internal).
    pub keep_floating_ip: bool,
    /// A hostname for the ingress status instead of the address.
    pub hostname: Option<String>,
    /// `<ip>.<suffix>` as the ingress hostname (PROXY protocol with enable-ingress-hostname).
    pub hostname_suffix: Option<String>,
    /// Nothing was said about the VIP's subnet or network: it is found from a member's port.
    pub detect_subnet: bool,
    /// `provider-requires-serial-api-calls`: a bare load balancer first, then each listener,
    /// pool, member set and monitor in calls of their own.
    pub serial_api_calls: bool,
    /// `[LoadBalancer] max-shared-lb`: how many Services may share one load balancer (its
    /// owner included) through `load-balancer-id`; `None` on the delete path.
    pub max_shared_lb: Option<usize>,
}

/// The tag on everything berth makes for a cluster.
pub fn cluster_tag(cluster: &str) -> String {
    format!("berth-cluster={cluster}")
}

/// The tag on everything berth makes for one Service.
pub fn service_tag(uid: &str) -> String {
    format!("berth-service={uid}")
}

/// Upstream's load balancer name, cut to Octavia's 255 characters.
pub fn lb_name(cluster: &str, namespace: &str, name: &str) -> String {
    let mut n = format!("kube_service_{cluster}_{namespace}_{name}");
    if n.len() > 255 {
        let mut cut = 255;
        while !n.is_char_boundary(cut) {
            cut -= 1;
        }
        n.truncate(cut);
    }
    n
}

/// The in-tree provider's name: `a` + the UID without dashes, cut to 32 characters.
pub fn legacy_lb_name(uid: &str) -> String {
    let mut n: String = format!("a{}", uid.replace('-', ""));
    n.truncate(32);
    n
}

/// Upstream's floating IP description: the only mark of ownership upstream knows.
pub fn floating_ip_description(namespace: &str, name: &str, cluster: &str) -> String {
    format!("Floating IP for Kubernetes external service {namespace}/{name} from cluster {cluster}")
}

/// The Service's type is LoadBalancer and its class is berth's.
pub fn wants_load_balancer(service: &Service, class: Option<&str>) -> bool {
    let Some(spec) = &service.spec else {
        return false;
    };
    spec.type_.as_deref() == Some("LoadBalancer")
        && spec
            .load_balancer_class
            .as_deref()
            .is_none_or(|c| Some(c) == class)
}

/// A Node's first InternalIP (IPv4 first).
pub fn internal_ip(node: &Node) -> Option<String> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    let internal = addresses.iter().filter(|a| a.type_ == "InternalIP");
    let mut v4 = None;
    let mut any = None;
    for a in internal {
        if a.address.parse::<std::net::Ipv4Addr>().is_ok() && v4.is_none() {
            v4 = Some(a.address.clone());
        }
        any.get_or_insert_with(|| a.address.clone());
    }
    v4.or(any)
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Ready, schedulable, not excluded, with an InternalIP: a Node any load balancer may use.
pub fn eligible(node: &Node) -> bool {
    is_ready(node)
        && !node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
        && !node.labels().contains_key(EXCLUDE_LABEL)
        && internal_ip(node).is_some()
}

/// What of one Node matters to load balancers (`None`: it is no member anywhere): a change
/// here re-checks every pool.
pub type MemberView = Option<(String, BTreeMap<String, String>)>;

/// The member view of one Node.
pub fn member_view(node: &Node) -> MemberView {
    eligible(node).then(|| (internal_ip(node).unwrap_or_default(), node.labels().clone()))
}

/// A `k=v,k` label selector (upstream's node-selector format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelector(Vec<(String, Option<String>)>);

impl NodeSelector {
    /// Parses `k=v,k`; `source` names where it came from in the error.
    pub fn parse(text: &str, source: &str) -> Result<Self, Error> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (k, v) = match term.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim().to_owned())),
                None => (term, None),
            };
            if k.is_empty() {
                return Err(Error::Invalid(format!(
                    "{source} {text:?}: the term {term:?} has no label key (accepted: key=value or key, comma-separated)"
                )));
            }
            terms.push((k.to_owned(), v));
        }
        Ok(Self(terms))
    }

    /// Whether the Node has every label (with the value, where one is given).
    pub fn matches(&self, node: &Node) -> bool {
        let labels = node.labels();
        self.0.iter().all(|(k, v)| match (labels.get(k), v) {
            (Some(have), Some(want)) => have == want,
            (Some(_), None) => true,
            (None, _) => false,
        })
    }
}

/// The settings for building [`Desired`] that come from the process, not the Service.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The cloud config.
    pub config: &'a CloudConfig,
    /// The cluster name.
    pub cluster: &'a str,
    /// What Octavia can do.
    pub features: Features,
    /// The external network found when none is configured (exactly one on the cloud).
    pub detected_floating_network: Option<&'a str>,
}

struct Annotations<'a>(&'a BTreeMap<String, String>);

impl Annotations<'_> {
    fn text(&self, key: &str) -> Option<String> {
        self.0
            .get(key)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, Error> {
        match self.text(key) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "t" => Ok(true),
                "false" | "0" | "no" | "f" => Ok(false),
                _ => Err(Error::Invalid(format!(
                    "annotation {key}: {v:?} is not a boolean (accepted: true, false)"
                ))),
            },
        }
    }

    fn number<T: std::str::FromStr>(&self, key: &str, accepted: &str) -> Result<Option<T>, Error> {
        self.text(key)
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| Error::Invalid(format!("annotation {key}: {v:?} is not {accepted}")))
            })
            .transpose()
    }
}

fn secs(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

/// Builds what `service` asks for, with `nodes` as the candidates for members.
pub fn build<'n>(
    service: &Service,
    nodes: impl Iterator<Item = &'n Node>,
    inputs: &Inputs<'_>,
) -> Result<Desired, Error> {
    let cfg = &inputs.config.load_balancer;
    let namespace = service.namespace().unwrap_or_else(|| "default".into());
    let name = service.name_any();
    let uid = service.uid().unwrap_or_default();
    let spec = service.spec.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let a = Annotations(service.metadata.annotations.as_ref().unwrap_or(&empty));
    let lb_name = lb_name(inputs.cluster, &namespace, &name);

    let class: Option<LoadBalancerClass> = match a.text(annotation::CLASS) {
        None => None,
        Some(c) => Some(
            inputs
                .config
                .load_balancer_classes
                .get(&c)
                .cloned()
                .ok_or_else(|| {
                    let known: Vec<&str> = inputs
                        .config
                        .load_balancer_classes
                        .keys()
                        .map(String::as_str)
                        .collect();
                    Error::Invalid(format!(
                        "annotation {}: {c:?} is not a [LoadBalancerClass] of {} (accepted: {})",
                        annotation::CLASS,
                        inputs.config.path.display(),
                        if known.is_empty() {
                            "none is defined".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ))
                })?,
        ),
    };
    // A class beats the per-Service annotations; both beat [LoadBalancer].
    let pick = |from_class: Option<&Option<String>>, key: &str, from_config: &Option<String>| {
        from_class
            .and_then(|v| v.clone())
            .or_else(|| a.text(key))
            .or_else(|| from_config.clone())
    };
    let c = class.as_ref();
    let subnet_id = pick(c.map(|c| &c.subnet_id), annotation::SUBNET_ID, &cfg.subnet_id);
    let network_id = pick(c.map(|c| &c.network_id), annotation::NETWORK_ID, &cfg.network_id);
    let member_subnet_id = pick(
        c.map(|c| &c.member_subnet_id),
        annotation::MEMBER_SUBNET_ID,
        &cfg.member_subnet_id,
    )
    .or_else(|| subnet_id.clone());
    let port_id = a.text(annotation::PORT_ID);

    let internal = cfg.internal_lb || a.bool(annotation::INTERNAL, false)?;
    let load_balancer_ip = spec.load_balancer_ip.clone().filter(|s| !s.is_empty());
    let floating = if internal {
        None
    } else {
        Some(Floating {
            network_id: pick(
                c.map(|c| &c.floating_network_id),
                annotation::FLOATING_NETWORK_ID,
                &cfg.floating_network_id,
            )
            .or_else(|| inputs.detected_floating_network.map(str::to_owned)),
            subnet_id: pick(
                c.map(|c| &c.floating_subnet_id),
                annotation::FLOATING_SUBNET_ID,
                &cfg.floating_subnet_id,
            ),
            subnet_pattern: pick(
                c.map(|c| &c.floating_subnet),
                annotation::FLOATING_SUBNET,
                &cfg.floating_subnet,
            ),
            subnet_tags: pick(
                c.map(|c| &c.floating_subnet_tags),
                annotation::FLOATING_SUBNET_TAGS,
                &cfg.floating_subnet_tags,
            ),
            address: load_balancer_ip.clone(),
        })
    };

    let lb_algorithm = a
        .text(annotation::LB_METHOD)
        .unwrap_or_else(|| cfg.lb_method.clone())
        .to_ascii_uppercase();
    if !LB_METHODS.contains(&lb_algorithm.as_str()) {
        return Err(Error::Invalid(format!(
            "annotation {} (or [LoadBalancer] lb-method): {lb_algorithm:?} is not a method Octavia knows (accepted: {})",
            annotation::LB_METHOD,
            LB_METHODS.join(", ")
        )));
    }
    let connection_limit = a
        .number::<i64>(annotation::CONNECTION_LIMIT, "a whole number (-1: no limit)")?
        .unwrap_or(-1);
    let proxy = match a.text(annotation::PROXY_PROTOCOL).map(|v| v.to_ascii_lowercase()) {
        None => None,
        Some(v) => match v.as_str() {
            "true" | "v1" => Some("PROXY"),
            "v2" => Some("PROXYV2"),
            "false" => None,
            _ => {
                return Err(Error::Invalid(format!(
                    "annotation {}: {v:?} is not accepted (accepted: true, v1, v2, false)",
                    annotation::PROXY_PROTOCOL
                )));
            }
        },
    };
    let x_forwarded_for = a.bool(annotation::X_FORWARDED_FOR, false)?;
    if proxy.is_some() && x_forwarded_for {
        return Err(Error::Invalid(format!(
            "annotations {} and {} cannot be used together",
            annotation::PROXY_PROTOCOL,
            annotation::X_FORWARDED_FOR
        )));
    }
    let timeouts = if inputs.features.timeouts {
        let ms = |key, default| -> Result<u32, Error> {
            Ok(a.number::<u32>(key, "a number of milliseconds")?
                .unwrap_or(default))
        };
        Some([
            ms(annotation::TIMEOUT_CLIENT_DATA, 50_000)?,
            ms(annotation::TIMEOUT_MEMBER_CONNECT, 5_000)?,
            ms(annotation::TIMEOUT_MEMBER_DATA, 50_000)?,
            ms(annotation::TIMEOUT_TCP_INSPECT, 0)?,
        ])
    } else {
        None
    };
    let mut allowed_cidrs: Vec<String> = spec.load_balancer_source_ranges.clone().unwrap_or_default();
    if allowed_cidrs.is_empty()
        && let Some(ranges) = a.text(annotation::SOURCE_RANGES)
    {
        allowed_cidrs = ranges
            .split(',')
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty())
            .collect();
    }
    for cidr in &mut allowed_cidrs {
        let net: ipnet::IpNet = cidr.parse().map_err(|_| {
            Error::Invalid(format!(
                "loadBalancerSourceRanges: {cidr:?} is not a CIDR (accepted: e.g. 192.0.2.0/24)"
            ))
        })?;
        *cidr = net.trunc().to_string();
    }
    allowed_cidrs.sort();
    allowed_cidrs.dedup();
    if !inputs.features.allowed_cidrs {
        allowed_cidrs.clear();
    }
    // "Everyone" is what no list means: keep the listener as Octavia shows it.
    if allowed_cidrs.iter().any(|c| c == "0.0.0.0/0") && allowed_cidrs.len() == 1 {
        allowed_cidrs.clear();
    }

    let monitor_enabled = a.bool(annotation::ENABLE_HEALTH_MONITOR, cfg.create_monitor)?;
    let local = spec.external_traffic_policy.as_deref() == Some("Local");
    let health_check_port = spec
        .health_check_node_port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0);
    let u32_or = |key, default: i64| -> Result<u32, Error> {
        Ok(a.number::<u32>(key, "a whole number ≥ 0")?
            .unwrap_or_else(|| u32::try_from(default).unwrap_or(0)))
    };
    let delay = u32_or(
        annotation::HEALTH_MONITOR_DELAY,
        i64::from(secs(cfg.monitor_delay)),
    )?;
    let timeout = u32_or(
        annotation::HEALTH_MONITOR_TIMEOUT,
        i64::from(secs(cfg.monitor_timeout)),
    )?;
    let max_retries = u32_or(annotation::HEALTH_MONITOR_MAX_RETRIES, cfg.monitor_max_retries)?;
    let max_retries_down = u32_or(
        annotation::HEALTH_MONITOR_MAX_RETRIES_DOWN,
        cfg.monitor_max_retries_down,
    )?;

    let selector = match a.text(annotation::NODE_SELECTOR) {
        Some(s) => Some(NodeSelector::parse(
            &s,
            &format!("annotation {}", annotation::NODE_SELECTOR),
        )?),
        None => cfg
            .node_selector
            .as_deref()
            .map(|s| NodeSelector::parse(s, "[LoadBalancer] node-selector"))
            .transpose()?,
    };
    let members_of: Vec<(String, String)> = nodes
        .filter(|n| eligible(n) && selector.as_ref().is_none_or(|s| s.matches(n)))
        .filter_map(|n| Some((n.name_any(), internal_ip(n)?)))
        .collect();

    let mut ports = Vec::new();
    for p in spec.ports.iter().flatten() {
        let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        if protocol != "TCP" && protocol != "UDP" {
            return Err(Error::Invalid(format!(
                "port {} ({}): protocol {protocol} is not supported by Octavia load balancers (accepted: TCP, UDP)",
                p.port,
                p.name.as_deref().unwrap_or("unnamed")
            )));
        }
        let port = u16::try_from(p.port)
            .map_err(|_| Error::Invalid(format!("port {} is not a port number", p.port)))?;
        let udp = protocol == "UDP";
        if udp && (proxy.is_some() || x_forwarded_for) {
            return Err(Error::Invalid(format!(
                "port {port}: UDP cannot use {} or {}",
                annotation::PROXY_PROTOCOL,
                annotation::X_FORWARDED_FOR
            )));
        }
        let node_port = p.node_port.and_then(|n| u16::try_from(n).ok()).unwrap_or(0);
        let http_monitor = local && health_check_port.is_some();
        let members = if node_port == 0 {
            // allocateLoadBalancerNodePorts: false, or not allocated yet: nothing to send to.
            BTreeSet::new()
        } else {
            members_of
                .iter()
                .map(|(node, ip)| MemberSpec {
                    address: ip.clone(),
                    port: node_port,
                    monitor_port: if http_monitor && monitor_enabled {
                        health_check_port
                    } else {
                        None
                    },
                    name: node.clone(),
                })
                .collect()
        };
        let monitor = monitor_enabled.then(|| MonitorSpec {
            kind: if http_monitor {
                "HTTP".into()
            } else if udp {
                "UDP-CONNECT".into()
            } else {
                "TCP".into()
            },
            delay,
            timeout,
            max_retries,
            max_retries_down,
            url_path: http_monitor.then(|| "/healthz".to_owned()),
        });
        ports.push(PortSpec {
            listener: ListenerSpec {
                protocol: if x_forwarded_for {
                    "HTTP".into()
                } else {
                    protocol.clone()
                },
                port,
                connection_limit,
                allowed_cidrs: allowed_cidrs.clone(),
                timeouts: if udp { None } else { timeouts },
                x_forwarded_for,
            },
            pool: PoolSpec {
                protocol: if x_forwarded_for {
                    "HTTP".into()
                } else {
                    proxy.map_or(protocol, str::to_owned)
                },
                lb_algorithm: lb_algorithm.clone(),
                persistence: (spec.session_affinity.as_deref() == Some("ClientIP"))
                    .then(|| "SOURCE_IP".to_owned()),
            },
            members,
            monitor,
        });
    }
    if ports.is_empty() {
        return Err(Error::Invalid("the Service has no ports".into()));
    }

    let mut tags = vec![lb_name.clone(), cluster_tag(inputs.cluster), service_tag(&uid)];
    if !inputs.features.tags {
        tags.clear();
    }
    let flavor_id = a.text(annotation::FLAVOR_ID).or_else(|| cfg.flavor_id.clone());
    let availability_zone = a
        .text(annotation::AVAILABILITY_ZONE)
        .or_else(|| cfg.availability_zone.clone());
    let detect_subnet = subnet_id.is_none() && network_id.is_none() && port_id.is_none();
    Ok(Desired {
        service: format!("{namespace}/{name}"),
        legacy_name: legacy_lb_name(&uid),
        description: format!(
            "Kubernetes external service {namespace}/{name} from cluster {}",
            inputs.cluster
        ),
        uid,
        name: lb_name,
        tags,
        vip: Vip {
            subnet_id,
            network_id,
            port_id,
            address: if internal { load_balancer_ip } else { None },
        },
        member_subnet_id,
        flavor_id: flavor_id.filter(|_| inputs.features.flavors),
        availability_zone: availability_zone.filter(|_| inputs.features.availability_zones),
        provider: Some(cfg.lb_provider.clone()).filter(|p| !p.is_empty()),
        ports,
        floating,
        keep_floating_ip: a.bool(annotation::KEEP_FLOATING_IP, false)?,
        hostname: a.text(annotation::HOSTNAME),
        hostname_suffix: (cfg.enable_ingress_hostname && proxy.is_some())
            .then(|| cfg.ingress_hostname_suffix.clone()),
        detect_subnet,
        serial_api_calls: cfg.provider_requires_serial_api_calls,
        max_shared_lb: usize::try_from(cfg.max_shared_lb).ok(),
    })
}

#[cfg(test)]
mod tests;
