//! The one error type of this crate.

use std::path::PathBuf;

/// What can go wrong in the webhook or the credential plugin.
///
/// No variant ever holds a token, password or secret: messages name files, URLs and users.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS reported.
        #[source]
        source: std::io::Error,
    },
    /// The serving certificate or key is not usable.
    #[error("TLS certificate {}: {reason}", path.display())]
    Tls {
        /// The certificate or key file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// An authorization policy could not be parsed; the previous one stays in force.
    #[error("invalid policy in {source_name}: {reason}")]
    Policy {
        /// Where the policy came from (a file path or `configmap ns/name`).
        source_name: String,
        /// What is wrong with it, with the rule's index.
        reason: String,
    },
    /// The sync configuration could not be parsed.
    #[error("invalid sync configuration in {source_name}: {reason}")]
    SyncConfig {
        /// Where it came from.
        source_name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Configuration (cloud.conf, clouds.yaml, `OS_*`) is missing or inconsistent.
    #[error(transparent)]
    Config(#[from] berth_config::Error),
    /// Keystone or the network failed.
    #[error(transparent)]
    OpenStack(#[from] berth_openstack::Error),
    /// Keystone refused the credentials (wrong password, unknown user or credential).
    #[error("Keystone at {auth_url} refused the credentials ({status}): {message}")]
    Refused {
        /// The Keystone URL.
        auth_url: String,
        /// The HTTP status.
        status: u16,
        /// Keystone's message.
        message: String,
    },
    /// The Kubernetes API failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// What the OS reported.
        #[source]
        source: std::io::Error,
    },
    /// A command-line value or an environment variable is not usable.
    #[error("{0}")]
    Usage(String),
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
