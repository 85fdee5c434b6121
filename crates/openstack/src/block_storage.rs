//! Cinder: volumes, snapshots, attachments and volume types.

use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    Client, Error, Result,
    client::{Req, Service},
};

/// A volume.
#[derive(Debug, Clone, Deserialize)]
pub struct Volume {
    /// The volume's id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
    /// `available`, `in-use`, `creating`, `error`, …
    pub status: String,
    /// Its size in GiB.
    pub size: u64,
    /// Its availability zone.
    #[serde(default)]
    pub availability_zone: Option<String>,
    /// Its type.
    #[serde(default)]
    pub volume_type: Option<String>,
    /// Where it is attached.
    #[serde(default)]
    pub attachments: Vec<VolumeAttachmentInfo>,
}

/// Where a volume is attached.
#[derive(Debug, Clone, Deserialize)]
pub struct VolumeAttachmentInfo {
    /// The server.
    pub server_id: String,
    /// The attachment's id.
    #[serde(default)]
    pub attachment_id: Option<String>,
}

/// A snapshot.
#[derive(Debug, Clone, Deserialize)]
pub struct Snapshot {
    /// Its id.
    pub id: String,
    /// The volume it is of.
    pub volume_id: String,
    /// `available`, `creating`, `error`, …
    pub status: String,
    /// Its size in GiB.
    pub size: u64,
}

/// A volume type.
#[derive(Debug, Clone, Deserialize)]
pub struct VolumeType {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// A Cinder attachment record (microversion 3.27).
#[derive(Debug, Clone, Deserialize)]
pub struct Attachment {
    /// Its id.
    pub id: String,
    /// The volume.
    pub volume_id: String,
    /// The server.
    #[serde(default)]
    pub instance: Option<String>,
    /// `attached`, `reserved`, …
    #[serde(default)]
    pub status: String,
}

/// Cinder's API, borrowed from a [`Client`].
#[derive(Debug, Clone, Copy)]
pub struct BlockStorage<'a> {
    client: &'a Client,
}

impl Client {
    /// Cinder.
    pub fn block_storage(&self) -> BlockStorage<'_> {
        BlockStorage { client: self }
    }

    /// Volumes (with details) matching the query.
    pub async fn volumes(&self, query: &[(&str, String)]) -> Result<Vec<Volume>> {
        self.block_storage().volumes(query).await
    }
}

impl BlockStorage<'_> {
    /// Volumes (with details) matching the query.
    pub async fn volumes(&self, query: &[(&str, String)]) -> Result<Vec<Volume>> {
        self.client
            .list_all(Service::BlockStorage, "volumes/detail", "volumes", query)
            .await
    }

    /// Creates a volume from Cinder's own fields, e.g. `{"size": 1, "name": …}`.
    pub async fn create_volume(&self, fields: Value) -> Result<Volume> {
        self.client
            .post_one(Service::BlockStorage, "volumes", "volume", &fields)
            .await
    }

    /// One volume by id.
    pub async fn volume(&self, id: &str) -> Result<Volume> {
        self.client
            .get_one(Service::BlockStorage, &format!("volumes/{id}"), "volume")
            .await
    }

    /// Deletes a volume. One that is gone is no error.
    pub async fn delete_volume(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::BlockStorage, &format!("volumes/{id}"), &[])
            .await
    }

    /// Grows a volume to `new_size` GiB.
    pub async fn extend_volume(&self, id: &str, new_size: u64) -> Result<()> {
        let body = json!({ "os-extend": { "new_size": new_size } });
        self.client
            .call_empty(
                Service::BlockStorage,
                Method::POST,
                &format!("volumes/{id}/action"),
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await
    }

    /// Creates a snapshot of a volume.
    pub async fn create_snapshot(&self, volume_id: &str, name: &str) -> Result<Snapshot> {
        self.client
            .post_one(
                Service::BlockStorage,
                "snapshots",
                "snapshot",
                &json!({ "volume_id": volume_id, "name": name }),
            )
            .await
    }

    /// Snapshots matching the query.
    pub async fn snapshots(&self, query: &[(&str, String)]) -> Result<Vec<Snapshot>> {
        self.client
            .list_all(Service::BlockStorage, "snapshots/detail", "snapshots", query)
            .await
    }

    /// Deletes a snapshot. One that is gone is no error.
    pub async fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.client
            .delete_if_exists(Service::BlockStorage, &format!("snapshots/{id}"), &[])
            .await
    }

    /// The volume types.
    pub async fn volume_types(&self) -> Result<Vec<VolumeType>> {
        self.client
            .list_all(Service::BlockStorage, "types", "volume_types", &[])
            .await
    }

    /// Attachment records matching the query, e.g. `[("volume_id", id)]`.
    pub async fn attachments(&self, query: &[(&str, String)]) -> Result<Vec<Attachment>> {
        self.client
            .list_all(Service::BlockStorage, "attachments/detail", "attachments", query)
            .await
    }

    /// Waits until the volume has `status`; `error*` fails at once.
    pub async fn wait_volume_status(&self, id: &str, status: &str, timeout: Duration) -> Result<Volume> {
        let started = tokio::time::Instant::now();
        loop {
            let v = self.volume(id).await?;
            if v.status == status {
                return Ok(v);
            }
            if v.status.starts_with("error") {
                return Err(Error::Failed {
                    what: format!("volume {id}"),
                    state: v.status,
                    reason: String::new(),
                });
            }
            if started.elapsed() >= timeout {
                return Err(Error::WaitTimeout {
                    what: format!("volume {id}"),
                    wanted: status.into(),
                    waited_secs: timeout.as_secs(),
                    last: v.status,
                });
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Waits until the volume is gone.
    pub async fn wait_volume_deleted(&self, id: &str, timeout: Duration) -> Result<()> {
        let started = tokio::time::Instant::now();
        loop {
            match self.volume(id).await {
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
                Ok(v) if started.elapsed() >= timeout => {
                    return Err(Error::WaitTimeout {
                        what: format!("volume {id}"),
                        wanted: "deleted".into(),
                        waited_secs: timeout.as_secs(),
                        last: v.status,
                    });
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }
}
