//! Glance: finding images.

use serde::Deserialize;

use crate::{Client, Result, client::Service};

/// An image.
#[derive(Debug, Clone, Deserialize)]
pub struct Image {
    /// The image's id.
    pub id: String,
    /// The image's name.
    #[serde(default)]
    pub name: Option<String>,
    /// `active` once it can be booted.
    pub status: String,
}

impl Client {
    /// Images with exactly this name.
    pub async fn images_named(&self, name: &str) -> Result<Vec<Image>> {
        self.list_all(Service::Image, "images", "images", &[("name", name.to_owned())])
            .await
    }
}
