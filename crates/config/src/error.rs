//! The error and warning types of the configuration.

use std::{fmt, path::PathBuf};

/// A configuration that cannot be used.
///
/// Every variant names where the problem is, so the message alone lets a user fix it. Values
/// of secret keys (passwords, secrets, tokens) are never part of a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A line is not INI.
    #[error("{}:{line}: {reason}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A value is not one the key accepts.
    #[error("{0}")]
    InvalidValue(Box<InvalidValue>),
    /// The settings do not fit together (e.g. a user name without a domain).
    #[error("{}: {reason}", path.display())]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// What is missing or conflicting.
        reason: String,
    },
    /// `clouds.yaml` could not be used.
    #[error("{}: {reason}", path.display())]
    CloudsYaml {
        /// The clouds.yaml file (or the places searched).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Where a refused value is, and what the key accepts instead.
#[derive(Debug)]
pub struct InvalidValue {
    /// The file.
    pub path: PathBuf,
    /// The line (1-based).
    pub line: usize,
    /// The section, e.g. `LoadBalancer`.
    pub section: String,
    /// The key.
    pub key: String,
    /// The value as written (`<redacted>` for secrets).
    pub value: String,
    /// Why it is refused.
    pub reason: String,
    /// What the key accepts.
    pub accepted: String,
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: [{}] {} = {}: {}; accepted: {}",
            self.path.display(),
            self.line,
            self.section,
            self.key,
            self.value,
            self.reason,
            self.accepted
        )
    }
}

/// Something in the configuration that is ignored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The file.
    pub path: PathBuf,
    /// The line (1-based).
    pub line: usize,
    /// What is ignored.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
    }
}
