//! Octavia, Nova and Cinder through the client, against the testbed: whole lifecycles, and
//! nothing left afterwards.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{Testbed, unique_name};
use berth_openstack::{
    Client,
    load_balancer::{NewHealthMonitor, NewListener, NewLoadBalancer, NewMember, NewPool},
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

fn member(tb: &Testbed, last_octet: u8) -> NewMember {
    NewMember {
        address: format!("10.0.0.{last_octet}"),
        protocol_port: 30080,
        subnet_id: Some(tb.tenant.subnet_id.clone()),
        ..NewMember::default()
    }
}

fn addresses(members: &[berth_openstack::load_balancer::Member]) -> BTreeSet<String> {
    members.iter().map(|m| m.address.clone()).collect()
}

#[tokio::test]
async fn a_load_balancer_tree_in_one_call_then_batch_members_then_cascade_delete() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let lbs = os.load_balancer();
    let name = unique_name("lbtree");
    let created = lbs
        .create(&NewLoadBalancer {
            name: name.clone(),
            vip_subnet_id: tb.tenant.subnet_id.clone(),
            tags: vec!["berth-e2e".into()],
            listeners: vec![NewListener {
                name: format!("listener_0_{name}"),
                protocol: "TCP".into(),
                protocol_port: 80,
                allowed_cidrs: vec!["192.0.2.0/24".into()],
                default_pool: Some(NewPool {
                    name: format!("pool_0_{name}"),
                    protocol: "TCP".into(),
                    lb_algorithm: "ROUND_ROBIN".into(),
                    members: vec![member(&tb, 201), member(&tb, 202)],
                    healthmonitor: Some(NewHealthMonitor {
                        kind: "TCP".into(),
                        delay: 5,
                        timeout: 3,
                        max_retries: 1,
                        ..NewHealthMonitor::default()
                    }),
                    ..NewPool::default()
                }),
                ..NewListener::default()
            }],
            ..NewLoadBalancer::default()
        })
        .await
        .unwrap();
    let lb = lbs.wait_active(&created.id, WAIT).await.unwrap();
    let by_lb = [("loadbalancer_id", lb.id.clone())];
    let listeners = lbs.listeners(&by_lb).await.unwrap();
    assert_eq!(listeners.len(), 1);
    assert_eq!(listeners[0].protocol_port, 80);
    assert_eq!(
        listeners[0].allowed_cidrs.clone().unwrap_or_default(),
        ["192.0.2.0/24"]
    );
    let pools = lbs.pools(&by_lb).await.unwrap();
    assert_eq!(pools.len(), 1);
    let pool = &pools[0];
    let monitor = lbs
        .health_monitor(pool.healthmonitor_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!((monitor.kind.as_str(), monitor.delay), ("TCP", 5));
    assert_eq!(
        addresses(&lbs.members(&pool.id).await.unwrap()),
        ["10.0.0.201", "10.0.0.202"].map(String::from).into()
    );
    let tree = lbs.status_tree(&lb.id).await.unwrap();
    assert_eq!(
        tree["listeners"][0]["pools"][0]["members"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{tree}"
    );

    // One call replaces the member set: 202 stays, 201 goes, 203 comes.
    lbs.batch_update_members(&pool.id, &[member(&tb, 202), member(&tb, 203)])
        .await
        .unwrap();
    lbs.wait_active(&lb.id, WAIT).await.unwrap();
    assert_eq!(
        addresses(&lbs.members(&pool.id).await.unwrap()),
        ["10.0.0.202", "10.0.0.203"].map(String::from).into()
    );

    let listener = lbs
        .update_listener(&listeners[0].id, json!({ "connection_limit": 100 }))
        .await
        .unwrap();
    assert_eq!(listener.connection_limit, 100);
    lbs.wait_active(&lb.id, WAIT).await.unwrap();
    let tagged = lbs
        .update(&lb.id, json!({ "tags": ["berth-e2e", "svc-uid-1"] }))
        .await
        .unwrap();
    assert_eq!(tagged.tags.len(), 2);
    lbs.wait_active(&lb.id, WAIT).await.unwrap();
    assert_eq!(lbs.list(&[("tags", "svc-uid-1".into())]).await.unwrap().len(), 1);

    lbs.delete(&lb.id, true).await.unwrap();
    lbs.wait_deleted(&lb.id, WAIT).await.unwrap();
    assert!(lbs.listeners(&by_lb).await.unwrap().is_empty());
    assert!(lbs.pools(&by_lb).await.unwrap().is_empty());
    assert!(
        os.network()
            .ports(&[("id", lb.vip_port_id.clone())])
            .await
            .unwrap()
            .is_empty(),
        "VIP port leaked"
    );
}

async fn boot(tb: &Testbed, os: &Client, name: &str) -> String {
    let mut server = tb.server_spec(os, name).await.unwrap();
    server.availability_zone = Some(tb.availability_zone.clone());
    let id = os.compute().create_server(&server).await.unwrap();
    os.compute().wait_for_status(&id, "ACTIVE", WAIT).await.unwrap();
    id
}

#[tokio::test]
async fn a_server_is_created_stopped_started_and_deleted() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let compute = os.compute();
    assert!(
        compute
            .availability_zones()
            .await
            .unwrap()
            .contains(&tb.availability_zone)
    );
    let name = unique_name("srv");
    let id = boot(&tb, &os, &name).await;
    let server = compute.server(&id).await.unwrap();
    assert_eq!(
        server.availability_zone.as_deref(),
        Some(tb.availability_zone.as_str())
    );
    assert_eq!(server.flavor.unwrap().original_name, tb.flavor);
    let interfaces = compute.interface_attachments(&id).await.unwrap();
    assert_eq!(interfaces.len(), 1);
    assert_eq!(interfaces[0].net_id, tb.tenant.network_id);

    compute.server_action(&id, "os-stop").await.unwrap();
    compute.wait_for_status(&id, "SHUTOFF", WAIT).await.unwrap();
    compute.server_action(&id, "os-start").await.unwrap();
    compute.wait_for_status(&id, "ACTIVE", WAIT).await.unwrap();

    compute.delete_server(&id).await.unwrap();
    compute.wait_for_deletion(&id, WAIT).await.unwrap();
    assert!(os.network().ports(&[("device_id", id)]).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_volume_is_created_attached_detached_extended_snapshotted_and_deleted() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let bs = os.block_storage();
    assert!(!bs.volume_types().await.unwrap().is_empty());
    let name = unique_name("vol");
    let server = boot(&tb, &os, &name).await;
    let volume = bs
        .create_volume(json!({ "size": 1, "name": name, "availability_zone": tb.availability_zone }))
        .await
        .unwrap();
    bs.wait_volume_status(&volume.id, "available", WAIT)
        .await
        .unwrap();

    os.compute().attach_volume(&server, &volume.id).await.unwrap();
    let attached = bs.wait_volume_status(&volume.id, "in-use", WAIT).await.unwrap();
    assert_eq!(attached.attachments[0].server_id, server);
    assert_eq!(
        os.compute().volume_attachments(&server).await.unwrap()[0].volume_id,
        volume.id
    );
    os.compute().detach_volume(&server, &volume.id).await.unwrap();
    bs.wait_volume_status(&volume.id, "available", WAIT)
        .await
        .unwrap();
    assert!(os.compute().volume_attachments(&server).await.unwrap().is_empty());

    bs.extend_volume(&volume.id, 2).await.unwrap();
    let mut size = 0;
    for _ in 0..100 {
        let v = bs.volume(&volume.id).await.unwrap();
        if v.status == "available" && v.size == 2 {
            size = v.size;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(size, 2);

    let snapshot = bs.create_snapshot(&volume.id, &name).await.unwrap();
    for _ in 0..100 {
        if bs
            .snapshots(&[])
            .await
            .unwrap()
            .iter()
            .any(|s| s.id == snapshot.id && s.status == "available")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bs.delete_snapshot(&snapshot.id).await.unwrap();
    for _ in 0..100 {
        if bs
            .snapshots(&[])
            .await
            .unwrap()
            .iter()
            .all(|s| s.id != snapshot.id)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        bs.snapshots(&[])
            .await
            .unwrap()
            .iter()
            .all(|s| s.id != snapshot.id),
        "snapshot leaked"
    );

    bs.delete_volume(&volume.id).await.unwrap();
    bs.wait_volume_deleted(&volume.id, WAIT).await.unwrap();
    os.compute().delete_server(&server).await.unwrap();
    os.compute().wait_for_deletion(&server, WAIT).await.unwrap();
}
