//! `[LoadBalancer] manage-security-groups`: one security group per load balancer, named as
//! upstream names it (`lb-sg-<load balancer id>`) and tagged like everything berth makes, on
//! the member Nodes' ports. It opens the Service's NodePorts (and the health-check NodePort)
//! to the members' subnets, where Octavia's traffic and health checks come from.
//!
//! Ports are changed with Neutron's compare-and-swap (`If-Match: revision_number`), so a
//! security group someone else adds to a Node's port at the same time is never lost, and
//! only this group is ever added or removed. What was applied is remembered: a Service whose
//! members and ports did not change costs no call.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use berth_openstack::{Client, network::Port};
use serde_json::json;
use tracing::info;

use super::{desired::Desired, octavia::Applied};
use crate::Error;

/// Upstream's name for a load balancer's security group.
pub fn name(lb_id: &str) -> String {
    format!("lb-sg-{lb_id}")
}

/// One ingress rule: protocol, port, source CIDR.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    /// `tcp` or `udp`.
    pub protocol: String,
    /// The NodePort.
    pub port: u16,
    /// The source CIDR (a member subnet).
    pub remote: String,
}

/// The security group as berth last left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedGroup {
    /// Its id.
    pub id: String,
    /// Its ingress rules and their ids.
    pub rules: BTreeMap<Rule, String>,
    /// The member addresses whose ports carry it.
    pub members: BTreeSet<String>,
    /// Whether `members` are all the ports that carry it (not so for a group found by name).
    pub members_known: bool,
    /// Each member address's subnet CIDR.
    pub cidrs: HashMap<String, String>,
}

/// The rules a Service needs, given the CIDR of each member's subnet.
pub fn wanted_rules(desired: &Desired, cidr_of: &HashMap<String, String>) -> BTreeSet<Rule> {
    let mut rules = BTreeSet::new();
    for port in &desired.ports {
        let protocol = if port.listener.protocol == "UDP" {
            "udp"
        } else {
            "tcp"
        };
        for m in &port.members {
            let Some(remote) = cidr_of.get(&m.address) else {
                continue;
            };
            rules.insert(Rule {
                protocol: protocol.into(),
                port: m.port,
                remote: remote.clone(),
            });
            if let Some(hc) = m.monitor_port {
                rules.insert(Rule {
                    protocol: "tcp".into(),
                    port: hc,
                    remote: remote.clone(),
                });
            }
        }
    }
    rules
}

fn member_addresses(desired: &Desired) -> BTreeSet<String> {
    desired
        .ports
        .iter()
        .flat_map(|p| p.members.iter().map(|m| m.address.clone()))
        .collect()
}

fn ethertype(cidr: &str) -> &'static str {
    if cidr.contains(':') { "IPv6" } else { "IPv4" }
}

/// The ports holding each address (on a port with port security: others take no group).
fn ports_by_address(ports: &[Port]) -> HashMap<String, &Port> {
    let mut by = HashMap::new();
    for p in ports {
        if p.port_security_enabled == Some(false) {
            continue;
        }
        for ip in &p.fixed_ips {
            by.insert(ip.ip_address.clone(), p);
        }
    }
    by
}

/// How many addresses one port list asks for (Neutron takes any of them): URLs stay short.
const ADDRESSES_PER_LIST: usize = 100;

/// The ports with one of `addresses`, a list call per [`ADDRESSES_PER_LIST`].
async fn ports_with_addresses<'a>(
    os: &Client,
    addresses: impl Iterator<Item = &'a String>,
) -> Result<Vec<Port>, Error> {
    let addresses: Vec<&String> = addresses.collect();
    // A port with two member addresses may come in two lists: keep it once.
    let mut ports: BTreeMap<String, Port> = BTreeMap::new();
    for chunk in addresses.chunks(ADDRESSES_PER_LIST) {
        let query: Vec<(&str, String)> = chunk
            .iter()
            .map(|a| ("fixed_ips", format!("ip_address={a}")))
            .collect();
        for port in os.network().ports(&query).await? {
            ports.insert(port.id.clone(), port);
        }
    }
    Ok(ports.into_values().collect())
}

