//! `berth cloud-controller`'s service controller on the testbed's real Octavia and Neutron:
//! LoadBalancer Services get load balancers and ingress, follow their Nodes, and leave
//! nothing behind.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{
    CloudController, HollowNode, HollowNodeOptions, Testbed, eventually,
    services::{
        cluster_objects, create_service, delete_service, lb_named, lb_service, vip_ports_left, wait_ingress,
    },
    unique_name,
};
use berth_openstack::{Client, load_balancer::LoadBalancer};
use k8s_openapi::api::core::v1::{Event, Service};
use kube::{Api, api::ListParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// Every pool's members of a load balancer, as `address:port` sets by listener port.
async fn members_by_port(os: &Client, lb: &LoadBalancer) -> Vec<(u16, BTreeSet<String>)> {
    let octavia = os.load_balancer();
    let listeners = octavia
        .listeners(&[("loadbalancer_id", lb.id.clone())])
        .await
        .unwrap();
    let mut out = Vec::new();
    for l in listeners {
        let pool = l.default_pool_id.clone().unwrap();
        let members = octavia.members(&pool).await.unwrap();
        out.push((
            l.protocol_port,
            members
                .iter()
                .map(|m| format!("{}:{}", m.address, m.protocol_port))
                .collect(),
        ));
    }
    out.sort();
    out
}

fn node_ports(svc: &Service) -> Vec<(u16, u16)> {
    let mut v: Vec<(u16, u16)> = svc
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                u16::try_from(p.port).unwrap(),
                u16::try_from(p.node_port.unwrap()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// What the members should be: every node IP at the port's NodePort.
fn expected(svc: &Service, ips: &[&str]) -> Vec<(u16, BTreeSet<String>)> {
    node_ports(svc)
        .into_iter()
        .map(|(port, node_port)| (port, ips.iter().map(|ip| format!("{ip}:{node_port}")).collect()))
        .collect()
}

async fn service_event_reasons(kube: &kube::Client, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(kube.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Service")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .filter_map(|e| e.reason)
        .collect()
}

async fn put_calls(ccm: &CloudController) -> f64 {
    let text = ccm.metrics().await.unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("berth_openstack_api_calls_total{")
                && l.contains(r#"service="load-balancer""#)
                && l.contains(r#"method="PUT""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn private_and_public_services_get_ingress_follow_nodes_and_leave_nothing() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("lbc");
    // This test's Nodes carry a label of its own, and its Services select them: the members
    // are exactly these Nodes whatever else the cluster holds.
    let options = || HollowNodeOptions {
        heartbeat: Duration::from_secs(2),
        labels: [("e2e-cluster".to_owned(), cluster.clone())].into(),
        ..HollowNodeOptions::default()
    };
    let selector = format!("e2e-cluster={cluster}");
    let select = ("loadbalancer.openstack.org/node-selector", selector.as_str());
    let mut nodes = Vec::new();
    for _ in 0..2 {
        nodes.push(
            HollowNode::create(&tb, &os, &kube, &unique_name("lbn"), options())
                .await
                .unwrap(),
        );
    }
    let ccm = CloudController::start(
        &tb,
        "services",
        &[
            "--cluster-name",
            &cluster,
            "--controllers",
            "service",
            "--leader-elect=false",
        ],
    )
    .unwrap();

    // The seeds' pair: a private load balancer on the cluster subnet (multi-port, UDP) and a
    // public one with a floating IP, source ranges, a health monitor and client affinity.
    let private = unique_name("private");
    let public = unique_name("public");
    // Kubernetes 1.20 takes one protocol per LoadBalancer Service: UDP gets its own.
    let udp = unique_name("udp");
    create_service(
        &kube,
        &lb_service(
            &udp,
            &[("dns", "UDP", 53)],
            &[(
                "service.beta.kubernetes.io/openstack-internal-load-balancer",
                "true",
            )],
            json!({}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    create_service(
        &kube,
        &lb_service(
            &private,
            &[("http", "TCP", 80), ("metrics", "TCP", 9090)],
            &[(
                "service.beta.kubernetes.io/openstack-internal-load-balancer",
                "true",
            )],
            json!({}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    create_service(
        &kube,
        &lb_service(
            &public,
            &[("https", "TCP", 443)],
            &[
                ("service.beta.kubernetes.io/openstack-internal-load-balancer", "false"),
                ("loadbalancer.openstack.org/floating-network-id", &tb.tenant.public_network_id),
                ("loadbalancer.openstack.org/enable-health-monitor", "true"),
                select,
            ],
            json!({ "loadBalancerSourceRanges": ["192.0.2.0/24", "198.51.100.0/24"], "sessionAffinity": "ClientIP" }),
        )
        .unwrap(),
    )
    .await
    .unwrap();

    let private_ip = wait_ingress(&kube, &private, WAIT).await.unwrap();
    wait_ingress(&kube, &udp, WAIT).await.unwrap();
    let public_ip = wait_ingress(&kube, &public, WAIT).await.unwrap();
    assert!(
        private_ip.starts_with("10.0.0."),
        "private ingress {private_ip} is on the cluster subnet"
    );

    let svc_api = Api::<Service>::namespaced(kube.clone(), "default");
    let private_svc = svc_api.get(&private).await.unwrap();
    let udp_svc = svc_api.get(&udp).await.unwrap();
    let udp_lb = lb_named(&os, &format!("kube_service_{cluster}_default_{udp}"))
        .await
        .unwrap()
        .expect("the UDP load balancer");
    let public_svc = svc_api.get(&public).await.unwrap();
    assert!(
        private_svc
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "service.kubernetes.io/load-balancer-cleanup"),
        "the cleanup finalizer guards the Service"
    );
    let private_lb = lb_named(&os, &format!("kube_service_{cluster}_default_{private}"))
        .await
        .unwrap()
        .expect("the private load balancer has upstream's name");
    let public_lb = lb_named(&os, &format!("kube_service_{cluster}_default_{public}"))
        .await
        .unwrap()
        .expect("the public load balancer has upstream's name");
    assert_eq!(private_lb.vip_address, private_ip);
    assert_eq!(private_lb.vip_subnet_id, tb.tenant.subnet_id);
    for (lb, svc) in [(&private_lb, &private_svc), (&public_lb, &public_svc)] {
        let uid = svc.metadata.uid.clone().unwrap();
        assert!(
            lb.tags.contains(&format!("berth-cluster={cluster}")),
            "{:?}",
            lb.tags
        );
        assert!(lb.tags.contains(&format!("berth-service={uid}")), "{:?}", lb.tags);
        assert_eq!(
            svc.metadata.annotations.as_ref().unwrap()["loadbalancer.openstack.org/load-balancer-id"],
            lb.id
        );
    }

    // The public one's address is a floating IP on its VIP port, allocated and tagged by berth.
    let fips = os
        .network()
        .floating_ips(&[("port_id", public_lb.vip_port_id.clone())])
        .await
        .unwrap();
    assert_eq!(fips.len(), 1, "one floating IP on the VIP port");
    assert_eq!(fips[0].floating_ip_address, public_ip);
    assert_eq!(fips[0].floating_network_id, tb.tenant.public_network_id);
    assert!(fips[0].tags.contains(&format!("berth-cluster={cluster}")));
    // The private one has none.
    assert!(
        os.network()
            .floating_ips(&[("port_id", private_lb.vip_port_id.clone())])
            .await
            .unwrap()
            .is_empty()
    );

    // Listeners: TCP 80 and 9090 on the private one, UDP 53 on the third; the public one's
    // settings.
    let octavia = os.load_balancer();
    let listeners = octavia
        .listeners(&[("loadbalancer_id", private_lb.id.clone())])
        .await
        .unwrap();
    let protocols: BTreeSet<(String, u16)> = listeners
        .iter()
        .map(|l| (l.protocol.clone(), l.protocol_port))
        .collect();
    assert_eq!(
        protocols,
        BTreeSet::from([("TCP".to_owned(), 80), ("TCP".to_owned(), 9090)])
    );
    let udp_listeners = octavia
        .listeners(&[("loadbalancer_id", udp_lb.id.clone())])
        .await
        .unwrap();
    assert_eq!(udp_listeners.len(), 1);
    assert_eq!(
        (udp_listeners[0].protocol.as_str(), udp_listeners[0].protocol_port),
        ("UDP", 53)
    );
    let public_listener = &octavia
        .listeners(&[("loadbalancer_id", public_lb.id.clone())])
        .await
        .unwrap()[0];
    let mut cidrs = public_listener.allowed_cidrs.clone().unwrap_or_default();
    cidrs.sort();
    assert_eq!(cidrs, ["192.0.2.0/24", "198.51.100.0/24"]);
    let public_pool = &octavia
        .pools(&[("loadbalancer_id", public_lb.id.clone())])
        .await
        .unwrap()[0];
    assert_eq!(
        public_pool.session_persistence.as_ref().unwrap()["type"],
        "SOURCE_IP"
    );
    let monitor = octavia
        .health_monitor(public_pool.healthmonitor_id.as_deref().expect("a health monitor"))
        .await
        .unwrap();
    assert_eq!(monitor.kind, "TCP");

    let ips: Vec<String> = nodes.iter().map(|n| n.internal_ip.clone()).collect();
    let ip_refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    assert_eq!(
        members_by_port(&os, &private_lb).await,
        expected(&private_svc, &ip_refs)
    );
    assert_eq!(
        members_by_port(&os, &public_lb).await,
        expected(&public_svc, &ip_refs)
    );
    let reasons = service_event_reasons(&kube, &public).await;
    assert!(reasons.iter().any(|r| r == "EnsuredLoadBalancer"), "{reasons:?}");

    // A Node joins: every pool (four) follows with one batch member update each.
    let puts_before = put_calls(&ccm).await;
    let joined = std::time::Instant::now();
    nodes.push(
        HollowNode::create(&tb, &os, &kube, &unique_name("lbn"), options())
            .await
            .unwrap(),
    );
    let ips: Vec<String> = nodes.iter().map(|n| n.internal_ip.clone()).collect();
    let ip_refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    eventually("the new Node in every pool", WAIT, || async {
        Ok(
            (members_by_port(&os, &private_lb).await == expected(&private_svc, &ip_refs)
                && members_by_port(&os, &public_lb).await == expected(&public_svc, &ip_refs)
                && members_by_port(&os, &udp_lb).await == expected(&udp_svc, &ip_refs))
            .then_some(()),
        )
    })
    .await
    .unwrap();
    eprintln!(
        "a joining Node was in every pool {:?} after its Node object",
        joined.elapsed()
    );
    assert_eq!(
        put_calls(&ccm).await - puts_before,
        4.0,
        "one member update per pool"
    );

    // A Node leaves: its members go.
    let gone = nodes.remove(0);
    gone.remove(&os, &kube).await.unwrap();
    let ips: Vec<String> = nodes.iter().map(|n| n.internal_ip.clone()).collect();
    let ip_refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    eventually("the leaving Node out of every pool", WAIT, || async {
        Ok(
            (members_by_port(&os, &private_lb).await == expected(&private_svc, &ip_refs)
                && members_by_port(&os, &public_lb).await == expected(&public_svc, &ip_refs)
                && members_by_port(&os, &udp_lb).await == expected(&udp_svc, &ip_refs))
            .then_some(()),
        )
    })
    .await
    .unwrap();

    // Nothing changes: no OpenStack call.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_before = berth_e2e::openstack_calls(&ccm.metrics().await.unwrap());
    tokio::time::sleep(Duration::from_secs(6)).await;
    let idle_after = berth_e2e::openstack_calls(&ccm.metrics().await.unwrap());
    assert_eq!(idle_after, idle_before, "no OpenStack call while nothing changes");

    // Deleted: the load balancers, the floating IP and the VIP ports go, then the Services.
    delete_service(&kube, &private, WAIT).await.unwrap();
    delete_service(&kube, &public, WAIT).await.unwrap();
    delete_service(&kube, &udp, WAIT).await.unwrap();
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        vip_ports_left(
            &os,
            &[private_lb.id.clone(), public_lb.id.clone(), udp_lb.id.clone()]
        )
        .await
        .unwrap(),
        Vec::<String>::new()
    );
    let reasons = service_event_reasons(&kube, &public).await;
    assert!(reasons.iter().any(|r| r == "DeletedLoadBalancer"), "{reasons:?}");
    for n in nodes {
        n.remove(&os, &kube).await.unwrap();
    }
}
