//! Reading the testbed's description (`$BERTH_TESTBED/testbed.json`) and making clients from it.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use berth_openstack::{
    Client, ClientOptions, Credentials, Secret,
    auth::{AuthMethod, DomainRef, NamedRef, Scope},
};
use serde::Deserialize;

/// One Keystone user of the testbed.
#[derive(Debug, Clone, Deserialize)]
pub struct CloudUser {
    /// The user name.
    pub username: String,
    /// The password (a throwaway test password; still never printed).
    #[serde(deserialize_with = "secret")]
    pub password: Secret,
    /// The project name.
    pub project_name: String,
    /// The user's and project's domain name.
    pub domain_name: String,
}

fn secret<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
    String::deserialize(d).map(Secret::new)
}

/// The ids of the demo project's cluster network.
#[derive(Debug, Clone, Deserialize)]
pub struct TenantIds {
    /// The demo project.
    pub project_id: String,
    /// `berth-net`.
    pub network_id: String,
    /// `berth-subnet` (10.0.0.0/24).
    pub subnet_id: String,
    /// `berth-router`.
    pub router_id: String,
    /// The external network `public`.
    pub public_network_id: String,
    /// Its subnet.
    pub public_subnet_id: String,
}

/// What `cargo xtask testbed up` wrote about the running testbed.
#[derive(Debug, Clone, Deserialize)]
pub struct Testbed {
    /// Keystone's URL.
    pub auth_url: String,
    /// The region.
    pub region: String,
    /// The cloud's admin.
    pub admin: CloudUser,
    /// A member of the `demo` project: what a cluster's cloud.conf would use.
    pub demo: CloudUser,
    /// The demo project's network.
    pub tenant: TenantIds,
    /// The availability zone of the fake compute host.
    pub availability_zone: String,
    /// The flavor for hollow nodes.
    pub flavor: String,
    /// The image for hollow nodes.
    pub image: String,
    /// An admin kubeconfig for the Kubernetes API.
    pub kubeconfig: PathBuf,
    /// A `cloud.conf` for the demo project.
    pub cloud_conf: PathBuf,
    /// The directory holding the testbed's state and logs.
    pub dir: PathBuf,
}

impl Testbed {
    /// The testbed description under `$BERTH_TESTBED` (default `/tmp/berth-testbed`).
    pub fn load() -> Result<Self> {
        let dir = std::env::var_os("BERTH_TESTBED")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp/berth-testbed"));
        Self::load_from(&dir.join("testbed.json"))
    }

    /// The testbed description in `path`.
    pub fn load_from(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read {}: is the testbed up? Start it with `cargo xtask testbed up`",
                path.display()
            )
        })?;
        let tb: Testbed = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a testbed description", path.display()))?;
        if !tb.kubeconfig.exists() {
            bail!(
                "{} names kubeconfig {}, which does not exist",
                path.display(),
                tb.kubeconfig.display()
            );
        }
        Ok(tb)
    }

    /// Password credentials of `user`, scoped to their project by names.
    pub fn credentials(&self, user: &CloudUser) -> Result<Credentials> {
        Ok(Credentials {
            auth_url: self.auth_url.parse().context("auth_url")?,
            method: AuthMethod::Password {
                user: NamedRef::Name {
                    name: user.username.clone(),
                    domain: DomainRef::Name(user.domain_name.clone()),
                },
                password: user.password.clone(),
            },
            scope: Scope::Project(NamedRef::Name {
                name: user.project_name.clone(),
                domain: DomainRef::Name(user.domain_name.clone()),
            }),
        })
    }

    /// An OpenStack client logged in as `user`.
    pub async fn openstack(&self, user: &CloudUser) -> Result<Client> {
        berth_openstack::install_crypto_provider();
        let options = ClientOptions {
            region: Some(self.region.clone()),
            user_agent: "berth-e2e".into(),
            ..ClientOptions::default()
        };
        Client::connect(self.credentials(user)?, options)
            .await
            .with_context(|| format!("logging in to the testbed's Keystone as {}", user.username))
    }

    /// An OpenStack client of the demo project's member (what a cluster uses).
    pub async fn openstack_demo(&self) -> Result<Client> {
        self.openstack(&self.demo).await
    }

    /// A Kubernetes client with the admin kubeconfig.
    pub async fn kube(&self) -> Result<kube::Client> {
        berth_openstack::install_crypto_provider();
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A server on the cluster network with the testbed's flavor and image, named `name`.
    pub async fn server_spec(
        &self,
        openstack: &Client,
        name: &str,
    ) -> Result<berth_openstack::compute::NewServer> {
        let flavor = openstack
            .compute()
            .flavors()
            .await?
            .into_iter()
            .find(|f| f.name == self.flavor)
            .with_context(|| format!("flavor {} not found", self.flavor))?;
        let image = openstack
            .images_named(&self.image)
            .await?
            .into_iter()
            .next()
            .with_context(|| format!("image {} not found", self.image))?;
        Ok(berth_openstack::compute::NewServer {
            name: name.to_owned(),
            flavor_ref: flavor.id,
            image_ref: image.id,
            networks: vec![serde_json::json!({ "uuid": self.tenant.network_id })],
            availability_zone: None,
            metadata: Default::default(),
        })
    }
}
