//! `berth cloud-controller`'s service controller on the testbed's real Octavia and Neutron:
//! LoadBalancer Services get load balancers and ingress, follow their Nodes, and leave
//! nothing behind.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, time::Duration};

use berth_e2e::{
    CloudController, HollowNode, Testbed, eventually,
    services::{
        cluster_objects, create_service, delete_service, labelled_node, lb_named, lb_service, node_selector,
        service_controller, service_events, vip_ports_left, wait_ingress,
    },
    unique_name,
};
use berth_openstack::{Client, load_balancer::LoadBalancer};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
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
    service_events(kube, name)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| Some(e.split_once(':')?.0.to_owned()))
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
    let options = || labelled_node(&cluster);
    let selector = node_selector(&cluster);
    let select = ("loadbalancer.openstack.org/node-selector", selector.as_str());
    let mut nodes = Vec::new();
    for _ in 0..2 {
        nodes.push(
            HollowNode::create(&tb, &os, &kube, &unique_name("lbn"), options())
                .await
                .unwrap(),
        );
    }
    let ccm = service_controller(&tb, "services", &cluster, &[]).unwrap();

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

/// A load balancer made by hand on the cluster subnet, with these tags.
async fn hand_made_lb(os: &Client, tb: &Testbed, name: &str, tags: Vec<String>) -> LoadBalancer {
    let lb = os
        .load_balancer()
        .create(&berth_openstack::load_balancer::NewLoadBalancer {
            name: name.into(),
            vip_subnet_id: tb.tenant.subnet_id.clone(),
            tags,
            ..Default::default()
        })
        .await
        .unwrap();
    os.load_balancer().wait_active(&lb.id, WAIT).await.unwrap()
}

fn berth_gc(tb: &Testbed, cluster: &str, dry_run: bool) -> String {
    let mut cmd = std::process::Command::new(berth_e2e::berth_binary().unwrap());
    cmd.args(["gc", "--cluster-name", cluster, "--cloud-config"])
        .arg(&tb.cloud_conf)
        .arg("--kubeconfig")
        .arg(&tb.kubeconfig);
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn gc_sweeps_what_a_gone_service_left_and_never_touches_foreign_objects() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let cluster = unique_name("gcc");
    // A leak: a load balancer and a floating IP tagged for this cluster and a Service UID
    // that no Service has (as if the Service's finalizer had been removed by hand).
    let gone_uid = "00000000-dead-beef-0000-000000000000";
    let tags = vec![
        format!("berth-cluster={cluster}"),
        format!("berth-service={gone_uid}"),
    ];
    let leaked = hand_made_lb(&os, &tb, &unique_name("leaked"), tags.clone()).await;
    let fip = os
        .network()
        .create_floating_ip(json!({ "floating_network_id": tb.tenant.public_network_id }))
        .await
        .unwrap();
    os.network()
        .set_tags("floatingips", &fip.id, &tags)
        .await
        .unwrap();
    // Foreign: untagged, and tagged for another cluster.
    let foreign = hand_made_lb(&os, &tb, &unique_name("foreign"), Vec::new()).await;
    let other_cluster = hand_made_lb(
        &os,
        &tb,
        &unique_name("othercluster"),
        vec![
            format!("berth-cluster={cluster}-other"),
            format!("berth-service={gone_uid}"),
        ],
    )
    .await;

    let dry = berth_gc(&tb, &cluster, true);
    assert!(dry.contains(&leaked.id) && dry.contains(&fip.id), "{dry}");
    assert!(dry.contains("would delete"), "{dry}");
    assert!(
        !dry.contains(&foreign.id) && !dry.contains(&other_cluster.id),
        "{dry}"
    );
    assert!(
        os.load_balancer().get(&leaked.id).await.is_ok(),
        "a dry run deletes nothing"
    );

    let done = berth_gc(&tb, &cluster, false);
    assert!(done.contains("deleted"), "{done}");
    os.load_balancer().wait_deleted(&leaked.id, WAIT).await.unwrap();
    assert!(
        os.network()
            .floating_ip(&fip.id)
            .await
            .unwrap_err()
            .is_not_found()
    );
    for untouched in [&foreign, &other_cluster] {
        assert_eq!(
            os.load_balancer()
                .get(&untouched.id)
                .await
                .unwrap()
                .provisioning_status,
            "ACTIVE",
            "foreign load balancers are never touched"
        );
        os.load_balancer().delete(&untouched.id, true).await.unwrap();
    }
    assert!(berth_gc(&tb, &cluster, false).contains("nothing to collect"));
    for untouched in [&foreign, &other_cluster] {
        os.load_balancer()
            .wait_deleted(&untouched.id, WAIT)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_restart_mid_create_makes_no_duplicate_and_a_service_deleted_while_pending_leaves_nothing() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("crash");
    let mut ccm = service_controller(&tb, "crash", &cluster, &[]).unwrap();
    let internal = [(
        "service.beta.kubernetes.io/openstack-internal-load-balancer",
        "true",
    )];

    // Killed as soon as its load balancer exists (still PENDING_CREATE, before any status).
    let first = unique_name("crash");
    let lb_name = format!("kube_service_{cluster}_default_{first}");
    create_service(
        &kube,
        &lb_service(&first, &[("http", "TCP", 80)], &internal, json!({})).unwrap(),
    )
    .await
    .unwrap();
    let made = eventually("the load balancer to be created", WAIT, || async {
        lb_named(&os, &lb_name).await
    })
    .await
    .unwrap();
    ccm.kill();
    let mut ccm = service_controller(&tb, "crash-restarted", &cluster, &[]).unwrap();
    let ip = wait_ingress(&kube, &first, WAIT).await.unwrap();
    let all: Vec<LoadBalancer> = os
        .load_balancer()
        .list(&[("name", lb_name.clone())])
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "one load balancer after the restart: {all:?}");
    assert_eq!(
        all[0].id, made.id,
        "the restarted controller adopted the first one"
    );
    assert_eq!(all[0].vip_address, ip);

    // Deleted while its load balancer is still being made: nothing stays.
    let second = unique_name("pending");
    let second_name = format!("kube_service_{cluster}_default_{second}");
    create_service(
        &kube,
        &lb_service(&second, &[("http", "TCP", 80)], &internal, json!({})).unwrap(),
    )
    .await
    .unwrap();
    let pending = eventually("the second load balancer", WAIT, || async {
        lb_named(&os, &second_name).await
    })
    .await
    .unwrap();
    delete_service(&kube, &second, WAIT).await.unwrap();
    assert!(lb_named(&os, &second_name).await.unwrap().is_none());

    delete_service(&kube, &first, WAIT).await.unwrap();
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        vip_ports_left(&os, &[made.id.clone(), pending.id.clone()])
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(ccm.exited(), None, "the controller kept running");
}