/// Adds (`add`) or removes the group on a port, re-reading it if it changed meanwhile.
async fn set_on_port(os: &Client, port: &Port, group: &str, add: bool) -> Result<(), Error> {
    let mut port = port.clone();
    for _ in 0..5 {
        let has = port.security_groups.iter().any(|g| g == group);
        if has == add {
            return Ok(());
        }
        let mut groups: Vec<String> = port
            .security_groups
            .iter()
            .filter(|g| *g != group)
            .cloned()
            .collect();
        if add {
            groups.push(group.to_owned());
        }
        match os.network().set_port_security_groups(&port, &groups).await {
            Ok(_) => return Ok(()),
            // Someone changed the port meanwhile: read it again and redo the change.
            Err(e) if e.status().map(|s| s.as_u16()) == Some(412) => {
                port = os.network().port(&port.id).await?
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Invalid(format!(
        "port {} kept changing while berth set its security groups",
        port.id
    )))
}

/// Makes the group, its rules and its ports what the Service needs.
pub async fn ensure(os: &Client, desired: &Desired, applied: &mut Applied) -> Result<(), Error> {
    let members = member_addresses(desired);
    let net = os.network();
    let mut group = match applied.security_group.take() {
        Some(g) => g,
        None => {
            let name = name(&applied.id);
            let found = net.security_groups(&[("name", name.clone())]).await?;
            match found.into_iter().next() {
                Some(g) => AppliedGroup {
                    id: g.id,
                    rules: g
                        .security_group_rules
                        .into_iter()
                        .filter(|r| r.direction == "ingress")
                        .filter_map(|r| {
                            Some((
                                Rule {
                                    protocol: r.protocol?,
                                    port: r.port_range_min?,
                                    remote: r.remote_ip_prefix?,
                                },
                                r.id,
                            ))
                        })
                        .collect(),
                    members: BTreeSet::new(),
                    members_known: false,
                    cidrs: HashMap::new(),
                },
                None => {
                    let g = net
                        .create_security_group(
                            &name,
                            &format!("Security Group for loadbalancer service {}", desired.service),
                        )
                        .await?;
                    if !desired.tags.is_empty() {
                        net.set_tags("security-groups", &g.id, &desired.tags).await?;
                    }
                    info!(service = %desired.service, group = %g.id, "security group created");
                    AppliedGroup {
                        id: g.id,
                        rules: BTreeMap::new(),
                        members: BTreeSet::new(),
                        members_known: true,
                        cidrs: HashMap::new(),
                    }
                }
            }
        }
    };
    // The ports only when the members changed: they give the members' subnets.
    let ports = if group.members == members && !members.is_empty() {
        None
    } else if group.members_known {
        // Those of the members, new and old: not every port of the project.
        Some(ports_with_addresses(os, members.union(&group.members)).await?)
    } else {
        // Which ports carry a group found after a restart is not known: all are looked at.
        Some(net.ports(&[]).await?)
    };
    let by_address = ports.as_deref().map(ports_by_address).unwrap_or_default();
    if ports.is_some() {
        let mut subnet_cidr: HashMap<String, String> = HashMap::new();
        group.cidrs.clear();
        for address in &members {
            let Some(port) = by_address.get(address) else {
                continue;
            };
            let Some(fixed) = port.fixed_ips.iter().find(|f| &f.ip_address == address) else {
                continue;
            };
            if !subnet_cidr.contains_key(&fixed.subnet_id) {
                let cidr = net.subnet(&fixed.subnet_id).await?.cidr;
                subnet_cidr.insert(fixed.subnet_id.clone(), cidr);
            }
            group
                .cidrs
                .insert(address.clone(), subnet_cidr[&fixed.subnet_id].clone());
        }
    }
    let cidrs = group.cidrs.clone();
    let wanted = wanted_rules(desired, &cidrs);
    for rule in &wanted {
        if group.rules.contains_key(rule) {
            continue;
        }
        let made = net
            .create_security_group_rule(json!({
                "security_group_id": group.id,
                "direction": "ingress",
                "ethertype": ethertype(&rule.remote),
                "protocol": rule.protocol,
                "port_range_min": rule.port,
                "port_range_max": rule.port,
                "remote_ip_prefix": rule.remote,
            }))
            .await?;
        group.rules.insert(rule.clone(), made.id);
    }
    let extra: Vec<Rule> = group
        .rules
        .keys()
        .filter(|r| !wanted.contains(r))
        .cloned()
        .collect();
    for rule in extra {
        if let Some(id) = group.rules.remove(&rule) {
            net.delete_security_group_rule(&id).await?;
        }
    }
    // The group on every member's port, and on no other port (when the ports were read).
    for (address, port) in &by_address {
        let member = members.contains(address);
        let has = port.security_groups.contains(&group.id);
        if member != has {
            set_on_port(os, port, &group.id, member).await?;
        }
    }
    group.members = members;
    group.members_known = true;
    applied.security_group = Some(group);
    Ok(())
}

/// Takes the load balancer's group off every port and deletes it (if there is one).
pub async fn delete(os: &Client, lb_id: &str) -> Result<(), Error> {
    let net = os.network();
    let groups = net.security_groups(&[("name", name(lb_id))]).await?;
    for g in groups {
        delete_group(os, &g.id).await?;
    }
    Ok(())
}

/// Takes a group off every port that carries it, then deletes it.
pub async fn delete_group(os: &Client, id: &str) -> Result<(), Error> {
    let net = os.network();
    for port in net.ports(&[]).await? {
        if port.security_groups.iter().any(|g| g == id) {
            set_on_port(os, &port, id, false).await?;
        }
    }
    net.delete_security_group(id).await?;
    info!(group = %id, "security group deleted");
    Ok(())
}
