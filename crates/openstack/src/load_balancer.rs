//! Octavia: load balancers and their tree (listeners, pools, members, health monitors).
//!
//! A whole tree can be made in one call ([`NewLoadBalancer::listeners`], "fully populated"),
//! members of a pool replaced in one call ([`LoadBalancing::batch_update_members`]), and the
//! tree deleted in one call (`cascade`). A 409 while an object is `PENDING_*` is retried by the
//! client (see [`crate::client`]).

use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    Client, Error, Result,
    client::{Req, Service},
};

/// A load balancer.
#[derive(Debug, Clone, Deserialize)]
pub struct LoadBalancer {
    /// The load balancer's id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// The VIP address.
    #[serde(default)]
    pub vip_address: String,
    /// The Neutron port that holds the VIP.
    #[serde(default)]
    pub vip_port_id: String,
    /// The VIP's subnet.
    #[serde(default)]
    pub vip_subnet_id: String,
    /// The VIP's network.
    #[serde(default)]
    pub vip_network_id: String,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `ERROR`, `DELETED`.
    pub provisioning_status: String,
    /// `ONLINE`, `OFFLINE`, …
    #[serde(default)]
    pub operating_status: String,
    /// Its listeners' ids.
    #[serde(default)]
    pub listeners: Vec<IdRef>,
    /// Its pools' ids.
    #[serde(default)]
    pub pools: Vec<IdRef>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A reference to a child object.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct IdRef {
    /// Its id.
    pub id: String,
}

/// A listener.
#[derive(Debug, Clone, Deserialize)]
pub struct Listener {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP`, `HTTP`, …
    pub protocol: String,
    /// The port it listens on.
    pub protocol_port: u16,
    /// Its default pool.
    #[serde(default)]
    pub default_pool_id: Option<String>,
    /// The most connections it takes (-1: no limit).
    #[serde(default)]
    pub connection_limit: i64,
    /// The source CIDRs allowed (empty: everyone).
    #[serde(default)]
    pub allowed_cidrs: Option<Vec<String>>,
    /// Milliseconds of client inactivity.
    #[serde(default)]
    pub timeout_client_data: Option<u32>,
    /// Milliseconds to connect to a member.
    #[serde(default)]
    pub timeout_member_connect: Option<u32>,
    /// Milliseconds of member inactivity.
    #[serde(default)]
    pub timeout_member_data: Option<u32>,
    /// Milliseconds to wait for more TCP data.
    #[serde(default)]
    pub timeout_tcp_inspect: Option<u32>,
    /// Headers inserted, e.g. `{"X-Forwarded-For": "true"}`.
    #[serde(default)]
    pub insert_headers: Option<Value>,
    /// `ACTIVE`, `PENDING_*`, `ERROR`.
    #[serde(default)]
    pub provisioning_status: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A load balancer with its whole tree, as a fully populated create answers it.
#[derive(Debug, Clone)]
pub struct LoadBalancerTree {
    /// The load balancer.
    pub loadbalancer: LoadBalancer,
    /// Its listeners.
    pub listeners: Vec<Listener>,
    /// Its pools, with their members and monitors.
    pub pools: Vec<PoolTree>,
}

/// A pool with its members and health monitor.
#[derive(Debug, Clone)]
pub struct PoolTree {
    /// The pool.
    pub pool: Pool,
    /// Its members.
    pub members: Vec<Member>,
    /// Its health monitor.
    pub healthmonitor: Option<HealthMonitor>,
}

impl LoadBalancerTree {
    /// Reads Octavia's full answer: the children are whole objects, not only ids.
    fn from_value(v: &Value) -> std::result::Result<Self, serde_json::Error> {
        let field = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
        let loadbalancer: LoadBalancer = serde_json::from_value(v.clone())?;
        let listeners: Vec<Listener> = match field(v, "listeners") {
            Value::Null => Vec::new(),
            l => serde_json::from_value(l)?,
        };
        let mut pools = Vec::new();
        if let Some(items) = v.get("pools").and_then(Value::as_array) {
            for p in items {
                pools.push(PoolTree {
                    pool: serde_json::from_value(p.clone())?,
                    members: match field(p, "members") {
                        Value::Null => Vec::new(),
                        m => serde_json::from_value(m)?,
                    },
                    healthmonitor: match field(p, "healthmonitor") {
                        Value::Null => None,
                        m => Some(serde_json::from_value(m)?),
                    },
                });
            }
        }
        Ok(Self {
            loadbalancer,
            listeners,
            pools,
        })
    }
}

/// A pool.
#[derive(Debug, Clone, Deserialize)]
pub struct Pool {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP`, `PROXY`, …
    pub protocol: String,
    /// `ROUND_ROBIN`, `LEAST_CONNECTIONS`, `SOURCE_IP`, `SOURCE_IP_PORT`.
    pub lb_algorithm: String,
    /// Its members' ids.
    #[serde(default)]
    pub members: Vec<IdRef>,
    /// Its health monitor.
    #[serde(default)]
    pub healthmonitor_id: Option<String>,
    /// Session persistence, e.g. `{"type": "SOURCE_IP"}`.
    #[serde(default)]
    pub session_persistence: Option<Value>,
    /// `ACTIVE`, `PENDING_*`, `ERROR`.
    #[serde(default)]
    pub provisioning_status: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A member of a pool.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// The backend's address.
    pub address: String,
    /// The backend's port.
    pub protocol_port: u16,
    /// The subnet the address is on.
    #[serde(default)]
    pub subnet_id: Option<String>,
    /// The port health checks go to, if not `protocol_port`.
    #[serde(default)]
    pub monitor_port: Option<u16>,
    /// `ACTIVE`, `PENDING_*`, `ERROR`.
    #[serde(default)]
    pub provisioning_status: String,
}

/// A health monitor.
#[derive(Debug, Clone, Deserialize)]
pub struct HealthMonitor {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP-CONNECT`, `HTTP`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds between checks.
    pub delay: u32,
    /// Seconds a check may take.
    pub timeout: u32,
    /// Successes before a member is up.
    pub max_retries: u32,
    /// Failures before a member is down.
    #[serde(default)]
    pub max_retries_down: u32,
    /// The HTTP path checked.
    #[serde(default)]
    pub url_path: Option<String>,
    /// The pool it checks.
    #[serde(default)]
    pub pools: Vec<IdRef>,
}

/// What a new load balancer should be, with its tree when `listeners` is not empty.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewLoadBalancer {
    /// Its name.
    pub name: String,
    /// Its description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The VIP's subnet.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub vip_subnet_id: String,
    /// The VIP's network (Octavia picks a subnet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vip_network_id: Option<String>,
    /// A port to use as the VIP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vip_port_id: Option<String>,
    /// A fixed VIP address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vip_address: Option<String>,
    /// An Octavia flavor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flavor_id: Option<String>,
    /// An Octavia availability zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// The provider (`amphora`, `ovn`, …); Octavia's default when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Listeners made in the same call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<NewListener>,
}

/// A new listener, alone or inside a [`NewLoadBalancer`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewListener {
    /// Its name.
    pub name: String,
    /// `TCP`, `UDP`, `HTTP`, …
    pub protocol: String,
    /// The port.
    pub protocol_port: u16,
    /// The load balancer, when made alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loadbalancer_id: Option<String>,
    /// The most connections (-1: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_limit: Option<i64>,
    /// Source CIDRs allowed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_cidrs: Vec<String>,
    /// Milliseconds of client inactivity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_client_data: Option<u32>,
    /// Milliseconds to connect to a member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_member_connect: Option<u32>,
    /// Milliseconds of member inactivity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_member_data: Option<u32>,
    /// Milliseconds to wait for more TCP data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_tcp_inspect: Option<u32>,
    /// Headers to insert, e.g. `{"X-Forwarded-For": "true"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insert_headers: Option<Value>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Its default pool, made in the same call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_pool: Option<NewPool>,
}

/// A new pool, alone or inside a [`NewListener`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewPool {
    /// Its name.
    pub name: String,
    /// `TCP`, `UDP`, `PROXY`, …
    pub protocol: String,
    /// `ROUND_ROBIN`, `LEAST_CONNECTIONS`, `SOURCE_IP`, `SOURCE_IP_PORT`.
    pub lb_algorithm: String,
    /// The listener, when made alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener_id: Option<String>,
    /// Session persistence, e.g. `{"type": "SOURCE_IP"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<Value>,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Members made in the same call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<NewMember>,
    /// A health monitor made in the same call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthmonitor: Option<NewHealthMonitor>,
}

/// A new member (also the items of a batch update).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct NewMember {
    /// Its name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The backend's address.
    pub address: String,
    /// The backend's port.
    pub protocol_port: u16,
    /// The subnet the address is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// The port health checks go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitor_port: Option<u16>,
}

