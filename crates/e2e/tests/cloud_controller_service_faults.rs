//! The service controller when Octavia misbehaves for a while. A proxy in front of the
//! testbed's real Octavia (reached through clouds.yaml's `load_balancer_endpoint_override`,
//! as a user would put a proxy in) loses a create's answer after Octavia acted, answers 409
//! and 500: berth waits it out, never makes a second load balancer, tells the user through
//! Events, holds a deleted Service until its load balancer is really gone, and leaves nothing.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{
    HollowNode, Testbed, eventually,
    faults::{Fault, FaultProxy},
    services::{
        cloud_conf_with, cluster_objects, create_service, delete_service, labelled_node, lb_named,
        lb_service, node_selector, service_controller, service_events, single_pool_members, vip_ports_left,
        wait_ingress,
    },
    unique_name,
};
use berth_openstack::{client::Service as OsService, load_balancer::LoadBalancer};
use k8s_openapi::api::core::v1::Service;
use kube::{Api, api::DeleteParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// A cloud.conf like the testbed's whose load-balancer calls go through `proxy`, with
/// `lb_extra` lines added to `[LoadBalancer]`.
fn proxied_cloud_conf(
    tb: &Testbed,
    proxy: &FaultProxy,
    dir: &std::path::Path,
    lb_extra: &str,
) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let clouds = dir.join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!(
            "clouds:\n  proxied:\n    load_balancer_endpoint_override: {}\n",
            proxy.url
        ),
    )
    .unwrap();
    let global = format!("use-clouds = true\nclouds-file = {}\n", clouds.display());
    cloud_conf_with(tb, dir, &global, lb_extra).unwrap()
}

/// A fault proxy in front of the testbed's Octavia.
async fn octavia_proxy(os: &berth_openstack::Client) -> FaultProxy {
    let octavia = os.endpoint(OsService::LoadBalancer).await.unwrap();
    FaultProxy::start(&octavia.origin().ascii_serialization())
        .await
        .unwrap()
}

