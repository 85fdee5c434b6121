//! berth's configuration.
//!
//! - [`cloud_conf`]: the `cloud.conf` INI file of openstack-cloud-controller-manager, every key of
//!   its sections with upstream's defaults. Unlike upstream, an unknown key is a [`Warning`]
//!   naming the file, line and the closest known key, and a bad value is an [`Error`] naming the
//!   file, line, key and the accepted values.
//! - [`clouds_yaml`]: `clouds.yaml`, used when `use-clouds = true` (explicit keys win).
//! - [`env`]: the `OS_*` variables, defaults under the file as upstream reads them.
//!
//! [`CloudConfig::credentials`] turns the `[Global]` section into the OpenStack client's
//! credentials and options.

pub mod cloud_conf;
pub mod clouds_yaml;
pub mod env;
mod error;
mod ini;

pub use cloud_conf::CloudConfig;
pub use error::{Error, InvalidValue, Warning};
