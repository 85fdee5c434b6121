//! Hollow nodes: a Nova fake server plus the Node object a kubelet would have registered.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, Result, anyhow};
use berth_openstack::Client;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::Testbed;

/// How a hollow node is made.
#[derive(Debug, Clone)]
pub struct HollowNodeOptions {
    /// Register the Node with the `node.cloudprovider.kubernetes.io/uninitialized` taint, as a
    /// kubelet started with `--cloud-provider=external` does.
    pub uninitialized_taint: bool,
    /// Set `spec.providerID` at registration (kubelets usually leave it to the cloud controller).
    pub provider_id: Option<String>,
    /// How often the Ready condition's heartbeat is renewed.
    pub heartbeat: Duration,
    /// Extra Node labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.podCIDR`, as kube-controller-manager's IPAM would set it.
    pub pod_cidr: Option<String>,
}

impl Default for HollowNodeOptions {
    fn default() -> Self {
        Self {
            uninitialized_taint: false,
            provider_id: None,
            heartbeat: Duration::from_secs(10),
            labels: BTreeMap::new(),
            pod_cidr: None,
        }
    }
}

/// A server and its Node, alive until [`HollowNode::remove`].
#[derive(Debug)]
pub struct HollowNode {
    /// The Node's and the server's name.
    pub name: String,
    /// The Nova server's id.
    pub server_id: String,
    /// The server's address on the cluster network (the Node's InternalIP).
    pub internal_ip: String,
    heartbeat: Option<JoinHandle<()>>,
}

const READY_REASON: &str = "KubeletReady";

fn ready_condition() -> serde_json::Value {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    json!({
        "type": "Ready", "status": "True", "reason": READY_REASON,
        "message": "hollow node (berth e2e)", "lastHeartbeatTime": now, "lastTransitionTime": now
    })
}

impl HollowNode {
    /// Boots a fake server named `name` on the cluster network, waits until it is ACTIVE and
    /// registers the Node. If any step fails, what was made is removed again.
    pub async fn create(
        testbed: &Testbed,
        openstack: &Client,
        kube: &kube::Client,
        name: &str,
        options: HollowNodeOptions,
    ) -> Result<Self> {
        let compute = openstack.compute();
        let mut server = testbed.server_spec(openstack, name).await?;
        server.metadata = BTreeMap::from([("berth-e2e".to_owned(), "hollow-node".to_owned())]);
        let server_id = compute
            .create_server(&server)
            .await
            .with_context(|| format!("creating server {name}"))?;
        match Self::register(testbed, openstack, kube, name, &server_id, options).await {
            Ok(node) => Ok(node),
            Err(e) => {
                // Leave nothing half-made behind.
                let _ = Api::<Node>::all(kube.clone())
                    .delete(name, &DeleteParams::default())
                    .await;
                let _ = compute.delete_server(&server_id).await;
                Err(e)
            }
        }
    }

    async fn register(
        testbed: &Testbed,
        openstack: &Client,
        kube: &kube::Client,
        name: &str,
        server_id: &str,
        options: HollowNodeOptions,
    ) -> Result<Self> {
        openstack
            .compute()
            .wait_for_status(server_id, "ACTIVE", Duration::from_secs(120))
            .await?;
        let ports = openstack
            .network()
            .ports(&[
                ("device_id", server_id.to_owned()),
                ("network_id", testbed.tenant.network_id.clone()),
            ])
            .await?;
        let internal_ip = ports
            .iter()
            .flat_map(|p| p.fixed_ips.iter())
            .map(|ip| ip.ip_address.clone())
            .find(|ip| !ip.contains(':'))
            .ok_or_else(|| anyhow!("server {name} has no IPv4 address on the cluster network"))?;

        let mut labels = options.labels.clone();
        labels.insert("kubernetes.io/hostname".into(), name.into());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("berth.dev/e2e".into(), "hollow".into());
        let mut spec = json!({});
        if options.uninitialized_taint {
            spec["taints"] = json!([{
                "key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"
            }]);
        }
        if let Some(id) = &options.provider_id {
            spec["providerID"] = json!(id);
        }
        if let Some(cidr) = &options.pod_cidr {
            spec["podCIDR"] = json!(cidr);
            spec["podCIDRs"] = json!([cidr]);
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": name, "labels": labels },
            "spec": spec,
            "status": {
                "addresses": [
                    { "type": "InternalIP", "address": internal_ip },
                    { "type": "Hostname", "address": name }
                ],
                "conditions": [ready_condition()],
                "capacity": { "cpu": "2", "memory": "4Gi", "pods": "110" },
                "allocatable": { "cpu": "2", "memory": "4Gi", "pods": "110" },
                "nodeInfo": {
                    "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux",
                    "architecture": "amd64", "machineID": "", "systemUUID": "", "bootID": "",
                    "kernelVersion": "", "osImage": "hollow", "containerRuntimeVersion": ""
                }
            }
        }))?;
        let nodes = Api::<Node>::all(kube.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating Node {name}"))?;

        let heartbeat = tokio::spawn(keep_ready(nodes, name.to_owned(), options.heartbeat));
        Ok(Self {
            name: name.to_owned(),
            server_id: server_id.to_owned(),
            internal_ip,
            heartbeat: Some(heartbeat),
        })
    }

    /// Stops the heartbeat, as a kubelet that died would (the Node is left as it is).
    pub fn stop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }

    /// Deletes the Node and the server, and waits until the server is gone.
    pub async fn remove(mut self, openstack: &Client, kube: &kube::Client) -> Result<()> {
        self.stop_heartbeat();
        match Api::<Node>::all(kube.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting Node {}", self.name)),
        }
        let compute = openstack.compute();
        compute.delete_server(&self.server_id).await?;
        compute
            .wait_for_deletion(&self.server_id, Duration::from_secs(120))
            .await?;
        Ok(())
    }
}

impl Drop for HollowNode {
    fn drop(&mut self) {
        self.stop_heartbeat();
    }
}

/// Renews the Ready condition's heartbeat, as a kubelet does, until aborted.
async fn keep_ready(nodes: Api<Node>, name: String, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        // Strategic merge by condition type: other conditions (NetworkUnavailable, set by a
        // cloud controller) stay, and lastTransitionTime is left as it was.
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let patch = json!({ "status": { "conditions": [{
            "type": "Ready", "status": "True", "reason": READY_REASON, "lastHeartbeatTime": now
        }] } });
        if let Err(e) = nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::warn!(node = %name, error = %e, "hollow node heartbeat failed");
        }
    }
}
