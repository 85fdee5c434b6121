//! `berth cloud-controller`'s node controller on the testbed, with hollow nodes.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_e2e::{
    CloudController, Frozen, HollowNode, HollowNodeOptions, Testbed, eventually, node_event_reasons,
    unique_name,
};
use k8s_openapi::api::core::v1::Node;
use kube::{Api, api::PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn tainted() -> HollowNodeOptions {
    HollowNodeOptions {
        uninitialized_taint: true,
        ..HollowNodeOptions::default()
    }
}

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect()
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn lease_args(name: &str) -> Vec<String> {
    vec![
        "--leader-elect-resource-name".into(),
        name.into(),
        "--controllers".into(),
        "cloud-node,cloud-node-lifecycle".into(),
    ]
}

#[tokio::test]
async fn five_hollow_nodes_are_initialised_from_their_servers() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let names: Vec<String> = (0..5).map(|_| unique_name("init")).collect();
    let made = futures::future::join_all(
        names
            .iter()
            .map(|n| HollowNode::create(&tb, &os, &kube, n, tainted())),
    )
    .await;
    let hollow: Vec<HollowNode> = made.into_iter().map(Result::unwrap).collect();
    let lease = unique_name("lease");
    let ccm = CloudController::start(
        &tb,
        "init",
        &lease_args(&lease).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();

    let nodes = Api::<Node>::all(kube.clone());
    for h in &hollow {
        let node = eventually(&format!("{} initialised", h.name), WAIT, || async {
            let n = nodes.get(&h.name).await?;
            Ok((!taint_keys(&n)
                .iter()
                .any(|k| k == "node.cloudprovider.kubernetes.io/uninitialized"))
            .then_some(n))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some(format!("openstack:///{}", h.server_id).as_str())
        );
        assert_eq!(
            label(&node, "node.kubernetes.io/instance-type"),
            Some(tb.flavor.as_str())
        );
        assert_eq!(
            label(&node, "beta.kubernetes.io/instance-type"),
            Some(tb.flavor.as_str())
        );
        assert_eq!(
            label(&node, "topology.kubernetes.io/zone"),
            Some(tb.availability_zone.as_str())
        );
        assert_eq!(
            label(&node, "failure-domain.beta.kubernetes.io/zone"),
            Some(tb.availability_zone.as_str())
        );
        assert_eq!(
            label(&node, "topology.kubernetes.io/region"),
            Some(tb.region.as_str())
        );
        let addresses = node.status.unwrap().addresses.unwrap();
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == h.internal_ip),
            "{addresses:?}"
        );
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "Hostname" && a.address == h.name),
            "the kubelet's Hostname stays"
        );
        // The event follows the patch that removed the taint.
        eventually("a NodeInitialized event", WAIT, || async {
            Ok(node_event_reasons(&kube, &h.name)
                .await?
                .contains(&"NodeInitialized".to_owned())
                .then_some(()))
        })
        .await
        .unwrap();
    }
    // One server list and one port list serve all nodes: the calls do not grow per node.
    let lists = ccm
        .metric("berth_openstack_api_calls_total{service=\"compute\",method=\"GET\",status=\"200\"}")
        .await
        .unwrap();
    assert!(lists >= 1.0, "{}", ccm.metrics().await.unwrap());
    drop(ccm);
    for h in hollow {
        h.remove(&os, &kube).await.unwrap();
    }
}

