//! Keystone authentication and authorization for the Kubernetes API.
//!
//! - [`webhook`]: `berth keystone-webhook`, one HTTPS endpoint (`POST /webhook`) that answers
//!   kube-apiserver's TokenReviews ([`authn`]: Keystone token validation with a bounded cache)
//!   and SubjectAccessReviews ([`policy`]: upstream k8s-keystone-auth's policy formats), in
//!   both `v1` and `v1beta1` ([`review`]).
//! - [`login`]: `berth keystone-login`, the kubectl exec credential plugin with an on-disk
//!   token cache.
//! - [`sync`]: optional Keystone → Kubernetes mapping (role mappings, projects → namespaces,
//!   role assignments → RoleBindings).

pub mod authn;
mod error;
pub mod login;
pub mod metrics;
pub mod policy;
pub mod review;
pub mod server;
pub mod sync;
pub mod webhook;

pub use error::{Error, Result};