#[tokio::test]
async fn kept_floating_ips_hostnames_and_requested_addresses() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("fip");
    let _ccm = service_controller(&tb, "fip", &cluster, &[]).unwrap();

    // keep-floatingip and hostname: the ingress shows the hostname; the address outlives the
    // Service, marked so that the garbage collector leaves it too.
    let kept = unique_name("kept");
    create_service(
        &kube,
        &lb_service(
            &kept,
            &[("http", "TCP", 80)],
            &[
                ("loadbalancer.openstack.org/keep-floatingip", "true"),
                ("loadbalancer.openstack.org/hostname", "web.example.test"),
            ],
            json!({}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        wait_ingress(&kube, &kept, WAIT).await.unwrap(),
        "web.example.test"
    );
    let svc = Api::<Service>::namespaced(kube.clone(), "default")
        .get(&kept)
        .await
        .unwrap();
    let address =
        svc.metadata.annotations.as_ref().unwrap()["loadbalancer.openstack.org/load-balancer-address"]
            .clone();
    assert!(address.starts_with("203.0.113."), "the floating IP {address}");
    delete_service(&kube, &kept, WAIT).await.unwrap();
    let left = os
        .network()
        .floating_ips(&[("floating_ip_address", address.clone())])
        .await
        .unwrap();
    assert_eq!(left.len(), 1, "the kept floating IP is still allocated");
    assert_eq!(left[0].port_id, None, "and unbound");
    assert!(left[0].tags.iter().any(|t| t == "berth-keep-floatingip"));
    assert!(berth_gc(&tb, &cluster, true).contains("kept (keep-floatingip)"));

    // spec.loadBalancerIP takes that address again, and gives it back unbound when deleted.
    let reuse = unique_name("reuse");
    create_service(
        &kube,
        &lb_service(
            &reuse,
            &[("http", "TCP", 80)],
            &[],
            json!({ "loadBalancerIP": address }),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(wait_ingress(&kube, &reuse, WAIT).await.unwrap(), address);
    delete_service(&kube, &reuse, WAIT).await.unwrap();
    let left = os
        .network()
        .floating_ips(&[("floating_ip_address", address.clone())])
        .await
        .unwrap();
    assert_eq!(
        left.len(),
        1,
        "a floating IP berth did not allocate for the Service stays"
    );
    os.network().delete_floating_ip(&left[0].id).await.unwrap();
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn sctp_is_refused_with_an_event_and_type_changes_clean_up() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("sctp");
    let _ccm = service_controller(&tb, "sctp", &cluster, &[]).unwrap();
    let sctp = unique_name("sctp");
    create_service(
        &kube,
        &lb_service(&sctp, &[("sig", "SCTP", 9)], &[], json!({})).unwrap(),
    )
    .await
    .unwrap();
    let message = eventually("a SyncLoadBalancerFailed event", WAIT, || async {
        Ok(service_events(&kube, &sctp)
            .await?
            .into_iter()
            .find_map(|e| e.strip_prefix("SyncLoadBalancerFailed: ").map(str::to_owned)))
    })
    .await
    .unwrap();
    assert!(
        message.contains("SCTP") && message.contains("TCP, UDP"),
        "{message}"
    );
    assert!(
        lb_named(&os, &format!("kube_service_{cluster}_default_{sctp}"))
            .await
            .unwrap()
            .is_none()
    );
    delete_service(&kube, &sctp, WAIT).await.unwrap();

    // LoadBalancer → ClusterIP: the load balancer goes, the status and finalizer too.
    let changing = unique_name("retype");
    create_service(
        &kube,
        &lb_service(&changing, &[("http", "TCP", 80)], &[], json!({})).unwrap(),
    )
    .await
    .unwrap();
    wait_ingress(&kube, &changing, WAIT).await.unwrap();
    let api = Api::<Service>::namespaced(kube.clone(), "default");
    // kube-apiserver 1.20 may answer a Service patch 409 while the controller is writing the
    // same Service (its annotations, after the status): as kubectl would, try again.
    eventually("the type change accepted", WAIT, || async {
        match api
            .patch(
                &changing,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({ "spec": { "type": "ClusterIP" } })),
            )
            .await
        {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await
    .unwrap();
    eventually("the load balancer gone after the type change", WAIT, || async {
        let svc = api.get(&changing).await?;
        let clean = svc.metadata.finalizers.unwrap_or_default().is_empty()
            && svc
                .status
                .and_then(|s| s.load_balancer)
                .and_then(|l| l.ingress)
                .is_none_or(|i| i.is_empty());
        Ok((clean && cluster_objects(&os, &cluster).await?.is_empty()).then_some(()))
    })
    .await
    .unwrap();
    delete_service(&kube, &changing, WAIT).await.unwrap();
}

/// The listener ports on a load balancer (a listener being deleted still counts).
async fn listener_ports(os: &Client, lb: &LoadBalancer) -> BTreeSet<u16> {
    os.load_balancer()
        .listeners(&[("loadbalancer_id", lb.id.clone())])
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.provisioning_status != "DELETED")
        .map(|l| l.protocol_port)
        .collect()
}

/// Waits until the load balancer's listener ports are `want` (Octavia deletes in the background).
async fn wait_listener_ports(os: &Client, lb: &LoadBalancer, want: BTreeSet<u16>) {
    eventually("the listeners", WAIT, || async {
        Ok((listener_ports(os, lb).await == want).then_some(()))
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn services_share_a_load_balancer_up_to_max_shared_lb_and_the_owner_leaving_breaks_nobody() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let cluster = unique_name("share");
    let _ccm = service_controller(&tb, "share", &cluster, &[]).unwrap();
    let internal = (
        "service.beta.kubernetes.io/openstack-internal-load-balancer",
        "true",
    );
    let owner = unique_name("owner");
    create_service(
        &kube,
        &lb_service(&owner, &[("http", "TCP", 80)], &[internal], json!({})).unwrap(),
    )
    .await
    .unwrap();
    let vip = wait_ingress(&kube, &owner, WAIT).await.unwrap();
    let lb = lb_named(&os, &format!("kube_service_{cluster}_default_{owner}"))
        .await
        .unwrap()
        .unwrap();

    // A second Service joins it (max-shared-lb is 2 by default, the owner included).
    let share = ("loadbalancer.openstack.org/load-balancer-id", lb.id.as_str());
    let second = unique_name("second");
    create_service(
        &kube,
        &lb_service(&second, &[("api", "TCP", 81)], &[internal, share], json!({})).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(wait_ingress(&kube, &second, WAIT).await.unwrap(), vip);
    assert_eq!(listener_ports(&os, &lb).await, [80, 81].into());

    // A third is refused, with the reason, and changes nothing.
    let third = unique_name("third");
    create_service(
        &kube,
        &lb_service(&third, &[("x", "TCP", 82)], &[internal, share], json!({})).unwrap(),
    )
    .await
    .unwrap();
    let refusal = eventually("the third Service refused", WAIT, || async {
        Ok(service_events(&kube, &third)
            .await?
            .into_iter()
            .find(|e| e.starts_with("SyncLoadBalancerFailed:")))
    })
    .await
    .unwrap();
    assert!(refusal.contains("max-shared-lb (2)"), "{refusal}");
    assert_eq!(listener_ports(&os, &lb).await, [80, 81].into());
    delete_service(&kube, &third, WAIT).await.unwrap();

    // The owner leaves: its listener goes, the load balancer stays for the second Service.
    delete_service(&kube, &owner, WAIT).await.unwrap();
    wait_listener_ports(&os, &lb, [81].into()).await;
    // Not deleted: it comes back to ACTIVE once Octavia has removed the listener.
    os.load_balancer().wait_active(&lb.id, WAIT).await.unwrap();
    assert!(
        berth_gc(&tb, &cluster, true).contains("kept (shared by a live Service)"),
        "the sweep keeps it while the second Service uses it"
    );

    // The last one leaves: its listener goes, and berth sweeps the load balancer at once
    // (no `berth gc`, no waiting for the periodic sweep).
    delete_service(&kube, &second, WAIT).await.unwrap();
    os.load_balancer().wait_deleted(&lb.id, WAIT).await.unwrap();
    assert_eq!(
        cluster_objects(&os, &cluster).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        vip_ports_left(&os, std::slice::from_ref(&lb.id)).await.unwrap(),
        Vec::<String>::new()
    );
}
