//! Neutron: networks, subnets, ports, routers and floating IPs.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    Client, Result,
    client::{Req, Service},
};

/// A network.
#[derive(Debug, Clone, Deserialize)]
pub struct Network {
    /// The network's id.
    pub id: String,
    /// The network's name.
    #[serde(default)]
    pub name: String,
    /// Its subnets' ids.
    #[serde(default)]
    pub subnets: Vec<String>,
    /// Whether it is an external (floating IP) network.
    #[serde(rename = "router:external", default)]
    pub external: bool,
    /// The owning project.
    #[serde(default)]
    pub project_id: String,
}

/// A subnet.
#[derive(Debug, Clone, Deserialize)]
pub struct Subnet {
    /// The subnet's id.
    pub id: String,
    /// The subnet's name.
    #[serde(default)]
    pub name: String,
    /// Its network's id.
    pub network_id: String,
    /// The CIDR, e.g. `10.0.0.0/24`.
    pub cidr: String,
    /// 4 or 6.
    pub ip_version: u8,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// An IP address on a port.
#[derive(Debug, Clone, Deserialize)]
pub struct FixedIp {
    /// The subnet's id.
    pub subnet_id: String,
    /// The address.
    pub ip_address: String,
}

/// An address pair a port may also send from.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct AddressPair {
    /// An address or CIDR.
    pub ip_address: String,
    /// The MAC address, if not the port's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

/// A port.
#[derive(Debug, Clone, Deserialize)]
pub struct Port {
    /// The port's id.
    pub id: String,
    /// The port's name.
    #[serde(default)]
    pub name: String,
    /// Its network's id.
    pub network_id: String,
    /// The server, router or load balancer it belongs to.
    #[serde(default)]
    pub device_id: String,
    /// `compute:<az>`, `network:router_interface`, `Octavia`, …
    #[serde(default)]
    pub device_owner: String,
    /// Its addresses.
    #[serde(default)]
    pub fixed_ips: Vec<FixedIp>,
    /// Extra addresses it may send from.
    #[serde(default)]
    pub allowed_address_pairs: Vec<AddressPair>,
    /// `ACTIVE`, `DOWN`, …
    #[serde(default)]
    pub status: String,
    /// Whether port security (and so anti-spoofing) is on.
    #[serde(default)]
    pub port_security_enabled: Option<bool>,
    /// Its security groups.
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// Neutron's revision, for compare-and-swap updates.
    #[serde(default)]
    pub revision_number: Option<u64>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A security group.
#[derive(Debug, Clone, Deserialize)]
pub struct SecurityGroup {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// Its rules.
    #[serde(default)]
    pub security_group_rules: Vec<SecurityGroupRule>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A security group rule.
#[derive(Debug, Clone, Deserialize)]
pub struct SecurityGroupRule {
    /// Its id.
    pub id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    #[serde(default)]
    pub ethertype: String,
    /// `tcp`, `udp`, … or none for any.
    #[serde(default)]
    pub protocol: Option<String>,
    /// The first port.
    #[serde(default)]
    pub port_range_min: Option<u16>,
    /// The last port.
    #[serde(default)]
    pub port_range_max: Option<u16>,
    /// The source (ingress) or destination (egress) CIDR.
    #[serde(default)]
    pub remote_ip_prefix: Option<String>,
}

/// A router.
#[derive(Debug, Clone, Deserialize)]
pub struct Router {
    /// The router's id.
    pub id: String,
    /// The router's name.
    #[serde(default)]
    pub name: String,
    /// Its static routes.
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// A static route on a router.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct Route {
    /// The destination CIDR.
    pub destination: String,
    /// The next hop.
    pub nexthop: String,
}

/// A floating IP.
#[derive(Debug, Clone, Deserialize)]
pub struct FloatingIp {
    /// The floating IP's id.
    pub id: String,
    /// The address.
    pub floating_ip_address: String,
    /// The port it is bound to.
    #[serde(default)]
    pub port_id: Option<String>,
    /// The external network it comes from.
    pub floating_network_id: String,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// `ACTIVE`, `DOWN` (DOWN without an L3 agent), …
    #[serde(default)]
    pub status: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Neutron's API, borrowed from a [`Client`].
#[derive(Debug, Clone, Copy)]
pub struct Networking<'a> {
    client: &'a Client,
}

impl Client {
    /// Neutron.
    pub fn network(&self) -> Networking<'_> {
        Networking { client: self }
    }
}

impl Networking<'_> {
    /// Networks matching the query, e.g. `[("name", "public")]`.
    pub async fn networks(&self, query: &[(&str, String)]) -> Result<Vec<Network>> {
        self.client
            .list_all(Service::Network, "networks", "networks", query)
            .await
    }

