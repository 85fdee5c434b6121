//! Hollow nodes: a Nova server and a Ready Node of the same name, removed without a trace.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_e2e::{HollowNode, HollowNodeOptions, Testbed, unique_name};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

fn ready_heartbeat(node: &Node) -> Option<String> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    ready.last_heartbeat_time.as_ref().map(|t| format!("{:?}", t.0))
}

#[tokio::test]
async fn a_hollow_node_is_a_server_and_a_ready_node_and_leaves_nothing_behind() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let name = unique_name("node");
    let options = HollowNodeOptions {
        heartbeat: Duration::from_secs(1),
        ..HollowNodeOptions::default()
    };
    let hollow = HollowNode::create(&tb, &os, &kube, &name, options).await.unwrap();

    // OpenStack: an ACTIVE server of that name with a port on the cluster network.
    let server = os.compute().server(&hollow.server_id).await.unwrap();
    assert_eq!(server.name, name);
    assert_eq!(server.status, "ACTIVE");
    let ports = os
        .network()
        .ports(&[("device_id", hollow.server_id.clone())])
        .await
        .unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].network_id, tb.tenant.network_id);
    assert_eq!(ports[0].fixed_ips[0].ip_address, hollow.internal_ip);

    // Kubernetes: a Ready Node whose InternalIP is the server's address, kept fresh.
    let nodes = Api::<Node>::all(kube.clone());
    let node = nodes.get(&name).await.unwrap();
    let addresses = node.status.as_ref().unwrap().addresses.clone().unwrap();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == hollow.internal_ip),
        "{addresses:?}"
    );
    let first = ready_heartbeat(&node).expect("Ready=True");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = ready_heartbeat(&nodes.get(&name).await.unwrap()).expect("still Ready=True");
    assert_ne!(first, later, "the heartbeat must move on");

    let server_id = hollow.server_id.clone();
    hollow.remove(&os, &kube).await.unwrap();

    // Nothing left: no Node, no server, no port.
    assert!(nodes.get_opt(&name).await.unwrap().is_none());
    assert!(os.compute().server(&server_id).await.unwrap_err().is_not_found());
    assert!(
        os.network()
            .ports(&[("device_id", server_id)])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        os.compute()
            .servers(&[("name", format!("^{name}$"))])
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn hollow_node_creation_fails_cleanly_for_a_name_kubernetes_refuses() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    // Nova accepts this name, Kubernetes does not (upper case is no DNS subdomain).
    let name = unique_name("bad").to_uppercase();
    let err = HollowNode::create(&tb, &os, &kube, &name, HollowNodeOptions::default())
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("creating Node"), "{err:#}");
    // The server made before the Node was refused is gone again.
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let left = os
                .compute()
                .servers(&[("name", format!("^{name}$"))])
                .await
                .unwrap();
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await
    .expect("the half-made server was not removed");
}
