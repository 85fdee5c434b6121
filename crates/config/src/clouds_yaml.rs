//! `clouds.yaml`: the OpenStack client configuration file.
//!
//! Looked for where the OpenStack SDKs look: `clouds-file` (or `OS_CLIENT_CONFIG_FILE`), then
//! `./clouds.yaml`, `~/.config/openstack/clouds.yaml`, `/etc/openstack/clouds.yaml`. The cloud
//! is `cloud` (or `OS_CLOUD`), or the only one in the file.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::Error;

/// The whole file.
#[derive(Debug, Deserialize)]
struct CloudsFile {
    #[serde(default)]
    clouds: BTreeMap<String, Cloud>,
}

/// One cloud.
#[derive(Debug, Clone, Default, Deserialize)]
#[allow(missing_docs)] // the fields are clouds.yaml's own keys
pub struct Cloud {
    #[serde(default)]
    pub auth: CloudAuth,
    #[serde(default)]
    pub auth_type: Option<String>,
    #[serde(default)]
    pub region_name: Option<String>,
    #[serde(default)]
    pub interface: Option<String>,
    #[serde(default)]
    pub verify: Option<bool>,
    #[serde(default)]
    pub cacert: Option<String>,
    /// `<service_type>_endpoint_override` keys (the SDKs' convention, `-` as `_`): a URL used
    /// instead of the catalog's for that service, e.g. behind a proxy.
    #[serde(default)]
    pub compute_endpoint_override: Option<String>,
    #[serde(default)]
    pub network_endpoint_override: Option<String>,
    #[serde(default)]
    pub load_balancer_endpoint_override: Option<String>,
    #[serde(default)]
    pub block_storage_endpoint_override: Option<String>,
    #[serde(default)]
    pub image_endpoint_override: Option<String>,
}

impl Cloud {
    /// The endpoint overrides it sets, by service type (`load-balancer`, not `load_balancer`).
    pub fn endpoint_overrides(&self) -> BTreeMap<String, String> {
        [
            ("compute", &self.compute_endpoint_override),
            ("network", &self.network_endpoint_override),
            ("load-balancer", &self.load_balancer_endpoint_override),
            ("block-storage", &self.block_storage_endpoint_override),
            ("image", &self.image_endpoint_override),
        ]
        .into_iter()
        .filter_map(|(service, url)| Some((service.to_owned(), url.clone()?)))
        .collect()
    }
}

/// A cloud's `auth:` block.
#[derive(Clone, Default, Deserialize)]
#[allow(missing_docs)] // the fields are clouds.yaml's own keys
pub struct CloudAuth {
    pub auth_url: Option<String>,
    pub user_id: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub project_id: Option<String>,
    pub project_name: Option<String>,
    pub tenant_id: Option<String>,
    pub tenant_name: Option<String>,
    pub project_domain_id: Option<String>,
    pub project_domain_name: Option<String>,
    pub user_domain_id: Option<String>,
    pub user_domain_name: Option<String>,
    pub domain_id: Option<String>,
    pub domain_name: Option<String>,
    pub application_credential_id: Option<String>,
    pub application_credential_name: Option<String>,
    pub application_credential_secret: Option<String>,
    pub token: Option<String>,
    pub trust_id: Option<String>,
}

impl std::fmt::Debug for CloudAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("CloudAuth")
            .field("auth_url", &self.auth_url)
            .field("user_id", &self.user_id)
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("project_id", &self.project_id)
            .field("project_name", &self.project_name)
            .field("application_credential_id", &self.application_credential_id)
            .field("application_credential_name", &self.application_credential_name)
            .field(
                "application_credential_secret",
                &hidden(&self.application_credential_secret),
            )
            .field("token", &hidden(&self.token))
            .finish_non_exhaustive()
    }
}

/// The places searched when no file is named.
fn search_path() -> Vec<PathBuf> {
    let mut paths = vec![PathBuf::from("clouds.yaml")];
    if let Some(home) = std::env::var_os("HOME") {
        paths.push(Path::new(&home).join(".config/openstack/clouds.yaml"));
    }
    paths.push(PathBuf::from("/etc/openstack/clouds.yaml"));
    paths
}

/// Finds the file and the cloud in it.
pub fn find(
    file: Option<&Path>,
    cloud: Option<&str>,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<(PathBuf, Cloud), Error> {
    let path = match file
        .map(Path::to_path_buf)
        .or_else(|| var("OS_CLIENT_CONFIG_FILE").map(PathBuf::from))
    {
        Some(p) => p,
        None => search_path()
            .into_iter()
            .find(|p| p.exists())
            .ok_or_else(|| Error::CloudsYaml {
                path: PathBuf::from("clouds.yaml"),
                reason: format!(
                    "use-clouds is on but no clouds.yaml was found (searched {})",
                    search_path()
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?,
    };
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    let cloud_name = cloud.map(str::to_owned).or_else(|| var("OS_CLOUD"));
    let found = parse(&path, &text, cloud_name.as_deref())?;
    Ok((path, found))
}

/// Picks `cloud` (or the only cloud) out of a clouds.yaml text.
pub fn parse(path: &Path, text: &str, cloud: Option<&str>) -> Result<Cloud, Error> {
    let file: CloudsFile = serde_saphyr::from_str(text).map_err(|e| Error::CloudsYaml {
        path: path.to_owned(),
        reason: format!("not a clouds.yaml: {e}"),
    })?;
    let names = || file.clouds.keys().cloned().collect::<Vec<_>>().join(", ");
    match cloud {
        Some(name) => file.clouds.get(name).cloned().ok_or_else(|| Error::CloudsYaml {
            path: path.to_owned(),
            reason: format!("has no cloud {name:?} (it has: {})", names()),
        }),
        None if file.clouds.len() == 1 => Ok(file.clouds.into_values().next().unwrap_or_default()),
        None => Err(Error::CloudsYaml {
            path: path.to_owned(),
            reason: format!(
                "holds several clouds ({}): set `cloud` in [Global] or OS_CLOUD",
                names()
            ),
        }),
    }
}
