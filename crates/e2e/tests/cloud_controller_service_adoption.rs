//! Switching a cluster from kube-controller-manager 1.20's in-tree OpenStack provider to berth:
//! the in-tree provider makes a Service's load balancer (`a` + the Service UID without dashes)
//! and floating IP on the testbed's real Octavia and Neutron; then it stops, berth starts with
//! the same cloud.conf and takes both over without making anything new, keeps the Service's
//! address, follows its Nodes, and on delete releases both.
//!
//! Runs on a Kubernetes bed of its own: the in-tree provider would serve every LoadBalancer
//! Service of the shared one.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{
    CloudController, HollowNode, HollowNodeOptions, Testbed, eventually,
    kubebed::{InTreeKcm, KubeBed},
    services::{
        create_service, delete_service, lb_service, service_controller, single_pool_members, vip_ports_left,
        wait_ingress,
    },
    unique_name,
};
use berth_openstack::load_balancer::LoadBalancer;
use k8s_openapi::api::core::v1::Service;
use kube::{Api, ResourceExt as _};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// Calls of `method` to Octavia in berth's own count.
async fn octavia_calls(ccm: &CloudController, method: &str) -> f64 {
    ccm.metrics()
        .await
        .unwrap()
        .lines()
        .filter(|l| {
            l.starts_with("berth_openstack_api_calls_total{")
                && l.contains(r#"service="load-balancer""#)
                && l.contains(&format!(r#"method="{method}""#))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_load_balancer_made_by_the_in_tree_provider_is_taken_over_without_re_creation() {
    let shared = Testbed::load().unwrap();
    let os = shared.openstack_demo().await.unwrap();
    let cluster = unique_name("adopt");
    let bed = KubeBed::start(
        &shared,
        Some(&InTreeKcm {
            cloud_conf: shared.cloud_conf.clone(),
            cluster_name: cluster.clone(),
        }),
    )
    .unwrap();
    let tb = bed.testbed(&shared);
    let kube = tb.kube().await.unwrap();
    let options = || HollowNodeOptions {
        heartbeat: Duration::from_secs(5),
        ..HollowNodeOptions::default()
    };
    let mut nodes = vec![
        HollowNode::create(&tb, &os, &kube, &unique_name("adn"), options())
            .await
            .unwrap(),
    ];

    // The in-tree provider serves a public Service (cloud.conf's floating-network-id).
    let name = unique_name("legacy");
    let svc = create_service(
        &kube,
        &lb_service(&name, &[("http", "TCP", 80)], &[], json!({})).unwrap(),
    )
    .await
    .unwrap();
    let uid = svc.uid().unwrap();
    // `a` + the UID without dashes, cut to 32 characters (Kubernetes' DefaultLoadBalancerName).
    let legacy_name: String = format!("a{}", uid.replace('-', "")).chars().take(32).collect();
    let ip = wait_ingress(&kube, &name, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nin-tree KCM log:\n{}", bed.kcm_log()));
    let made: Vec<LoadBalancer> = os
        .load_balancer()
        .list(&[("name", legacy_name.clone())])
        .await
        .unwrap();
    assert_eq!(made.len(), 1, "the in-tree provider made {legacy_name}");
    let made = made.into_iter().next().unwrap();
    let fip = os
        .network()
        .floating_ips(&[("port_id", made.vip_port_id.clone())])
        .await
        .unwrap();
    assert_eq!(fip.len(), 1);
    let fip = fip.into_iter().next().unwrap();
    assert_eq!(
        fip.floating_ip_address, ip,
        "the in-tree ingress is its floating IP"
    );
    assert!(
        fip.description.is_empty() && fip.tags.is_empty(),
        "1.20 marks its floating IPs in no way: {fip:?}"
    );

    // The switch: the in-tree provider stops, berth starts with the same cloud.conf.
    bed.stop_kcm().unwrap();
    let ccm = service_controller(&tb, "adopt", &cluster, &[]).unwrap();
    // A second Node: berth must act on the adopted load balancer to make it a member.
    nodes.push(
        HollowNode::create(&tb, &os, &kube, &unique_name("adn"), options())
            .await
            .unwrap(),
    );
    let want: BTreeSet<String> = nodes.iter().map(|n| n.internal_ip.clone()).collect();
    eventually("berth to add the new Node to the adopted pool", WAIT, || async {
        Ok((single_pool_members(&os, &made).await? == want).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nberth log:\n{}", ccm.log_text()));

    let all: Vec<LoadBalancer> = os.load_balancer().list(&[]).await.unwrap();
    let mine: Vec<&LoadBalancer> = all
        .iter()
        .filter(|l| l.name == legacy_name || l.name.contains(&cluster))
        .collect();
    assert_eq!(
        mine.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        [made.id.as_str()],
        "berth made no load balancer of its own"
    );
    assert_eq!(
        octavia_calls(&ccm, "POST").await,
        0.0,
        "berth created nothing in Octavia"
    );
    assert_eq!(
        wait_ingress(&kube, &name, WAIT).await.unwrap(),
        ip,
        "the Service keeps its address"
    );
    let svc = Api::<Service>::namespaced(kube.clone(), "default")
        .get(&name)
        .await
        .unwrap();
    assert!(
        svc.finalizers()
            .iter()
            .any(|f| f == "service.kubernetes.io/load-balancer-cleanup"),
        "the cleanup finalizer holds the Service"
    );
    let fip_now = os.network().floating_ip(&fip.id).await.unwrap();
    assert!(
        fip_now.tags.contains(&format!("berth-service={uid}")),
        "berth marked the inherited floating IP as the Service's: {fip_now:?}"
    );

    // Deleted under berth: the in-tree load balancer, its VIP port and floating IP go.
    delete_service(&kube, &name, WAIT).await.unwrap();
    assert!(
        os.load_balancer()
            .list(&[("name", legacy_name.clone())])
            .await
            .unwrap()
            .iter()
            .all(|l| l.provisioning_status == "DELETED"),
        "the adopted load balancer is gone"
    );
    assert!(
        os.network()
            .floating_ips(&[("floating_ip_address", ip.clone())])
            .await
            .unwrap()
            .is_empty(),
        "the inherited floating IP {ip} was released"
    );
    assert_eq!(
        vip_ports_left(&os, std::slice::from_ref(&made.id)).await.unwrap(),
        Vec::<String>::new()
    );
    drop(ccm);
    for n in nodes {
        n.remove(&os, &kube).await.unwrap();
    }
    drop(bed);
}
