//! berth's end-to-end test harness.
//!
//! The e2e tests run against the real services of the local testbed (`cargo xtask testbed up`):
//! [`Testbed`] reads the credentials and ids it wrote, gives OpenStack and Kubernetes clients,
//! and makes [`HollowNode`]s: a Nova fake server on the cluster network plus a Node object of
//! the same name, kept Ready, as a kubelet would keep it. Every test names what it creates with
//! [`unique_name`], so a leak is easy to find (`cargo xtask leaks`).

pub mod faults;
mod hollow;
pub mod keystone;
pub mod kubebed;
mod process;
pub mod services;
mod testbed;

pub use hollow::{HollowNode, HollowNodeOptions};
pub use process::{CloudController, Frozen, berth_binary, free_port, openstack_calls, signal};
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

/// Polls `check` until it gives `Some`, failing with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The reasons of the Events about a Node (core/v1 Events, as `kubectl describe node` shows).
pub async fn node_event_reasons(kube: &kube::Client, node: &str) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::core::v1::Event;
    let events = kube::Api::<Event>::all(kube.clone())
        .list(&kube::api::ListParams::default())
        .await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Node")
                && e.involved_object.name.as_deref() == Some(node)
        })
        .filter_map(|e| e.reason)
        .collect())
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
