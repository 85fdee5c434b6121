//! Octavia: load balancers.

use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;

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
    /// The VIP address.
    #[serde(default)]
    pub vip_address: String,
    /// The Neutron port that holds the VIP.
    #[serde(default)]
    pub vip_port_id: String,
    /// The VIP's subnet.
    #[serde(default)]
    pub vip_subnet_id: String,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `ERROR`, `DELETED`.
    pub provisioning_status: String,
    /// `ONLINE`, `OFFLINE`, …
    #[serde(default)]
    pub operating_status: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// What a new load balancer should be.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewLoadBalancer {
    /// Its name.
    pub name: String,
    /// Its description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The VIP's subnet.
    pub vip_subnet_id: String,
    /// Tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
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

#[derive(Deserialize)]
struct LbBody {
    loadbalancer: LoadBalancer,
}

impl LoadBalancing<'_> {
    /// Creates a load balancer (it starts in `PENDING_CREATE`).
    pub async fn create(&self, lb: &NewLoadBalancer) -> Result<LoadBalancer> {
        let body = json!({ "loadbalancer": lb });
        let b: LbBody = self
            .client
            .call(
                Service::LoadBalancer,
                Method::POST,
                "lbaas/loadbalancers",
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await?;
        Ok(b.loadbalancer)
    }

    /// One load balancer by id.
    pub async fn get(&self, id: &str) -> Result<LoadBalancer> {
        let b: LbBody = self
            .client
            .call(
                Service::LoadBalancer,
                Method::GET,
                &format!("lbaas/loadbalancers/{id}"),
                Req::default(),
            )
            .await?;
        Ok(b.loadbalancer)
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

    /// Deletes a load balancer and, with `cascade`, everything under it (listeners, pools,
    /// members, monitors). One that is gone already is not an error.
    pub async fn delete(&self, id: &str, cascade: bool) -> Result<()> {
        let query = [("cascade", cascade.to_string())];
        let r = self
            .client
            .call_empty(
                Service::LoadBalancer,
                Method::DELETE,
                &format!("lbaas/loadbalancers/{id}"),
                Req {
                    query: &query,
                    body: None,
                },
            )
            .await;
        match r {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
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
