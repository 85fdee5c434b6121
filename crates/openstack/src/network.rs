//! Neutron: networks, subnets, ports, routers and floating IPs.

use reqwest::Method;
use serde::Deserialize;

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
        #[derive(Deserialize)]
        struct Body {
            router: Router,
        }
        let b: Body = self
            .client
            .call(
                Service::Network,
                Method::GET,
                &format!("routers/{id}"),
                Req::default(),
            )
            .await?;
        Ok(b.router)
    }

    /// One subnet by id.
    pub async fn subnet(&self, id: &str) -> Result<Subnet> {
        #[derive(Deserialize)]
        struct Body {
            subnet: Subnet,
        }
        let b: Body = self
            .client
            .call(
                Service::Network,
                Method::GET,
                &format!("subnets/{id}"),
                Req::default(),
            )
            .await?;
        Ok(b.subnet)
    }

    /// One network by id.
    pub async fn network(&self, id: &str) -> Result<Network> {
        #[derive(Deserialize)]
        struct Body {
            network: Network,
        }
        let b: Body = self
            .client
            .call(
                Service::Network,
                Method::GET,
                &format!("networks/{id}"),
                Req::default(),
            )
            .await?;
        Ok(b.network)
    }

    /// Deletes a port. A port that is gone already is not an error.
    pub async fn delete_port(&self, id: &str) -> Result<()> {
        match self
            .client
            .call_empty(
                Service::Network,
                Method::DELETE,
                &format!("ports/{id}"),
                Req::default(),
            )
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }
}