#[tokio::test]
async fn octavia_failing_for_a_while_is_waited_out_with_no_duplicate_and_nothing_left() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("faults");
    let proxy = octavia_proxy(&os).await;
    let dir = std::env::temp_dir().join(unique_name("faults-conf"));
    let conf = proxied_cloud_conf(&tb, &proxy, &dir, "");

    let selector = node_selector(&cluster);
    let mut nodes = Vec::new();
    for _ in 0..2 {
        nodes.push(
            HollowNode::create(&tb, &os, &kube, &unique_name("fln"), labelled_node(&cluster))
                .await
                .unwrap(),
        );
    }
    let conf_arg = conf.display().to_string();
    let ccm = service_controller(&tb, "faults", &cluster, &["--cloud-config", &conf_arg]).unwrap();

    // The create reaches Octavia but its answer is lost; then listing load balancers fails
    // twice. berth must find the one Octavia made instead of making another.
    proxy.inject("POST", "/lbaas/loadbalancers", Fault::LoseAnswer, Some(1));
    proxy.inject("GET", "/lbaas/loadbalancers", Fault::Refuse(500), Some(2));
    let name = unique_name("flaky");
    let lb_name = format!("kube_service_{cluster}_default_{name}");
    create_service(
        &kube,
        &lb_service(
            &name,
            &[("http", "TCP", 80)],
            &[
                (
                    "service.beta.kubernetes.io/openstack-internal-load-balancer",
                    "false",
                ),
                ("loadbalancer.openstack.org/node-selector", &selector),
            ],
            json!({}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let ip = wait_ingress(&kube, &name, WAIT).await.unwrap();
    let injected = proxy.injected();
    assert!(
        injected
            .iter()
            .any(|i| i.starts_with("POST /v2/lbaas/loadbalancers -> passed on")),
        "the create's answer was lost: {injected:?}"
    );
    let all: Vec<LoadBalancer> = os
        .load_balancer()
        .list(&[("name", lb_name.clone())])
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        1,
        "one load balancer although its create seemed to fail: {all:?}"
    );
    let lb = all.into_iter().next().unwrap();
    let posts = proxy
        .seen()
        .iter()
        .filter(|s| *s == "POST /v2/lbaas/loadbalancers")
        .count();
    assert_eq!(posts, 1, "the create was not repeated");
    let events = service_events(&kube, &name).await.unwrap();
    assert!(
        events.iter().any(|e| e.starts_with("SyncLoadBalancerFailed:")
            && e.contains("the answer was lost (injected by the e2e fault proxy)")),
        "the failure reached the user with Octavia's message: {events:?}"
    );
    assert!(
        events.iter().any(|e| e.starts_with("EnsuredLoadBalancer")),
        "{events:?}"
    );
    let fip = os
        .network()
        .floating_ips(&[("floating_ip_address", ip.clone())])
        .await
        .unwrap();
    assert_eq!(fip.len(), 1, "the ingress {ip} is a floating IP");
    assert_eq!(
        single_pool_members(&os, &lb).await.unwrap(),
        nodes.iter().map(|n| n.internal_ip.clone()).collect()
    );

    // A Node joins while Octavia answers 409 (the load balancer is busy) three times.
    proxy.inject("PUT", "/members", Fault::Refuse(409), Some(3));
    nodes.push(
        HollowNode::create(&tb, &os, &kube, &unique_name("fln"), labelled_node(&cluster))
            .await
            .unwrap(),
    );
    let want: BTreeSet<String> = nodes.iter().map(|n| n.internal_ip.clone()).collect();
    eventually("the joined Node to be a member", WAIT, || async {
        Ok((single_pool_members(&os, &lb).await.unwrap() == want).then_some(()))
    })
    .await
    .unwrap();
    let conflicts = proxy
        .injected()
        .iter()
        .filter(|i| i.starts_with("PUT ") && i.ends_with("-> 409"))
        .count();
    assert_eq!(conflicts, 3, "{:?}", proxy.injected());

    // Deleting while every delete fails: the Service stays (its finalizer) and so does the load
    // balancer; once Octavia recovers, both go and nothing is left.
    proxy.inject("DELETE", "/lbaas/", Fault::Refuse(500), None);
    let services = Api::<Service>::namespaced(kube.clone(), "default");
    services.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("a failed delete to be reported", WAIT, || async {
        let events = service_events(&kube, &name).await.unwrap();
        Ok(events
            .iter()
            .any(|e| e.starts_with("SyncLoadBalancerFailed:") && e.contains("500"))
            .then_some(()))
    })
    .await
    .unwrap();
    let held = services.get_opt(&name).await.unwrap();
    assert!(
        held.is_some_and(|s| s.metadata.deletion_timestamp.is_some()),
        "the Service is held by its finalizer while its load balancer cannot be deleted"
    );
    let status = os.load_balancer().get(&lb.id).await.unwrap().provisioning_status;
    assert!(
        !matches!(status.as_str(), "PENDING_DELETE" | "DELETED"),
        "no delete reached Octavia: {status}"
    );
    proxy.clear();
    eventually("the Service gone", WAIT, || async {
        Ok(services.get_opt(&name).await?.is_none().then_some(()))
    })
    .await
    .unwrap();
    assert!(lb_named(&os, &lb_name).await.unwrap().is_none());
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new(),
        "no load balancer, floating IP or security group of the cluster is left"
    );
    assert_eq!(
        vip_ports_left(&os, std::slice::from_ref(&lb.id)).await.unwrap(),
        Vec::<String>::new()
    );
    drop(ccm);
    for n in nodes {
        n.remove(&os, &kube).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn with_provider_requires_serial_api_calls_the_tree_is_built_one_object_at_a_time() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("serial");
    // No faults: the proxy only records the calls.
    let proxy = octavia_proxy(&os).await;
    let dir = std::env::temp_dir().join(unique_name("serial-conf"));
    let conf = proxied_cloud_conf(&tb, &proxy, &dir, "provider-requires-serial-api-calls = true\n");
    let node = HollowNode::create(&tb, &os, &kube, &unique_name("srn"), labelled_node(&cluster))
        .await
        .unwrap();
    let conf_arg = conf.display().to_string();
    let ccm = service_controller(&tb, "serial", &cluster, &["--cloud-config", &conf_arg]).unwrap();
    let name = unique_name("serial");
    let selector = node_selector(&cluster);
    create_service(
        &kube,
        &lb_service(
            &name,
            &[("http", "TCP", 80)],
            &[
                (
                    "service.beta.kubernetes.io/openstack-internal-load-balancer",
                    "true",
                ),
                ("loadbalancer.openstack.org/node-selector", &selector),
                ("loadbalancer.openstack.org/enable-health-monitor", "true"),
            ],
            json!({}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    wait_ingress(&kube, &name, WAIT).await.unwrap();
    let writes: Vec<String> = proxy
        .seen()
        .into_iter()
        .filter(|s| !s.starts_with("GET "))
        .map(|s| {
            // Ids out: `PUT /v2/lbaas/pools/<id>/members` → `PUT pools/members`.
            let (method, path) = s.split_once(' ').unwrap();
            let parts: Vec<&str> = path
                .trim_start_matches("/v2/lbaas/")
                .split('/')
                .filter(|p| p.len() != 36)
                .collect();
            format!("{method} {}", parts.join("/"))
        })
        .collect();
    assert_eq!(
        writes,
        [
            "POST loadbalancers",
            "POST listeners",
            "POST pools",
            "PUT pools/members",
            "POST healthmonitors"
        ],
        "a bare load balancer, then one object per call"
    );
    let lb = lb_named(&os, &format!("kube_service_{cluster}_default_{name}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        single_pool_members(&os, &lb).await.unwrap(),
        [node.internal_ip.clone()].into()
    );
    let pools = os
        .load_balancer()
        .pools(&[("loadbalancer_id", lb.id.clone())])
        .await
        .unwrap();
    assert!(pools[0].healthmonitor_id.is_some(), "the monitor is there");

    delete_service(&kube, &name, WAIT).await.unwrap();
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new()
    );
    drop(ccm);
    node.remove(&os, &kube).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
