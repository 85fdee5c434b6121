//! berth's end-to-end test harness.
//!
//! The e2e tests run against the real services of the local testbed (`cargo xtask testbed up`):
//! [`Testbed`] reads the credentials and ids it wrote, gives OpenStack and Kubernetes clients,
//! and makes [`HollowNode`]s: a Nova fake server on the cluster network plus a Node object of
//! the same name, kept Ready, as a kubelet would keep it. Every test names what it creates with
//! [`unique_name`], so a leak is easy to find (`cargo xtask leaks`).

mod hollow;
mod testbed;

pub use hollow::{HollowNode, HollowNodeOptions};
pub use testbed::{CloudUser, TenantIds, Testbed};

/// The prefix of every OpenStack and Kubernetes object an e2e test creates.
pub const E2E_PREFIX: &str = "e2e-";

/// A name no other test run uses: `e2e-<what>-<random>`, valid as a Node and server name.
pub fn unique_name(what: &str) -> String {
    let suffix: String = std::iter::repeat_with(|| fastrand::alphanumeric().to_ascii_lowercase())
        .take(6)
        .collect();
    format!("{E2E_PREFIX}{what}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_dns_labels_and_differ() {
        let a = unique_name("node");
        let b = unique_name("node");
        assert_ne!(a, b);
        assert!(a.starts_with("e2e-node-"));
        assert!(a.len() <= 63);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}
