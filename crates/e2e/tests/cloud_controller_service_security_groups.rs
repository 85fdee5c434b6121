//! `[LoadBalancer] manage-security-groups = true` on the testbed's real Neutron: a Service's
//! load balancer gets a security group `lb-sg-<id>` that opens its NodePorts to the member
//! subnet, on exactly its member Nodes' ports; a joining Node's port gets it, and deleting the
//! Service takes it off every port and deletes it, leaving the ports' other groups alone.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{
    HollowNode, Testbed, eventually,
    services::{
        cloud_conf_with, cluster_objects, create_service, delete_service, labelled_node, lb_named,
        lb_service, node_selector, service_controller, wait_ingress,
    },
    unique_name,
};
use berth_openstack::{Client, network::Port};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

async fn port_of(os: &Client, ip: &str) -> Port {
    let ports = os
        .network()
        .ports(&[("fixed_ips", format!("ip_address={ip}"))])
        .await
        .unwrap();
    assert_eq!(ports.len(), 1, "one port holds {ip}");
    ports.into_iter().next().unwrap()
}

/// `protocol port remote` of the group's ingress rules.
async fn ingress_rules(os: &Client, group: &str) -> BTreeSet<String> {
    os.network()
        .security_group(group)
        .await
        .unwrap()
        .security_group_rules
        .into_iter()
        .filter(|r| r.direction == "ingress")
        .map(|r| {
            format!(
                "{} {}-{} {}",
                r.protocol.unwrap_or_default(),
                r.port_range_min.unwrap_or_default(),
                r.port_range_max.unwrap_or_default(),
                r.remote_ip_prefix.unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_security_group_opens_the_node_ports_on_exactly_the_members_and_goes_with_the_service() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("sg");
    let dir = std::env::temp_dir().join(unique_name("sg-conf"));
    let conf = cloud_conf_with(&tb, &dir, "", "manage-security-groups = true\n").unwrap();
    let conf_arg = conf.display().to_string();

    let selector = node_selector(&cluster);
    let mut nodes = Vec::new();
    for _ in 0..2 {
        nodes.push(
            HollowNode::create(&tb, &os, &kube, &unique_name("sgn"), labelled_node(&cluster))
                .await
                .unwrap(),
        );
    }
    let groups_before = port_of(&os, &nodes[0].internal_ip).await.security_groups;
    let _ccm = service_controller(&tb, "sg", &cluster, &["--cloud-config", &conf_arg]).unwrap();

    let name = unique_name("guarded");
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
            json!({ "externalTrafficPolicy": "Local" }),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    wait_ingress(&kube, &name, WAIT).await.unwrap();
    let lb = lb_named(&os, &format!("kube_service_{cluster}_default_{name}"))
        .await
        .unwrap()
        .unwrap();
    let svc = Api::<Service>::namespaced(kube.clone(), "default")
        .get(&name)
        .await
        .unwrap();
    let spec = svc.spec.unwrap();
    let node_port = spec.ports.unwrap()[0].node_port.unwrap();
    let health_port = spec.health_check_node_port.unwrap();
    let subnet = os.network().subnet(&tb.tenant.subnet_id).await.unwrap().cidr;

    let groups = os
        .network()
        .security_groups(&[("name", format!("lb-sg-{}", lb.id))])
        .await
        .unwrap();
    assert_eq!(groups.len(), 1, "one group, named as upstream names it");
    let group = groups.into_iter().next().unwrap();
    assert!(
        group.tags.contains(&format!("berth-cluster={cluster}")),
        "{:?}",
        group.tags
    );
    assert_eq!(
        ingress_rules(&os, &group.id).await,
        BTreeSet::from([
            format!("tcp {node_port}-{node_port} {subnet}"),
            format!("tcp {health_port}-{health_port} {subnet}"),
        ]),
        "the NodePort and the health-check NodePort, from the member subnet"
    );
    for n in &nodes {
        let groups = port_of(&os, &n.internal_ip).await.security_groups;
        assert!(groups.contains(&group.id), "member {} carries it", n.name);
        assert!(
            groups_before.iter().all(|g| groups.contains(g)),
            "its other groups stay"
        );
    }

    // A joining Node's port gets it.
    nodes.push(
        HollowNode::create(&tb, &os, &kube, &unique_name("sgn"), labelled_node(&cluster))
            .await
            .unwrap(),
    );
    let joined = nodes[2].internal_ip.clone();
    eventually("the joined Node's port to carry the group", WAIT, || async {
        Ok(port_of(&os, &joined)
            .await
            .security_groups
            .contains(&group.id)
            .then_some(()))
    })
    .await
    .unwrap();

    // A Node that stops being a member (the selector no longer picks it) loses it; the other
    // members keep it.
    let left = nodes[0].internal_ip.clone();
    Api::<Node>::all(kube.clone())
        .patch(
            &nodes[0].name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "e2e-cluster": null } } })),
        )
        .await
        .unwrap();
    eventually("the Node that left to lose the group", WAIT, || async {
        Ok((!port_of(&os, &left).await.security_groups.contains(&group.id)).then_some(()))
    })
    .await
    .unwrap();
    for n in &nodes[1..] {
        let groups = port_of(&os, &n.internal_ip).await.security_groups;
        assert!(groups.contains(&group.id), "member {} still carries it", n.name);
    }

    // Deleted: off every port, gone, the ports keep their own groups.
    delete_service(&kube, &name, WAIT).await.unwrap();
    for n in &nodes {
        let groups = port_of(&os, &n.internal_ip).await.security_groups;
        assert!(!groups.contains(&group.id), "{} no longer carries it", n.name);
        assert!(groups_before.iter().all(|g| groups.contains(g)));
    }
    assert!(
        os.network()
            .security_group(&group.id)
            .await
            .unwrap_err()
            .is_not_found(),
        "the group is deleted"
    );
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new()
    );
    for n in nodes {
        n.remove(&os, &kube).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
