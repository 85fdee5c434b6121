//! Nova: servers and flavors.

use std::{collections::BTreeMap, time::Duration};

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    Client, Error, Result,
    client::{Req, Service},
};

/// A server, as `GET /servers/{id}` shows it (microversion 2.47).
#[derive(Debug, Clone, Deserialize)]
pub struct Server {
    /// The server's id.
    pub id: String,
    /// The server's name.
    pub name: String,
    /// `ACTIVE`, `SHUTOFF`, `BUILD`, `ERROR`, …
    pub status: String,
    /// Addresses by network name.
    #[serde(default)]
    pub addresses: BTreeMap<String, Vec<ServerAddress>>,
    /// The flavor, embedded since microversion 2.47.
    #[serde(default)]
    pub flavor: Option<EmbeddedFlavor>,
    /// The availability zone.
    #[serde(rename = "OS-EXT-AZ:availability_zone", default)]
    pub availability_zone: Option<String>,
    /// Metadata key/value pairs.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The operator-set public IPv4 address, or empty.
    #[serde(rename = "accessIPv4", default)]
    pub access_ipv4: String,
    /// The operator-set public IPv6 address, or empty.
    #[serde(rename = "accessIPv6", default)]
    pub access_ipv6: String,
    /// Why the server is in ERROR, if it is.
    #[serde(default)]
    pub fault: Option<Fault>,
}

/// One address of a server.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerAddress {
    /// The IP address.
    pub addr: String,
    /// 4 or 6.
    pub version: u8,
    /// `fixed` or `floating`.
    #[serde(rename = "OS-EXT-IPS:type", default)]
    pub kind: Option<String>,
    /// The port's MAC address.
    #[serde(rename = "OS-EXT-IPS-MAC:mac_addr", default)]
    pub mac_addr: Option<String>,
}

/// The flavor as embedded in a server.
#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddedFlavor {
    /// The flavor's name when the server was made.
    pub original_name: String,
}

/// A fault report.
#[derive(Debug, Clone, Deserialize)]
pub struct Fault {
    /// What went wrong.
    #[serde(default)]
    pub message: String,
}

/// A flavor.
#[derive(Debug, Clone, Deserialize)]
pub struct Flavor {
    /// The flavor's id.
    pub id: String,
    /// The flavor's name.
    pub name: String,
}

/// What a new server should be.
#[derive(Debug, Clone, Serialize)]
pub struct NewServer {
    /// Its name.
    pub name: String,
    /// The flavor's id.
    #[serde(rename = "flavorRef")]
    pub flavor_ref: String,
    /// The image's id.
    #[serde(rename = "imageRef")]
    pub image_ref: String,
    /// The networks to attach, as `{"uuid": …}` or `{"port": …}`.
    pub networks: Vec<Value>,
    /// The availability zone, if one is wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// Metadata key/value pairs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// Nova's API, borrowed from a [`Client`].
#[derive(Debug, Clone, Copy)]
pub struct Compute<'a> {
    client: &'a Client,
}

impl Client {
    /// Nova.
    pub fn compute(&self) -> Compute<'_> {
        Compute { client: self }
    }
}

#[derive(Deserialize)]
struct ServerBody {
    server: Server,
}

#[derive(Deserialize)]
struct CreatedBody {
    server: Created,
}

#[derive(Deserialize)]
struct Created {
    id: String,
}

