//! An async OpenStack client for berth.
//!
//! One [`Client`] logs in to Keystone v3 once, shares its token between all callers, finds each
//! service in the catalog and speaks to Nova ([`compute`]), Neutron ([`network`]), Octavia
//! ([`load_balancer`]) and Glance ([`image`]). Every call is bounded in time, retried on the
//! faults that are worth retrying (see [`client`]) and fails with an [`Error`] that names the
//! service, method, path, status and OpenStack's own message. Secrets never appear in `Debug`
//! output or errors ([`Secret`]).

pub mod auth;
pub mod block_storage;
pub mod catalog;
pub mod client;
pub mod compute;
mod error;
pub mod identity;
pub mod image;
pub mod load_balancer;
pub mod metrics;
pub mod network;
mod secret;

pub use auth::{AuthMethod, Credentials, Scope};
pub use catalog::{Catalog, Interface};
pub use client::{Client, ClientOptions, TlsOptions};
pub use error::{Error, Result};
pub use secret::Secret;

/// Installs rustls' `ring` crypto provider as the process default.
///
/// Call it first thing in every binary: the HTTP clients (reqwest for OpenStack, kube for
/// Kubernetes) then share one provider. Calling it again is harmless.
pub fn install_crypto_provider() {
    // An error means a provider is installed already, which is what we want.
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}
