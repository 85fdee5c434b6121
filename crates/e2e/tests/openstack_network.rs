//! Neutron through the client, against the testbed: everything made is deleted and checked.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use berth_e2e::{Testbed, unique_name};
use berth_openstack::network::{AddressPair, Route};
use serde_json::json;

#[tokio::test]
async fn network_subnet_and_port_with_allowed_address_pairs_and_tags() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let net = os.network();
    let name = unique_name("net");
    let network = net.create_network(&name).await.unwrap();
    let subnet = net
        .create_subnet(&network.id, &name, "192.168.77.0/24")
        .await
        .unwrap();
    assert_eq!(subnet.cidr, "192.168.77.0/24");

    let port = net
        .create_port(json!({ "network_id": network.id, "name": name }))
        .await
        .unwrap();
    assert_eq!(port.port_security_enabled, Some(true));
    let pairs = [AddressPair {
        ip_address: "10.244.3.0/24".into(),
        mac_address: None,
    }];
    let updated = net.set_allowed_address_pairs(&port.id, &pairs).await.unwrap();
    assert_eq!(updated.allowed_address_pairs.len(), 1);
    assert_eq!(updated.allowed_address_pairs[0].ip_address, "10.244.3.0/24");
    assert_eq!(
        net.port(&port.id).await.unwrap().allowed_address_pairs[0].ip_address,
        "10.244.3.0/24"
    );

    net.set_tags("ports", &port.id, &["berth-e2e".into(), "cluster-x".into()])
        .await
        .unwrap();
    net.add_tag("ports", &port.id, "svc-1").await.unwrap();
    net.remove_tag("ports", &port.id, "cluster-x").await.unwrap();
    let mut tags = net.port(&port.id).await.unwrap().tags;
    tags.sort();
    assert_eq!(tags, ["berth-e2e", "svc-1"]);
    let tagged = net.ports(&[("tags", "berth-e2e,svc-1".into())]).await.unwrap();
    assert!(tagged.iter().any(|p| p.id == port.id));

    net.delete_port(&port.id).await.unwrap();
    net.delete_subnet(&subnet.id).await.unwrap();
    net.delete_network(&network.id).await.unwrap();
    assert!(net.port(&port.id).await.unwrap_err().is_not_found());
    assert!(net.subnet(&subnet.id).await.unwrap_err().is_not_found());
    assert!(net.network(&network.id).await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn router_routes_atomic_and_serialised_and_a_foreign_route_survives() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let net = os.network();
    let router = &tb.tenant.router_id;
    // Distinct next hops per test run so parallel runs do not meet.
    let octet = 100 + fastrand::u8(0..100);
    let foreign = Route {
        destination: format!("172.31.{octet}.0/24"),
        nexthop: format!("10.0.0.{octet}"),
    };
    let a = Route {
        destination: format!("10.244.{octet}.0/24"),
        nexthop: format!("10.0.0.{octet}"),
    };
    let b = Route {
        destination: format!("10.245.{octet}.0/24"),
        nexthop: format!("10.0.0.{octet}"),
    };

    let routes = net
        .add_extraroutes(router, std::slice::from_ref(&foreign))
        .await
        .unwrap();
    assert!(routes.contains(&foreign));
    let routes = net
        .add_extraroutes(router, std::slice::from_ref(&a))
        .await
        .unwrap();
    assert!(routes.contains(&a) && routes.contains(&foreign));
    let routes = net
        .add_extraroutes(router, std::slice::from_ref(&a))
        .await
        .unwrap();
    assert_eq!(
        routes.iter().filter(|r| **r == a).count(),
        1,
        "adding twice keeps one"
    );

    let routes = net
        .update_routes_serially(router, std::slice::from_ref(&b), std::slice::from_ref(&a))
        .await
        .unwrap();
    assert!(routes.contains(&b) && !routes.contains(&a) && routes.contains(&foreign));

    let routes = net
        .remove_extraroutes(router, std::slice::from_ref(&b))
        .await
        .unwrap();
    assert!(
        !routes.contains(&b) && routes.contains(&foreign),
        "only what was asked is removed"
    );

    net.remove_extraroutes(router, std::slice::from_ref(&foreign))
        .await
        .unwrap();
    let left = net.router(router).await.unwrap().routes;
    assert!(![&a, &b, &foreign].iter().any(|r| left.contains(r)), "{left:?}");
}

#[tokio::test]
async fn floating_ip_allocate_associate_release() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let net = os.network();
    let name = unique_name("fip");
    let port = net
        .create_port(json!({ "network_id": tb.tenant.network_id, "name": name }))
        .await
        .unwrap();
    let fip = net
        .create_floating_ip(
            json!({ "floating_network_id": tb.tenant.public_network_id, "description": name }),
        )
        .await
        .unwrap();
    assert!(
        fip.floating_ip_address.starts_with("203.0.113."),
        "{}",
        fip.floating_ip_address
    );
    assert_eq!(fip.port_id, None);
    let bound = net.associate_floating_ip(&fip.id, Some(&port.id)).await.unwrap();
    assert_eq!(bound.port_id.as_deref(), Some(port.id.as_str()));
    let unbound = net.associate_floating_ip(&fip.id, None).await.unwrap();
    assert_eq!(unbound.port_id, None);
    net.delete_floating_ip(&fip.id).await.unwrap();
    net.delete_port(&port.id).await.unwrap();
    assert!(net.floating_ip(&fip.id).await.unwrap_err().is_not_found());
    assert!(
        net.floating_ips(&[])
            .await
            .unwrap()
            .iter()
            .all(|f| f.id != fip.id)
    );
}

#[tokio::test]
async fn security_group_with_a_rule() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let net = os.network();
    let name = unique_name("sg");
    let sg = net.create_security_group(&name, "berth e2e").await.unwrap();
    let rule = net
        .create_security_group_rule(json!({
            "security_group_id": sg.id, "direction": "ingress", "ethertype": "IPv4",
            "protocol": "tcp", "port_range_min": 30000, "port_range_max": 32767,
            "remote_ip_prefix": "10.0.0.0/24"
        }))
        .await
        .unwrap();
    let got = net.security_group(&sg.id).await.unwrap();
    let r = got.security_group_rules.iter().find(|r| r.id == rule.id).unwrap();
    assert_eq!((r.port_range_min, r.port_range_max), (Some(30000), Some(32767)));
    assert_eq!(r.remote_ip_prefix.as_deref(), Some("10.0.0.0/24"));
    net.delete_security_group_rule(&rule.id).await.unwrap();
    net.delete_security_group(&sg.id).await.unwrap();
    assert!(net.security_group(&sg.id).await.unwrap_err().is_not_found());
}