impl Compute<'_> {
    /// Creates a server and returns its id (it starts in `BUILD`).
    pub async fn create_server(&self, server: &NewServer) -> Result<String> {
        let body = json!({ "server": server });
        let created: CreatedBody = self
            .client
            .call(
                Service::Compute,
                Method::POST,
                "servers",
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await?;
        Ok(created.server.id)
    }

    /// One server by id.
    pub async fn server(&self, id: &str) -> Result<Server> {
        let b: ServerBody = self
            .client
            .call(
                Service::Compute,
                Method::GET,
                &format!("servers/{id}"),
                Req::default(),
            )
            .await?;
        Ok(b.server)
    }

    /// Every server (with details) that matches the query, e.g. `[("name", "^node-1$")]`
    /// (Nova's `name` filter is a regular expression).
    pub async fn servers(&self, query: &[(&str, String)]) -> Result<Vec<Server>> {
        self.client
            .list_all(Service::Compute, "servers/detail", "servers", query)
            .await
    }

    /// Deletes a server. A server that is gone already is not an error.
    pub async fn delete_server(&self, id: &str) -> Result<()> {
        match self
            .client
            .call_empty(
                Service::Compute,
                Method::DELETE,
                &format!("servers/{id}"),
                Req::default(),
            )
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Stops (`os-stop`) or starts (`os-start`) a server.
    pub async fn server_action(&self, id: &str, action: &str) -> Result<()> {
        let body = json!({ action: Value::Null });
        self.client
            .call_empty(
                Service::Compute,
                Method::POST,
                &format!("servers/{id}/action"),
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await
    }

    /// Every flavor, with details.
    pub async fn flavors(&self) -> Result<Vec<Flavor>> {
        self.client
            .list_all(Service::Compute, "flavors/detail", "flavors", &[])
            .await
    }

    /// Waits until the server has `status`; an `ERROR` server fails at once.
    pub async fn wait_for_status(&self, id: &str, status: &str, timeout: Duration) -> Result<Server> {
        let started = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(200);
        loop {
            let s = self.server(id).await?;
            if s.status == status {
                return Ok(s);
            }
            if s.status == "ERROR" {
                return Err(Error::Failed {
                    what: format!("server {} ({id})", s.name),
                    state: s.status,
                    reason: s.fault.map(|f| format!(": {}", f.message)).unwrap_or_default(),
                });
            }
            if started.elapsed() >= timeout {
                return Err(Error::WaitTimeout {
                    what: format!("server {} ({id})", s.name),
                    wanted: status.into(),
                    waited_secs: timeout.as_secs(),
                    last: s.status,
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Waits until the server is gone (404).
    pub async fn wait_for_deletion(&self, id: &str, timeout: Duration) -> Result<()> {
        let started = tokio::time::Instant::now();
        loop {
            match self.server(id).await {
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
                Ok(s) if started.elapsed() >= timeout => {
                    return Err(Error::WaitTimeout {
                        what: format!("server {} ({id})", s.name),
                        wanted: "deleted".into(),
                        waited_secs: timeout.as_secs(),
                        last: s.status,
                    });
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }

    /// The availability zones that have compute hosts.
    pub async fn availability_zones(&self) -> Result<Vec<String>> {
        #[derive(Deserialize)]
        struct Body {
            #[serde(rename = "availabilityZoneInfo")]
            zones: Vec<Zone>,
        }
        #[derive(Deserialize)]
        struct Zone {
            #[serde(rename = "zoneName")]
            name: String,
        }
        let b: Body = self
            .client
            .call(
                Service::Compute,
                Method::GET,
                "os-availability-zone",
                Req::default(),
            )
            .await?;
        Ok(b.zones.into_iter().map(|z| z.name).collect())
    }

    /// The server's network interfaces (`os-interface`).
    pub async fn interface_attachments(&self, server_id: &str) -> Result<Vec<InterfaceAttachment>> {
        self.client
            .list_all(
                Service::Compute,
                &format!("servers/{server_id}/os-interface"),
                "interfaceAttachments",
                &[],
            )
            .await
    }

    /// The volumes attached to the server.
    pub async fn volume_attachments(&self, server_id: &str) -> Result<Vec<VolumeAttachment>> {
        self.client
            .list_all(
                Service::Compute,
                &format!("servers/{server_id}/os-volume_attachments"),
                "volumeAttachments",
                &[],
            )
            .await
    }

    /// Attaches a volume to the server; the volume goes `attaching`, then `in-use`.
    pub async fn attach_volume(&self, server_id: &str, volume_id: &str) -> Result<VolumeAttachment> {
        #[derive(Deserialize)]
        struct Body {
            #[serde(rename = "volumeAttachment")]
            attachment: VolumeAttachment,
        }
        let body = json!({ "volumeAttachment": { "volumeId": volume_id } });
        let b: Body = self
            .client
            .call(
                Service::Compute,
                Method::POST,
                &format!("servers/{server_id}/os-volume_attachments"),
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await?;
        Ok(b.attachment)
    }

    /// Detaches a volume from the server; the volume goes `detaching`, then `available`.
    pub async fn detach_volume(&self, server_id: &str, volume_id: &str) -> Result<()> {
        self.client
            .call_empty(
                Service::Compute,
                Method::DELETE,
                &format!("servers/{server_id}/os-volume_attachments/{volume_id}"),
                Req::default(),
            )
            .await
    }
}

/// A network interface of a server.
#[derive(Debug, Clone, Deserialize)]
pub struct InterfaceAttachment {
    /// The Neutron port.
    pub port_id: String,
    /// The network.
    pub net_id: String,
    /// `ACTIVE`, `DOWN`, …
    #[serde(default)]
    pub port_state: String,
    /// The MAC address.
    #[serde(default)]
    pub mac_addr: String,
}

/// A volume attached to a server.
#[derive(Debug, Clone, Deserialize)]
pub struct VolumeAttachment {
    /// The volume.
    #[serde(rename = "volumeId")]
    pub volume_id: String,
    /// The server.
    #[serde(rename = "serverId")]
    pub server_id: String,
    /// The device name Nova reports (not to be trusted for the real path).
    #[serde(default)]
    pub device: Option<String>,
}