#[tokio::test]
async fn a_node_named_after_no_server_keeps_its_taint_and_gets_an_event() {
    let tb = Testbed::load().unwrap();
    let kube = tb.kube().await.unwrap();
    let name = unique_name("orphan");
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": { "berth.dev/e2e": "orphan" } },
        "spec": { "taints": [{ "key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule" }] }
    }))
    .unwrap();
    let nodes = Api::<Node>::all(kube.clone());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let lease = unique_name("lease");
    let ccm = CloudController::start(
        &tb,
        "orphan",
        &lease_args(&lease).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    eventually("an InstanceNotFound event", WAIT, || async {
        Ok(node_event_reasons(&kube, &name)
            .await?
            .contains(&"InstanceNotFound".to_owned())
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    let n = nodes.get(&name).await.unwrap();
    assert!(
        taint_keys(&n)
            .iter()
            .any(|k| k == "node.cloudprovider.kubernetes.io/uninitialized")
    );
    assert!(n.spec.unwrap().provider_id.is_none(), "no guess was made");
    drop(ccm);
    nodes.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn shutdown_taint_follows_the_server_and_a_deleted_server_deletes_its_node() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let name = unique_name("life");
    let h = HollowNode::create(&tb, &os, &kube, &name, tainted())
        .await
        .unwrap();
    let lease = unique_name("lease");
    let ccm = CloudController::start(
        &tb,
        "life",
        &lease_args(&lease).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    let nodes = Api::<Node>::all(kube.clone());
    eventually("initialised", WAIT, || async {
        Ok(
            (!has_taint(&nodes, &name, "node.cloudprovider.kubernetes.io/uninitialized").await?)
                .then_some(()),
        )
    })
    .await
    .unwrap();

    os.compute().server_action(&h.server_id, "os-stop").await.unwrap();
    eventually("the shutdown taint", WAIT, || async {
        Ok(
            has_taint(&nodes, &name, "node.cloudprovider.kubernetes.io/shutdown")
                .await?
                .then_some(()),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    os.compute()
        .server_action(&h.server_id, "os-start")
        .await
        .unwrap();
    eventually("the shutdown taint gone", WAIT, || async {
        Ok((!has_taint(&nodes, &name, "node.cloudprovider.kubernetes.io/shutdown").await?).then_some(()))
    })
    .await
    .unwrap();

    // The server really goes: the Node follows.
    let server_id = h.server_id.clone();
    os.compute().delete_server(&server_id).await.unwrap();
    eventually("the Node deleted", WAIT, || async {
        Ok(nodes.get_opt(&name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    assert!(ccm.metric("berth_node_deletions_total").await.unwrap() >= 1.0);
    drop(ccm);
    h.remove(&os, &kube).await.unwrap();
}

#[tokio::test]
async fn an_openstack_outage_never_deletes_a_node_and_work_resumes_after() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let options = |id: Option<String>| HollowNodeOptions {
        provider_id: id,
        ..HollowNodeOptions::default()
    };
    let a = HollowNode::create(&tb, &os, &kube, &unique_name("outage"), options(None))
        .await
        .unwrap();
    let b = HollowNode::create(&tb, &os, &kube, &unique_name("outage"), options(None))
        .await
        .unwrap();
    let nodes = Api::<Node>::all(kube.clone());
    for h in [&a, &b] {
        let patch = json!({ "spec": { "providerID": format!("openstack:///{}", h.server_id) } });
        nodes
            .patch(&h.name, &Default::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
    }
    // A cloud.conf whose calls time out quickly, so the outage is felt at once.
    let conf = std::env::temp_dir().join(format!("berth-outage-{}.conf", std::process::id()));
    let text = std::fs::read_to_string(&tb.cloud_conf).unwrap();
    std::fs::write(&conf, format!("{text}\n[Metadata]\nrequest-timeout = 2s\n")).unwrap();
    let lease = unique_name("lease");
    let frozen = (
        Frozen::service(&tb, "keystone").unwrap(),
        Frozen::service(&tb, "nova-api").unwrap(),
    );
    let mut args = lease_args(&lease);
    args.extend(["--cloud-config".into(), conf.display().to_string()]);
    let ccm = CloudController::start(
        &tb,
        "outage",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    // The controller cannot reach Keystone or Nova: it must count and retry, and delete nothing.
    eventually("the outage to be counted", Duration::from_secs(90), || async {
        let failed = ccm
            .metric("berth_reconciles_total{controller=\"node\",result=\"openstack\"}")
            .await?;
        Ok((failed >= 1.0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    assert!(nodes.get_opt(&a.name).await.unwrap().is_some());
    assert!(nodes.get_opt(&b.name).await.unwrap().is_some());
    assert_eq!(ccm.metric("berth_node_deletions_total").await.unwrap(), 0.0);
    drop(frozen);

    // Back: a server that really goes now takes its Node with it; the other stays.
    os.compute().delete_server(&a.server_id).await.unwrap();
    eventually("the Node of the deleted server gone", WAIT, || async {
        Ok(nodes.get_opt(&a.name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    assert!(nodes.get_opt(&b.name).await.unwrap().is_some());
    drop(ccm);
    std::fs::remove_file(conf).unwrap();
    a.remove(&os, &kube).await.unwrap();
    b.remove(&os, &kube).await.unwrap();
}

#[tokio::test]
async fn a_floating_ip_on_the_nodes_port_becomes_its_external_ip_and_leaves_again() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let name = unique_name("fipnode");
    let h = HollowNode::create(&tb, &os, &kube, &name, tainted())
        .await
        .unwrap();
    let lease = unique_name("lease");
    let ccm = CloudController::start(
        &tb,
        "fip",
        &lease_args(&lease).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    let nodes = Api::<Node>::all(kube.clone());
    let external = |n: &Node| -> Vec<String> {
        n.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(|a| {
                a.iter()
                    .filter(|a| a.type_ == "ExternalIP")
                    .map(|a| a.address.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    eventually("initialised", WAIT, || async {
        Ok(
            (!has_taint(&nodes, &name, "node.cloudprovider.kubernetes.io/uninitialized").await?)
                .then_some(()),
        )
    })
    .await
    .unwrap();
    assert!(external(&nodes.get(&name).await.unwrap()).is_empty());

    let port = os
        .network()
        .ports(&[("device_id", h.server_id.clone())])
        .await
        .unwrap()
        .remove(0);
    let fip = os
        .network()
        .create_floating_ip(serde_json::json!({
            "floating_network_id": tb.tenant.public_network_id, "port_id": port.id, "description": name
        }))
        .await
        .unwrap();
    eventually("the floating IP as ExternalIP", WAIT, || async {
        Ok(external(&nodes.get(&name).await?)
            .contains(&fip.floating_ip_address)
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    let n = nodes.get(&name).await.unwrap();
    let addresses = n.status.unwrap().addresses.unwrap();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == h.internal_ip),
        "{addresses:?}"
    );

    os.network().delete_floating_ip(&fip.id).await.unwrap();
    eventually("the ExternalIP gone", WAIT, || async {
        Ok(external(&nodes.get(&name).await?).is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    drop(ccm);
    h.remove(&os, &kube).await.unwrap();
}

async fn has_taint(nodes: &Api<Node>, name: &str, key: &str) -> anyhow::Result<bool> {
    Ok(taint_keys(&nodes.get(name).await?).iter().any(|k| k == key))
}