    /// Subnets matching the query.
    pub async fn subnets(&self, query: &[(&str, String)]) -> Result<Vec<Subnet>> {
        self.client
            .list_all(Service::Network, "subnets", "subnets", query)
            .await
    }

    /// Ports matching the query, e.g. `[("device_id", server_id)]`.
    pub async fn ports(&self, query: &[(&str, String)]) -> Result<Vec<Port>> {
        self.client
            .list_all(Service::Network, "ports", "ports", query)
            .await
    }

    /// Routers matching the query.
    pub async fn routers(&self, query: &[(&str, String)]) -> Result<Vec<Router>> {
        self.client
            .list_all(Service::Network, "routers", "routers", query)
            .await
    }

    /// Floating IPs matching the query.
    pub async fn floating_ips(&self, query: &[(&str, String)]) -> Result<Vec<FloatingIp>> {
        self.client
            .list_all(Service::Network, "floatingips", "floatingips", query)
            .await
    }

    /// The aliases of Neutron's API extensions (`extraroute-atomic`, `allowed-address-pairs`, …).
    pub async fn extension_aliases(&self) -> Result<Vec<String>> {
        #[derive(Deserialize)]
        struct Ext {
            alias: String,
        }
        let exts: Vec<Ext> = self
            .client
            .list_all(Service::Network, "extensions", "extensions", &[])
            .await?;
        Ok(exts.into_iter().map(|e| e.alias).collect())
    }

    /// One router by id.
    pub async fn router(&self, id: &str) -> Result<Router> {
        self.client
            .get_one(Service::Network, &format!("routers/{id}"), "router")
            .await
    }

    /// One subnet by id.
    pub async fn subnet(&self, id: &str) -> Result<Subnet> {
        self.client
            .get_one(Service::Network, &format!("subnets/{id}"), "subnet")
            .await
    }

    /// One network by id.
    pub async fn network(&self, id: &str) -> Result<Network> {
        self.client
            .get_one(Service::Network, &format!("networks/{id}"), "network")
            .await
    }

    /// Deletes a port. A port that is gone already is not an error.
    pub async fn delete_port(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("ports/{id}"), &[])
            .await
    }

    /// Creates a network.
    pub async fn create_network(&self, name: &str) -> Result<Network> {
        self.client
            .post_one(Service::Network, "networks", "network", &json!({ "name": name }))
            .await
    }

