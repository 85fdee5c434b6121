//! Cinder: volumes.

use serde::Deserialize;

use crate::{Client, Result, client::Service};

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
}

impl Client {
    /// Volumes (with details) matching the query.
    pub async fn volumes(&self, query: &[(&str, String)]) -> Result<Vec<Volume>> {
        self.list_all(Service::BlockStorage, "volumes/detail", "volumes", query)
            .await
    }
}
