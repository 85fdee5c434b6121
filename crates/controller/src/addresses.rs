//! A Node's addresses from its server, the way upstream's controller computes them.
//!
//! In order, dropping duplicates:
//! 1. InternalIP for each fixed IP of each ACTIVE port of the server (IPv6 skipped when disabled);
//! 2. ExternalIP for `accessIPv4` / `accessIPv6`;
//! 3. Hostname from the server's `hostname` metadata;
//! 4. the server's `addresses`, by network name in sorted order: floating ones are ExternalIP;
//!    on a `public-network-name` network ExternalIP (and no longer InternalIP); otherwise
//!    InternalIP if `internal-network-name` is unset or names the network, else the address is
//!    dropped everywhere;
//! 5. sorted by `address-sort-order` (the first matching CIDR wins; unmatched last, stable).

use berth_config::cloud_conf::Networking;
use berth_openstack::{compute::Server, network::Port};
use ipnet::IpNet;

/// One Node address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// `InternalIP`, `ExternalIP` or `Hostname`.
    pub kind: &'static str,
    /// The address.
    pub address: String,
}

impl Address {
    fn new(kind: &'static str, address: &str) -> Self {
        Self {
            kind,
            address: address.to_owned(),
        }
    }
}

fn is_v6(a: &str) -> bool {
    a.contains(':')
}

/// The Node's addresses for `server`, whose ports are `ports`.
pub fn node_addresses(server: &Server, ports: &[Port], networking: &Networking) -> Vec<Address> {
    let v6_ok = |a: &str| !(networking.ipv6_support_disabled && is_v6(a));
    let mut out: Vec<Address> = Vec::new();
    let push = |out: &mut Vec<Address>, a: Address| {
        if v6_ok(&a.address) && !out.contains(&a) {
            out.push(a);
        }
    };
    for port in ports
        .iter()
        .filter(|p| p.status == "ACTIVE" && p.device_id == server.id)
    {
        for ip in &port.fixed_ips {
            push(&mut out, Address::new("InternalIP", &ip.ip_address));
        }
    }
    for access in [&server.access_ipv4, &server.access_ipv6] {
        if !access.is_empty() {
            push(&mut out, Address::new("ExternalIP", access));
        }
    }
    if let Some(hostname) = server.metadata.get("hostname") {
        push(&mut out, Address::new("Hostname", hostname));
    }
    // BTreeMap: networks in sorted order, as upstream sorts them.
    for (network, addresses) in &server.addresses {
        let public = networking.public_network_names.iter().any(|n| n == network);
        let internal_ok = networking.internal_network_names.is_empty()
            || networking.internal_network_names.iter().any(|n| n == network);
        for a in addresses {
            let floating = a.kind.as_deref() == Some("floating");
            if floating || public {
                out.retain(|x| !(x.kind == "InternalIP" && x.address == a.addr));
                push(&mut out, Address::new("ExternalIP", &a.addr));
            } else if internal_ok {
                push(&mut out, Address::new("InternalIP", &a.addr));
            } else {
                out.retain(|x| x.address != a.addr);
            }
        }
    }
    if !networking.address_sort_order.is_empty() {
        let cidrs: Vec<IpNet> = networking
            .address_sort_order
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect();
        let rank = |a: &Address| {
            a.address
                .parse::<std::net::IpAddr>()
                .ok()
                .and_then(|ip| cidrs.iter().position(|c| c.contains(&ip)))
                .unwrap_or(usize::MAX)
        };
        out.sort_by_key(rank);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn server(addresses: serde_json::Value, metadata: serde_json::Value) -> Server {
        serde_json::from_value(json!({
            "id": "s1", "name": "node-1", "status": "ACTIVE",
            "addresses": addresses, "metadata": metadata, "accessIPv4": "", "accessIPv6": ""
        }))
        .unwrap()
    }

    fn port(ips: &[&str], status: &str) -> Port {
        serde_json::from_value(json!({
            "id": "p", "network_id": "n", "device_id": "s1", "status": status,
            "fixed_ips": ips.iter().map(|ip| json!({"subnet_id": "x", "ip_address": ip})).collect::<Vec<_>>()
        }))
        .unwrap()
    }

    fn kinds(a: &[Address]) -> Vec<(String, String)> {
        a.iter().map(|a| (a.kind.to_owned(), a.address.clone())).collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, a)| ((*k).to_owned(), (*a).to_owned()))
            .collect()
    }

    #[test]
    fn ports_then_floating_then_networks() {
        let s = server(
            json!({
                "berth-net": [
                    {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"},
                    {"addr": "203.0.113.9", "version": 4, "OS-EXT-IPS:type": "floating"}
                ],
                "other": [{"addr": "192.168.1.4", "version": 4, "OS-EXT-IPS:type": "fixed"}]
            }),
            json!({"hostname": "node-1.example"}),
        );
        let got = node_addresses(
            &s,
            &[port(&["10.0.0.5"], "ACTIVE"), port(&["10.9.9.9"], "DOWN")],
            &Networking::default(),
        );
        assert_eq!(
            kinds(&got),
            pairs(&[
                ("InternalIP", "10.0.0.5"),
                ("Hostname", "node-1.example"),
                ("ExternalIP", "203.0.113.9"),
                ("InternalIP", "192.168.1.4"),
            ])
        );
    }

    #[test]
    fn public_and_internal_network_names() {
        let s = server(
            json!({
                "pub": [{"addr": "198.51.100.7", "version": 4}],
                "priv": [{"addr": "10.0.0.5", "version": 4}],
                "storage": [{"addr": "172.16.0.5", "version": 4}]
            }),
            json!({}),
        );
        let networking = Networking {
            public_network_names: vec!["pub".into()],
            internal_network_names: vec!["priv".into()],
            ..Networking::default()
        };
        let got = node_addresses(
            &s,
            &[port(&["10.0.0.5", "172.16.0.5", "198.51.100.7"], "ACTIVE")],
            &networking,
        );
        assert_eq!(
            kinds(&got),
            pairs(&[("InternalIP", "10.0.0.5"), ("ExternalIP", "198.51.100.7")])
        );
    }

    #[test]
    fn ipv6_disabled_and_sort_order() {
        let s = server(
            json!({"net": [{"addr": "fd00::5", "version": 6}, {"addr": "10.0.0.5", "version": 4}]}),
            json!({}),
        );
        let off = Networking {
            ipv6_support_disabled: true,
            ..Networking::default()
        };
        assert_eq!(
            kinds(&node_addresses(&s, &[], &off)),
            pairs(&[("InternalIP", "10.0.0.5")])
        );
        let sorted = Networking {
            address_sort_order: vec!["10.0.0.0/8".into()],
            ..Networking::default()
        };
        assert_eq!(
            kinds(&node_addresses(&s, &[], &sorted)),
            pairs(&[("InternalIP", "10.0.0.5"), ("InternalIP", "fd00::5")])
        );
    }
}
