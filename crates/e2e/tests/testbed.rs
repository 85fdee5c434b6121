//! The testbed itself: every OpenStack service answers the demo project's member, Octavia
//! takes a load balancer to ACTIVE and cascade-deletes it without leaking its VIP port, and
//! the Kubernetes API is ready at v1.20.2.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_e2e::{Testbed, unique_name};
use berth_openstack::load_balancer::NewLoadBalancer;

#[tokio::test]
async fn every_openstack_service_answers_the_demo_member() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let token = os.token().await.unwrap();
    assert_eq!(token.project_id.as_deref(), Some(tb.tenant.project_id.as_str()));
    assert!(
        token.roles.iter().any(|r| r == "load-balancer_member"),
        "roles: {:?}",
        token.roles
    );

    let flavors = os.compute().flavors().await.unwrap();
    assert!(
        flavors.iter().any(|f| f.name == tb.flavor),
        "flavors: {flavors:?}"
    );
    let nets = os.network().networks(&[]).await.unwrap();
    assert!(nets.iter().any(|n| n.id == tb.tenant.network_id));
    assert!(
        nets.iter()
            .any(|n| n.id == tb.tenant.public_network_id && n.external)
    );
    let routers = os
        .network()
        .routers(&[("id", tb.tenant.router_id.clone())])
        .await
        .unwrap();
    assert_eq!(routers.len(), 1);
    assert_eq!(os.images_named(&tb.image).await.unwrap().len(), 1);
    os.volumes(&[]).await.unwrap();
    os.load_balancer().list(&[]).await.unwrap();
}

#[tokio::test]
async fn octavia_load_balancer_goes_active_and_cascade_delete_frees_the_vip() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let lbs = os.load_balancer();
    let name = unique_name("lb");
    let created = lbs
        .create(&NewLoadBalancer {
            name: name.clone(),
            vip_subnet_id: tb.tenant.subnet_id.clone(),
            tags: vec!["berth-e2e".into()],
            ..NewLoadBalancer::default()
        })
        .await
        .unwrap();
    let active = lbs
        .wait_active(&created.id, Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(active.name, name);
    assert!(
        active.vip_address.starts_with("10.0.0."),
        "VIP {}",
        active.vip_address
    );
    let vip_ports = os
        .network()
        .ports(&[("id", active.vip_port_id.clone())])
        .await
        .unwrap();
    assert_eq!(vip_ports.len(), 1, "the VIP is a real Neutron port");

    lbs.delete(&created.id, true).await.unwrap();
    lbs.wait_deleted(&created.id, Duration::from_secs(90))
        .await
        .unwrap();
    assert!(lbs.list(&[("name", name.clone())]).await.unwrap().is_empty());
    let left = os
        .network()
        .ports(&[("id", active.vip_port_id.clone())])
        .await
        .unwrap();
    assert!(left.is_empty(), "VIP port leaked: {left:?}");
}

#[tokio::test]
async fn kubernetes_api_is_ready_at_1_20_2() {
    let tb = Testbed::load().unwrap();
    let kube = tb.kube().await.unwrap();
    let version = kube.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.20.2");
    let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
    let ready: String = kube.request_text(req).await.unwrap();
    assert_eq!(ready, "ok");
}
