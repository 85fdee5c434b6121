//! The service catalog and endpoint selection.

use std::{fmt, str::FromStr};

use serde::Deserialize;

use crate::{Error, Result};

/// Which of a service's endpoints to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interface {
    /// The endpoint users reach (the default).
    #[default]
    Public,
    /// The endpoint inside the cloud's own network.
    Internal,
    /// The operator's endpoint.
    Admin,
}

impl Interface {
    /// The name Keystone uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Public => "public",
            Interface::Internal => "internal",
            Interface::Admin => "admin",
        }
    }
}

impl fmt::Display for Interface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Interface {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        // clouds.yaml and OS_INTERFACE also accept the `…URL` spellings of the old clients.
        match s.to_ascii_lowercase().trim_end_matches("url") {
            "public" => Ok(Interface::Public),
            "internal" => Ok(Interface::Internal),
            "admin" => Ok(Interface::Admin),
            _ => Err(Error::Invalid {
                what: "endpoint interface",
                value: s.to_owned(),
                reason: "accepted values are public, internal, admin".into(),
            }),
        }
    }
}

/// One service in the catalog.
#[derive(Debug, Clone, Deserialize)]
pub struct CatalogEntry {
    /// The service type, e.g. `compute`.
    #[serde(rename = "type")]
    pub service_type: String,
    /// The service name, e.g. `nova`.
    #[serde(default)]
    pub name: String,
    /// The service's endpoints.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
}

/// One endpoint of a service.
#[derive(Debug, Clone, Deserialize)]
pub struct Endpoint {
    /// `public`, `internal` or `admin`.
    pub interface: String,
    /// The region's id.
    #[serde(default)]
    pub region_id: Option<String>,
    /// The region (older Keystones).
    #[serde(default)]
    pub region: Option<String>,
    /// The base URL.
    pub url: String,
}

/// The catalog that came with a token.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: Vec<CatalogEntry>,
}

/// Service types that have had other names: the first one found is used.
fn aliases(service_type: &str) -> &[&str] {
    match service_type {
        "block-storage" => &["block-storage", "volumev3", "volume"],
        "load-balancer" => &["load-balancer", "octavia"],
        other => std::slice::from_ref(match other {
            "compute" => &"compute",
            "network" => &"network",
            "image" => &"image",
            "identity" => &"identity",
            _ => return &[],
        }),
    }
}

impl Catalog {
    /// A catalog of these entries.
    pub fn new(entries: Vec<CatalogEntry>) -> Self {
        Self { entries }
    }

    /// Every entry, as Keystone sent them.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// The URL of `service_type` on `interface`, in `region` when one is given.
    pub fn endpoint(&self, service_type: &str, interface: Interface, region: Option<&str>) -> Result<String> {
        let known = aliases(service_type);
        let types: Vec<&str> = if known.is_empty() {
            vec![service_type]
        } else {
            known.to_vec()
        };
        for t in types {
            let found = self
                .entries
                .iter()
                .filter(|e| e.service_type == t)
                .flat_map(|e| e.endpoints.iter())
                .find(|ep| {
                    ep.interface == interface.as_str()
                        && region.is_none_or(|r| {
                            ep.region_id.as_deref() == Some(r) || ep.region.as_deref() == Some(r)
                        })
                });
            if let Some(ep) = found {
                return Ok(ep.url.clone());
            }
        }
        let available = self
            .entries
            .iter()
            .flat_map(|e| {
                e.endpoints.iter().map(move |ep| {
                    format!(
                        "{}/{}/{}",
                        e.service_type,
                        ep.interface,
                        ep.region_id.as_deref().or(ep.region.as_deref()).unwrap_or("-")
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(Error::NoEndpoint {
            service_type: service_type.to_owned(),
            interface: interface.to_string(),
            region: region.map(|r| format!(" in region {r}")).unwrap_or_default(),
            available: if available.is_empty() {
                "nothing".into()
            } else {
                available
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let json = r#"[
          {"type": "compute", "name": "nova", "endpoints": [
            {"interface": "public", "region_id": "RegionOne", "url": "http://one/compute"},
            {"interface": "internal", "region_id": "RegionOne", "url": "http://one-int/compute"},
            {"interface": "public", "region_id": "RegionTwo", "url": "http://two/compute"}]},
          {"type": "volumev3", "name": "cinderv3", "endpoints": [
            {"interface": "public", "region": "RegionOne", "url": "http://one/volume"}]}
        ]"#;
        Catalog::new(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn selects_by_interface_and_region() {
        let c = catalog();
        assert_eq!(
            c.endpoint("compute", Interface::Public, Some("RegionTwo"))
                .unwrap(),
            "http://two/compute"
        );
        assert_eq!(
            c.endpoint("compute", Interface::Internal, Some("RegionOne"))
                .unwrap(),
            "http://one-int/compute"
        );
        assert_eq!(
            c.endpoint("compute", Interface::Public, None).unwrap(),
            "http://one/compute"
        );
    }

    #[test]
    fn block_storage_falls_back_to_volumev3() {
        assert_eq!(
            catalog()
                .endpoint("block-storage", Interface::Public, Some("RegionOne"))
                .unwrap(),
            "http://one/volume"
        );
    }

    #[test]
    fn a_missing_endpoint_says_what_exists() {
        let err = catalog()
            .endpoint("compute", Interface::Admin, Some("RegionOne"))
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("no admin endpoint of type compute in region RegionOne"),
            "{msg}"
        );
        assert!(msg.contains("compute/public/RegionTwo"), "{msg}");
    }

    #[test]
    fn interface_names_parse_with_old_spellings() {
        assert_eq!("internalURL".parse::<Interface>().unwrap(), Interface::Internal);
        assert!(
            "private"
                .parse::<Interface>()
                .unwrap_err()
                .to_string()
                .contains("public, internal, admin")
        );
    }
}
