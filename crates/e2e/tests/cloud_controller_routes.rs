//! `berth cloud-controller`'s route controller on the testbed's real Neutron router.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{
    CloudController, HollowNode, HollowNodeOptions, Testbed, eventually, openstack_calls, unique_name,
};
use berth_openstack::{Client, network::Route};
use k8s_openapi::api::core::v1::Node;
use kube::Api;

const WAIT: Duration = Duration::from_secs(60);

/// The routes on the router inside `cluster`.
async fn cluster_routes(os: &Client, tb: &Testbed, prefix: &str) -> BTreeSet<(String, String)> {
    let router = os.network().router(&tb.tenant.router_id).await.unwrap();
    router
        .routes
        .into_iter()
        .filter(|r| r.destination.starts_with(prefix))
        .map(|r| (r.destination, r.nexthop))
        .collect()
}

async fn pairs_of(os: &Client, server_id: &str) -> Vec<String> {
    let ports = os
        .network()
        .ports(&[("device_id", server_id.to_owned())])
        .await
        .unwrap();
    ports
        .iter()
        .flat_map(|p| p.allowed_address_pairs.iter().map(|a| a.ip_address.clone()))
        .collect()
}

fn network_available(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
        })
}

#[tokio::test]
async fn pod_cidrs_become_routes_and_pairs_and_go_with_their_nodes() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    // A cluster CIDR of this run's own, so nothing else on the router is in it.
    let b = 200 + fastrand::u8(0..50);
    let cluster = format!("10.{b}.0.0/16");
    let prefix = format!("10.{b}.");
    let mut hollow = Vec::new();
    for i in 0..3 {
        let options = HollowNodeOptions {
            pod_cidr: Some(format!("10.{b}.{i}.0/24")),
            heartbeat: Duration::from_secs(1),
            ..HollowNodeOptions::default()
        };
        hollow.push(
            HollowNode::create(&tb, &os, &kube, &unique_name("route"), options)
                .await
                .unwrap(),
        );
    }
    // A hand-made route outside the cluster CIDR, next to ours: it must survive everything.
    let foreign = Route {
        destination: format!("172.30.{b}.0/24"),
        nexthop: hollow[0].internal_ip.clone(),
    };
    os.network()
        .add_extraroutes(&tb.tenant.router_id, std::slice::from_ref(&foreign))
        .await
        .unwrap();

    let lease = unique_name("lease");
    let ccm = CloudController::start(
        &tb,
        "routes",
        &[
            "--controllers",
            "route",
            "--cluster-cidr",
            &cluster,
            "--leader-elect-resource-name",
            &lease,
            "--route-reconcile-period",
            "0",
        ],
    )
    .unwrap();
    let want: BTreeSet<(String, String)> = hollow
        .iter()
        .enumerate()
        .map(|(i, h)| (format!("10.{b}.{i}.0/24"), h.internal_ip.clone()))
        .collect();
    eventually("three routes", WAIT, || async {
        Ok((cluster_routes(&os, &tb, &prefix).await == want).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    for (i, h) in hollow.iter().enumerate() {
        eventually("the pod CIDR on the node's port", WAIT, || async {
            Ok(pairs_of(&os, &h.server_id)
                .await
                .contains(&format!("10.{b}.{i}.0/24"))
                .then_some(()))
        })
        .await
        .unwrap();
    }
    let nodes = Api::<Node>::all(kube.clone());
    for h in &hollow {
        eventually("NetworkUnavailable=False", WAIT, || async {
            Ok(network_available(&nodes.get(&h.name).await?).then_some(()))
        })
        .await
        .unwrap();
    }

    // Nothing changes but the kubelets' heartbeats (every second here): no OpenStack call.
    let before = openstack_calls(&ccm.metrics().await.unwrap());
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = openstack_calls(&ccm.metrics().await.unwrap());
    assert!(before > 0.0);
    assert_eq!(before, after, "OpenStack calls while nothing changed");

    // A Node goes (its server stays): its route and its pair go, the others stay.
    let gone = hollow.remove(1);
    nodes.delete(&gone.name, &Default::default()).await.unwrap();
    let want: BTreeSet<(String, String)> = want
        .into_iter()
        .filter(|(_, hop)| *hop != gone.internal_ip)
        .collect();
    eventually("the route of the deleted Node removed", WAIT, || async {
        Ok((cluster_routes(&os, &tb, &prefix).await == want).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    eventually("the pair of the deleted Node removed", WAIT, || async {
        Ok(pairs_of(&os, &gone.server_id).await.is_empty().then_some(()))
    })
    .await
    .unwrap();
    let router = os.network().router(&tb.tenant.router_id).await.unwrap();
    assert!(
        router.routes.contains(&foreign),
        "a route berth did not make was touched: {:?}",
        router.routes
    );

    // The controller stops; the remaining nodes go; a new controller cleans up after them.
    drop(ccm);
    for h in &hollow {
        nodes.delete(&h.name, &Default::default()).await.unwrap();
    }
    let ccm = CloudController::start(
        &tb,
        "routes2",
        &[
            "--controllers",
            "route",
            "--cluster-cidr",
            &cluster,
            "--leader-elect-resource-name",
            &lease,
        ],
    )
    .unwrap();
    eventually("no cluster routes left", WAIT, || async {
        Ok(cluster_routes(&os, &tb, &prefix).await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", ccm.log_text()));
    for h in &hollow {
        eventually("no pairs left", WAIT, || async {
            Ok(pairs_of(&os, &h.server_id).await.is_empty().then_some(()))
        })
        .await
        .unwrap();
    }
    let router = os.network().router(&tb.tenant.router_id).await.unwrap();
    assert!(router.routes.contains(&foreign));
    drop(ccm);

    os.network()
        .remove_extraroutes(&tb.tenant.router_id, &[foreign])
        .await
        .unwrap();
    for h in hollow.into_iter().chain([gone]) {
        h.remove(&os, &kube).await.unwrap();
    }
}