/// A new health monitor, alone or inside a [`NewPool`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewHealthMonitor {
    /// Its name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `TCP`, `UDP-CONNECT`, `HTTP`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds between checks.
    pub delay: u32,
    /// Seconds a check may take.
    pub timeout: u32,
    /// Successes before a member is up.
    pub max_retries: u32,
    /// Failures before a member is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries_down: Option<u32>,
    /// The HTTP path to check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_path: Option<String>,
    /// The pool, when made alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<String>,
}

/// Octavia's API, borrowed from a [`Client`].
#[derive(Debug, Clone, Copy)]
pub struct LoadBalancing<'a> {
    client: &'a Client,
}

impl Client {
    /// Octavia.
    pub fn load_balancer(&self) -> LoadBalancing<'_> {
        LoadBalancing { client: self }
    }
}

impl LoadBalancing<'_> {
    /// Creates a load balancer, with its whole tree when `lb.listeners` is set, in one call
    /// (it starts in `PENDING_CREATE`).
    pub async fn create(&self, lb: &NewLoadBalancer) -> Result<LoadBalancer> {
        self.client
            .post_one(Service::LoadBalancer, "lbaas/loadbalancers", "loadbalancer", lb)
            .await
    }

    /// Creates a load balancer with its whole tree in one call and returns the tree as
    /// Octavia made it (ids of every listener, pool, member and monitor included).
    pub async fn create_tree(&self, lb: &NewLoadBalancer) -> Result<LoadBalancerTree> {
        let v: Value = self
            .client
            .post_one(Service::LoadBalancer, "lbaas/loadbalancers", "loadbalancer", lb)
            .await?;
        LoadBalancerTree::from_value(&v).map_err(|e| Error::Invalid {
            what: "Octavia's answer to a load balancer create",
            value: String::new(),
            reason: e.to_string(),
        })
    }

    /// One load balancer by id.
    pub async fn get(&self, id: &str) -> Result<LoadBalancer> {
        self.client
            .get_one(
                Service::LoadBalancer,
                &format!("lbaas/loadbalancers/{id}"),
                "loadbalancer",
            )
            .await
    }

    /// Load balancers matching the query, e.g. `[("name", "x")]` or `[("tags", "a,b")]`.
    pub async fn list(&self, query: &[(&str, String)]) -> Result<Vec<LoadBalancer>> {
        self.client
            .list_all(
                Service::LoadBalancer,
                "lbaas/loadbalancers",
                "loadbalancers",
                query,
            )
            .await
    }

    /// Changes a load balancer's fields, e.g. `{"tags": […], "description": …}`.
    pub async fn update(&self, id: &str, fields: Value) -> Result<LoadBalancer> {
        self.client
            .put_one(
                Service::LoadBalancer,
                &format!("lbaas/loadbalancers/{id}"),
                "loadbalancer",
                fields,
            )
            .await
    }

    /// Deletes a load balancer and, with `cascade`, everything under it (listeners, pools,
    /// members, monitors). One that is gone already is not an error.
    pub async fn delete(&self, id: &str, cascade: bool) -> Result<()> {
        let query = [("cascade", cascade.to_string())];
        self.client
            .delete_if_exists(
                Service::LoadBalancer,
                &format!("lbaas/loadbalancers/{id}"),
                &query,
            )
            .await
    }

    /// The status tree: the load balancer with its listeners, pools, members and monitors.
    pub async fn status_tree(&self, id: &str) -> Result<Value> {
        let v: Value = self
            .client
            .call(
                Service::LoadBalancer,
                Method::GET,
                &format!("lbaas/loadbalancers/{id}/status"),
                Req::default(),
            )
            .await?;
        Ok(v.get("statuses")
            .and_then(|s| s.get("loadbalancer"))
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// Listeners matching the query, e.g. `[("loadbalancer_id", id)]`.
    pub async fn listeners(&self, query: &[(&str, String)]) -> Result<Vec<Listener>> {
        self.client
            .list_all(Service::LoadBalancer, "lbaas/listeners", "listeners", query)
            .await
    }

    /// Creates a listener on a load balancer.
    pub async fn create_listener(&self, listener: &NewListener) -> Result<Listener> {
        self.client
            .post_one(Service::LoadBalancer, "lbaas/listeners", "listener", listener)
            .await
    }

    /// Changes a listener's fields, e.g. `{"connection_limit": 100}`.
    pub async fn update_listener(&self, id: &str, fields: Value) -> Result<Listener> {
        self.client
            .put_one(
                Service::LoadBalancer,
                &format!("lbaas/listeners/{id}"),
                "listener",
                fields,
            )
            .await
    }

    /// Deletes a listener. One that is gone is no error.
    pub async fn delete_listener(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::LoadBalancer, &format!("lbaas/listeners/{id}"), &[])
            .await
    }

    /// Pools matching the query, e.g. `[("loadbalancer_id", id)]`.
    pub async fn pools(&self, query: &[(&str, String)]) -> Result<Vec<Pool>> {
        self.client
            .list_all(Service::LoadBalancer, "lbaas/pools", "pools", query)
            .await
    }

    /// Creates a pool for a listener.
    pub async fn create_pool(&self, pool: &NewPool) -> Result<Pool> {
        self.client
            .post_one(Service::LoadBalancer, "lbaas/pools", "pool", pool)
            .await
    }

    /// Changes a pool's fields, e.g. `{"lb_algorithm": "SOURCE_IP"}`.
    pub async fn update_pool(&self, id: &str, fields: Value) -> Result<Pool> {
        self.client
            .put_one(
                Service::LoadBalancer,
                &format!("lbaas/pools/{id}"),
                "pool",
                fields,
            )
            .await
    }

    /// Deletes a pool. One that is gone is no error.
    pub async fn delete_pool(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::LoadBalancer, &format!("lbaas/pools/{id}"), &[])
            .await
    }

    /// A pool's members.
    pub async fn members(&self, pool_id: &str) -> Result<Vec<Member>> {
        self.client
            .list_all(
                Service::LoadBalancer,
                &format!("lbaas/pools/{pool_id}/members"),
                "members",
                &[],
            )
            .await
    }

    /// Replaces a pool's members with `members` in one call: Octavia adds, updates and removes
    /// what differs (matching on address and port).
    pub async fn batch_update_members(&self, pool_id: &str, members: &[NewMember]) -> Result<()> {
        let body = json!({ "members": members });
        self.client
            .call_empty(
                Service::LoadBalancer,
                Method::PUT,
                &format!("lbaas/pools/{pool_id}/members"),
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await
    }

    /// Creates a health monitor for a pool.
    pub async fn create_health_monitor(&self, monitor: &NewHealthMonitor) -> Result<HealthMonitor> {
        self.client
            .post_one(
                Service::LoadBalancer,
                "lbaas/healthmonitors",
                "healthmonitor",
                monitor,
            )
            .await
    }

    /// One health monitor by id.
    pub async fn health_monitor(&self, id: &str) -> Result<HealthMonitor> {
        self.client
            .get_one(
                Service::LoadBalancer,
                &format!("lbaas/healthmonitors/{id}"),
                "healthmonitor",
            )
            .await
    }

    /// Changes a health monitor's fields, e.g. `{"delay": 10}`.
    pub async fn update_health_monitor(&self, id: &str, fields: Value) -> Result<HealthMonitor> {
        self.client
            .put_one(
                Service::LoadBalancer,
                &format!("lbaas/healthmonitors/{id}"),
                "healthmonitor",
                fields,
            )
            .await
    }

    /// Deletes a health monitor. One that is gone is no error.
    pub async fn delete_health_monitor(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::LoadBalancer, &format!("lbaas/healthmonitors/{id}"), &[])
            .await
    }

    /// The newest API version Octavia offers, e.g. `(2, 27)`: features such as tags (2.5) and
    /// allowed CIDRs (2.12) depend on it.
    pub async fn api_version(&self) -> Result<(u32, u32)> {
        #[derive(Deserialize)]
        struct Versions {
            versions: Vec<Version>,
        }
        #[derive(Deserialize)]
        struct Version {
            id: String,
        }
        // The version list lives at the unversioned root of the endpoint.
        let base = self.client.endpoint(Service::LoadBalancer).await?;
        let root = base.join("..").map_err(|e| Error::Invalid {
            what: "load-balancer endpoint",
            value: base.to_string(),
            reason: e.to_string(),
        })?;
        let v: Versions = self
            .client
            .call(Service::LoadBalancer, Method::GET, root.as_str(), Req::default())
            .await?;
        v.versions
            .iter()
            .filter_map(|v| {
                let (major, minor) = v.id.trim_start_matches('v').split_once('.')?;
                Some((major.parse().ok()?, minor.parse().ok()?))
            })
            .max()
            .ok_or_else(|| Error::Invalid {
                what: "Octavia version list",
                value: root.to_string(),
                reason: "no version in it".into(),
            })
    }

    /// Waits until the load balancer is `ACTIVE`; `ERROR` fails at once.
    ///
    /// Polls with a capped, jittered backoff so many waiters do not poll in step.
    pub async fn wait_active(&self, id: &str, timeout: Duration) -> Result<LoadBalancer> {
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        loop {
            let lb = self.get(id).await?;
            match lb.provisioning_status.as_str() {
                "ACTIVE" => return Ok(lb),
                "ERROR" => {
                    return Err(Error::Failed {
                        what: format!("load balancer {} ({id})", lb.name),
                        state: lb.provisioning_status,
                        reason: String::new(),
                    });
                }
                _ if started.elapsed() >= timeout => {
                    return Err(Error::WaitTimeout {
                        what: format!("load balancer {} ({id})", lb.name),
                        wanted: "ACTIVE".into(),
                        waited_secs: timeout.as_secs(),
                        last: lb.provisioning_status,
                    });
                }
                _ => {}
            }
            attempt += 1;
            tokio::time::sleep(crate::client::backoff(attempt, Duration::from_secs(3), None) / 2).await;
        }
    }

    /// Waits until the load balancer is gone (404 or `DELETED`).
    pub async fn wait_deleted(&self, id: &str, timeout: Duration) -> Result<()> {
        let started = tokio::time::Instant::now();
        loop {
            match self.get(id).await {
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
                Ok(lb) if lb.provisioning_status == "DELETED" => return Ok(()),
                Ok(lb) if started.elapsed() >= timeout => {
                    return Err(Error::WaitTimeout {
                        what: format!("load balancer {} ({id})", lb.name),
                        wanted: "deleted".into(),
                        waited_secs: timeout.as_secs(),
                        last: lb.provisioning_status,
                    });
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }
}
