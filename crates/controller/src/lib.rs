//! berth's cloud controller: what `berth cloud-controller` runs.
//!
//! - [`nodes`]: initialisation (providerID, addresses, instance type, zone and region) and
//!   lifecycle (shutdown taint, deletion of Nodes whose server is gone) from Nova;
//! - [`routes`]: pod-network routes on a Neutron router, and the pod CIDRs on node ports'
//!   allowed address pairs;
//! - [`services`]: LoadBalancer Services on Octavia, with floating IPs, and the garbage
//!   collector for what their Services left behind;
//! - [`leader`]: leader election on a Lease, so replicas never both reconcile;
//! - [`process`]: the process: flags, clients, health and metrics endpoints, shutdown.

pub mod addresses;
pub mod events;
pub mod inventory;
pub mod leader;
mod metrics;
pub mod nodes;
pub mod process;
pub mod provider_id;
pub mod routes;
pub mod services;

pub use metrics::Metrics;

/// What can go wrong in a reconcile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An OpenStack call failed (never a reason to delete anything).
    #[error(transparent)]
    OpenStack(#[from] berth_openstack::Error),
    /// A Kubernetes call failed.
    #[error("Kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] berth_config::Error),
    /// A setting is not usable.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::OpenStack(_) => "openstack",
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(_) => "kubernetes",
            Error::Config(_) | Error::Invalid(_) => "config",
        }
    }
}