    /// Deletes a network. One that is gone is no error.
    pub async fn delete_network(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("networks/{id}"), &[])
            .await
    }

    /// Creates an IPv4 subnet.
    pub async fn create_subnet(&self, network_id: &str, name: &str, cidr: &str) -> Result<Subnet> {
        self.client
            .post_one(
                Service::Network,
                "subnets",
                "subnet",
                &json!({ "network_id": network_id, "name": name, "cidr": cidr, "ip_version": 4 }),
            )
            .await
    }

    /// Deletes a subnet. One that is gone is no error.
    pub async fn delete_subnet(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("subnets/{id}"), &[])
            .await
    }

    /// Creates a port from Neutron's own fields, e.g. `{"network_id": …, "name": …}`.
    pub async fn create_port(&self, fields: Value) -> Result<Port> {
        self.client
            .post_one(Service::Network, "ports", "port", &fields)
            .await
    }

    /// One port by id.
    pub async fn port(&self, id: &str) -> Result<Port> {
        self.client
            .get_one(Service::Network, &format!("ports/{id}"), "port")
            .await
    }

    /// Replaces a port's allowed address pairs.
    pub async fn set_allowed_address_pairs(&self, port_id: &str, pairs: &[AddressPair]) -> Result<Port> {
        self.client
            .put_one(
                Service::Network,
                &format!("ports/{port_id}"),
                "port",
                json!({ "allowed_address_pairs": pairs }),
            )
            .await
    }

    /// Replaces a port's security groups, only if the port is still at `revision` (Neutron's
    /// `If-Match`; a port changed meanwhile gives a 412 error, to re-read and retry).
    pub async fn set_port_security_groups(&self, port: &Port, groups: &[String]) -> Result<Port> {
        let body = json!({ "port": { "security_groups": groups } });
        let path = format!("ports/{}", port.id);
        let v: Value = self
            .client
            .call(
                Service::Network,
                Method::PUT,
                &path,
                Req {
                    body: Some(&body),
                    if_match: port.revision_number.map(|r| format!("revision_number={r}")),
                    ..Req::default()
                },
            )
            .await?;
        crate::client::unwrap_key(Service::Network, Method::PUT, &path, v, "port")
    }

    /// Adds routes to a router in one atomic call (`extraroute-atomic`); routes it has already
    /// are left as they are. Returns the router's routes afterwards.
    pub async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Vec<Route>> {
        let r: Router = self
            .client
            .put_one(
                Service::Network,
                &format!("routers/{router_id}/add_extraroutes"),
                "router",
                json!({ "routes": routes }),
            )
            .await?;
        Ok(r.routes)
    }

    /// Removes routes from a router in one atomic call (`extraroute-atomic`); routes it does
    /// not have are ignored. Returns the router's routes afterwards.
    pub async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Vec<Route>> {
        let r: Router = self
            .client
            .put_one(
                Service::Network,
                &format!("routers/{router_id}/remove_extraroutes"),
                "router",
                json!({ "routes": routes }),
            )
            .await?;
        Ok(r.routes)
    }

    /// Adds and removes routes where `extraroute-atomic` is missing: a read-modify-write of the
    /// whole route table, serialised per router within this process (routes others add
    /// between the read and the write can still be lost: that is why atomic is preferred).
    pub async fn update_routes_serially(
        &self,
        router_id: &str,
        add: &[Route],
        remove: &[Route],
    ) -> Result<Vec<Route>> {
        let lock = self.client.route_lock(router_id);
        let _held = lock.lock().await;
        let mut routes = self.router(router_id).await?.routes;
        routes.retain(|r| !remove.contains(r));
        for r in add {
            if !routes.contains(r) {
                routes.push(r.clone());
            }
        }
        let r: Router = self
            .client
            .put_one(
                Service::Network,
                &format!("routers/{router_id}"),
                "router",
                json!({ "routes": routes }),
            )
            .await?;
        Ok(r.routes)
    }

    /// Allocates a floating IP from `fields`, e.g. `{"floating_network_id": …, "description": …}`.
    pub async fn create_floating_ip(&self, fields: Value) -> Result<FloatingIp> {
        self.client
            .post_one(Service::Network, "floatingips", "floatingip", &fields)
            .await
    }

    /// One floating IP by id.
    pub async fn floating_ip(&self, id: &str) -> Result<FloatingIp> {
        self.client
            .get_one(Service::Network, &format!("floatingips/{id}"), "floatingip")
            .await
    }

    /// Binds a floating IP to a port, or unbinds it with `None`.
    pub async fn associate_floating_ip(&self, id: &str, port_id: Option<&str>) -> Result<FloatingIp> {
        self.client
            .put_one(
                Service::Network,
                &format!("floatingips/{id}"),
                "floatingip",
                json!({ "port_id": port_id }),
            )
            .await
    }

    /// Releases a floating IP. One that is gone is no error.
    pub async fn delete_floating_ip(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("floatingips/{id}"), &[])
            .await
    }

    /// Security groups matching the query.
    pub async fn security_groups(&self, query: &[(&str, String)]) -> Result<Vec<SecurityGroup>> {
        self.client
            .list_all(Service::Network, "security-groups", "security_groups", query)
            .await
    }

    /// Creates a security group (Neutron adds its default egress rules).
    pub async fn create_security_group(&self, name: &str, description: &str) -> Result<SecurityGroup> {
        self.client
            .post_one(
                Service::Network,
                "security-groups",
                "security_group",
                &json!({ "name": name, "description": description }),
            )
            .await
    }

    /// One security group by id.
    pub async fn security_group(&self, id: &str) -> Result<SecurityGroup> {
        self.client
            .get_one(
                Service::Network,
                &format!("security-groups/{id}"),
                "security_group",
            )
            .await
    }

    /// Deletes a security group. One that is gone is no error.
    pub async fn delete_security_group(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("security-groups/{id}"), &[])
            .await
    }

    /// Adds a rule from Neutron's own fields (`security_group_id`, `direction`, `protocol`, …).
    pub async fn create_security_group_rule(&self, fields: Value) -> Result<SecurityGroupRule> {
        self.client
            .post_one(
                Service::Network,
                "security-group-rules",
                "security_group_rule",
                &fields,
            )
            .await
    }

    /// Deletes a rule. One that is gone is no error.
    pub async fn delete_security_group_rule(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("security-group-rules/{id}"), &[])
            .await
    }

    /// Replaces the tags of a resource, e.g. `("floatingips", id, ["a", "b"])`.
    pub async fn set_tags(&self, collection: &str, id: &str, tags: &[String]) -> Result<()> {
        let body = json!({ "tags": tags });
        self.client
            .call_empty(
                Service::Network,
                Method::PUT,
                &format!("{collection}/{id}/tags"),
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await
    }

    /// Adds one tag to a resource.
    pub async fn add_tag(&self, collection: &str, id: &str, tag: &str) -> Result<()> {
        self.client
            .call_empty(
                Service::Network,
                Method::PUT,
                &format!("{collection}/{id}/tags/{tag}"),
                Req::default(),
            )
            .await
    }

    /// Removes one tag from a resource. A missing tag is no error.
    pub async fn remove_tag(&self, collection: &str, id: &str, tag: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::Network, &format!("{collection}/{id}/tags/{tag}"), &[])
            .await
    }
}
