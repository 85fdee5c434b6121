//! Tests of what a Service asks for, and of the plans made from it.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::json;

use super::*;
use crate::services::octavia::{Applied, AppliedPort, member_subnet, name_matches, plan_names, tags_match};

fn config(extra: &str) -> CloudConfig {
    let text = format!(
        "[Global]\nauth-url = http://127.0.0.1:5000/v3\nusername = u\npassword = p\ntenant-name = t\n\
         [LoadBalancer]\nsubnet-id = sub-1\nfloating-network-id = ext-1\n{extra}\n\
         [LoadBalancerClass \"gold\"]\nsubnet-id = sub-gold\nfloating-network-id = ext-gold\n"
    );
    CloudConfig::parse(Path::new("/etc/kubernetes/cloud.conf"), &text, &|_| None).unwrap()
}

fn all_features() -> Features {
    Features::of_version((2, 30))
}

fn service(annotations: serde_json::Value, spec: serde_json::Value) -> Service {
    let mut s = json!({
        "type": "LoadBalancer",
        "ports": [{ "name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080 }],
    });
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "shop", "uid": "1234-abcd", "annotations": annotations },
        "spec": s,
    }))
    .unwrap()
}

fn node(name: &str, ip: &str, ready: bool, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "status": {
            "addresses": [{ "type": "InternalIP", "address": ip }],
            "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }],
        },
    }))
    .unwrap()
}

fn build_with(cfg: &CloudConfig, svc: &Service, nodes: &[Node]) -> Result<Desired, Error> {
    let inputs = Inputs {
        config: cfg,
        cluster: "prod",
        features: all_features(),
        detected_floating_network: None,
    };
    build(svc, nodes.iter(), &inputs)
}

fn err_text(r: Result<Desired, Error>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn a_plain_service_gets_upstream_names_tags_and_a_public_address() {
    let cfg = config("");
    let nodes = [
        node("n1", "10.0.0.5", true, json!({})),
        node("n2", "10.0.0.6", true, json!({})),
    ];
    let d = build_with(&cfg, &service(json!({}), json!({})), &nodes).unwrap();
    assert_eq!(d.name, "kube_service_prod_shop_web");
    assert_eq!(d.legacy_name, "a1234abcd");
    assert_eq!(
        d.tags,
        [
            "kube_service_prod_shop_web",
            "berth-cluster=prod",
            "berth-service=1234-abcd"
        ]
    );
    assert_eq!(
        d.description,
        "Kubernetes external service shop/web from cluster prod"
    );
    assert_eq!(d.vip.subnet_id.as_deref(), Some("sub-1"));
    assert_eq!(d.member_subnet_id.as_deref(), Some("sub-1"));
    assert_eq!(d.floating.as_ref().unwrap().network_id.as_deref(), Some("ext-1"));
    let port = &d.ports[0];
    assert_eq!((port.listener.protocol.as_str(), port.listener.port), ("TCP", 80));
    assert_eq!(port.listener.connection_limit, -1);
    assert_eq!(port.listener.timeouts, Some([50_000, 5_000, 50_000, 0]));
    assert_eq!(port.pool.lb_algorithm, "ROUND_ROBIN");
    assert_eq!(port.monitor, None, "create-monitor is off by default");
    let members: Vec<(&str, u16)> = port
        .members
        .iter()
        .map(|m| (m.address.as_str(), m.port))
        .collect();
    assert_eq!(members, [("10.0.0.5", 30080), ("10.0.0.6", 30080)]);
}

#[test]
fn internal_services_get_no_floating_ip_and_the_config_can_force_it() {
    let cfg = config("");
    let internal = json!({ annotation::INTERNAL: "true" });
    let d = build_with(
        &cfg,
        &service(internal, json!({ "loadBalancerIP": "10.0.0.99" })),
        &[],
    )
    .unwrap();
    assert_eq!(d.floating, None);
    assert_eq!(
        d.vip.address.as_deref(),
        Some("10.0.0.99"),
        "loadBalancerIP is the VIP of an internal Service"
    );

    let forced = config("internal-lb = true");
    let public = json!({ annotation::INTERNAL: "false" });
    assert_eq!(
        build_with(&forced, &service(public, json!({})), &[])
            .unwrap()
            .floating,
        None
    );

    let d = build_with(
        &cfg,
        &service(json!({}), json!({ "loadBalancerIP": "203.0.113.7" })),
        &[],
    )
    .unwrap();
    assert_eq!(d.floating.unwrap().address.as_deref(), Some("203.0.113.7"));
    assert_eq!(d.vip.address, None);
}

#[test]
fn a_class_beats_annotations_which_beat_the_config() {
    let cfg = config("");
    let d = build_with(
        &cfg,
        &service(
            json!({ annotation::SUBNET_ID: "sub-annot", annotation::FLOATING_NETWORK_ID: "ext-annot" }),
            json!({}),
        ),
        &[],
    )
    .unwrap();
    assert_eq!(d.vip.subnet_id.as_deref(), Some("sub-annot"));
    assert_eq!(d.floating.unwrap().network_id.as_deref(), Some("ext-annot"));
    let d = build_with(
        &cfg,
        &service(
            json!({ annotation::CLASS: "gold", annotation::SUBNET_ID: "sub-annot" }),
            json!({}),
        ),
        &[],
    )
    .unwrap();
    assert_eq!(d.vip.subnet_id.as_deref(), Some("sub-gold"));
    assert_eq!(d.floating.unwrap().network_id.as_deref(), Some("ext-gold"));
}

#[test]
fn bad_input_names_the_annotation_the_value_and_what_is_accepted() {
    let cfg = config("");
    let cases = [
        (
            json!({ annotation::LB_METHOD: "FASTEST" }),
            json!({}),
            vec!["lb-method", "FASTEST", "ROUND_ROBIN, LEAST_CONNECTIONS"],
        ),
        (
            json!({ annotation::PROXY_PROTOCOL: "v3" }),
            json!({}),
            vec!["proxy-protocol", "v3", "true, v1, v2, false"],
        ),
        (
            json!({ annotation::CONNECTION_LIMIT: "lots" }),
            json!({}),
            vec!["connection-limit", "lots"],
        ),
        (
            json!({ annotation::INTERNAL: "maybe" }),
            json!({}),
            vec!["openstack-internal-load-balancer", "maybe", "true, false"],
        ),
        (
            json!({ annotation::CLASS: "silver" }),
            json!({}),
            vec!["class", "silver", "gold", "cloud.conf"],
        ),
        (
            json!({ annotation::NODE_SELECTOR: "=x" }),
            json!({}),
            vec!["node-selector", "no label key"],
        ),
        (
            json!({ annotation::PROXY_PROTOCOL: "true", annotation::X_FORWARDED_FOR: "true" }),
            json!({}),
            vec!["cannot be used together"],
        ),
        (
            json!({}),
            json!({ "loadBalancerSourceRanges": ["10.0.0.0/33"] }),
            vec!["loadBalancerSourceRanges", "10.0.0.0/33"],
        ),
        (
            json!({}),
            json!({ "ports": [{ "name": "sig", "protocol": "SCTP", "port": 9, "nodePort": 30009 }] }),
            vec!["SCTP", "accepted: TCP, UDP"],
        ),
    ];
    for (annotations, spec, wanted) in cases {
        let text = err_text(build_with(&cfg, &service(annotations.clone(), spec), &[]));
        for w in wanted {
            assert!(text.contains(w), "{annotations}: {text:?} lacks {w:?}");
        }
    }
}

#[test]
fn members_are_ready_schedulable_included_selected_nodes() {
    let cfg = config("");
    let mut cordoned = node("cordoned", "10.0.0.4", true, json!({ "pool": "a" }));
    cordoned.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    let nodes = [
        node("ready", "10.0.0.1", true, json!({ "pool": "a" })),
        node("notready", "10.0.0.2", false, json!({ "pool": "a" })),
        node(
            "excluded",
            "10.0.0.3",
            true,
            json!({ "pool": "a", EXCLUDE_LABEL: "" }),
        ),
        cordoned,
        node("other", "10.0.0.5", true, json!({ "pool": "b" })),
    ];
    let names = |d: &Desired| -> Vec<String> { d.ports[0].members.iter().map(|m| m.name.clone()).collect() };
    let d = build_with(&cfg, &service(json!({}), json!({})), &nodes).unwrap();
    assert_eq!(names(&d), ["ready", "other"], "ordered by address");
    let d = build_with(
        &cfg,
        &service(json!({ annotation::NODE_SELECTOR: "pool=a" }), json!({})),
        &nodes,
    )
    .unwrap();
    assert_eq!(names(&d), ["ready"]);
    let by_config = config("node-selector = pool=b");
    assert_eq!(
        names(&build_with(&by_config, &service(json!({}), json!({})), &nodes).unwrap()),
        ["other"]
    );
    // No NodePort allocated: nothing to send traffic to.
    let d = build_with(
        &cfg,
        &service(json!({}), json!({ "ports": [{ "port": 80 }] })),
        &nodes,
    )
    .unwrap();
    assert!(d.ports[0].members.is_empty());
}

#[test]
fn health_monitors_follow_protocol_and_traffic_policy() {
    let cfg = config("create-monitor = true\nmonitor-delay = 7s");
    let nodes = [node("n1", "10.0.0.5", true, json!({}))];
    let d = build_with(&cfg, &service(json!({}), json!({})), &nodes).unwrap();
    let m = d.ports[0].monitor.clone().unwrap();
    assert_eq!(
        (
            m.kind.as_str(),
            m.delay,
            m.timeout,
            m.max_retries,
            m.max_retries_down
        ),
        ("TCP", 7, 3, 1, 3)
    );
    let udp = json!({ "ports": [{ "protocol": "UDP", "port": 53, "nodePort": 30053 }] });
    let d = build_with(&cfg, &service(json!({}), udp), &nodes).unwrap();
    assert_eq!(d.ports[0].monitor.as_ref().unwrap().kind, "UDP-CONNECT");
    let local = json!({ "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000 });
    let d = build_with(
        &cfg,
        &service(json!({ annotation::HEALTH_MONITOR_DELAY: "11" }), local),
        &nodes,
    )
    .unwrap();
    let m = d.ports[0].monitor.clone().unwrap();
    assert_eq!(
        (m.kind.as_str(), m.url_path.as_deref(), m.delay),
        ("HTTP", Some("/healthz"), 11)
    );
    assert_eq!(d.ports[0].members.first().unwrap().monitor_port, Some(32000));
    let off = json!({ annotation::ENABLE_HEALTH_MONITOR: "false" });
    assert_eq!(
        build_with(&cfg, &service(off, json!({})), &nodes).unwrap().ports[0].monitor,
        None
    );
}

#[test]
fn affinity_proxy_and_source_ranges_become_octavia_settings() {
    let cfg = config("");
    let d = build_with(
        &cfg,
        &service(
            json!({ annotation::PROXY_PROTOCOL: "v2", annotation::LB_METHOD: "least_connections" }),
            json!({ "sessionAffinity": "ClientIP", "loadBalancerSourceRanges": ["192.0.2.7/24", "198.51.100.0/24"] }),
        ),
        &[],
    )
    .unwrap();
    let p = &d.ports[0];
    assert_eq!(p.pool.protocol, "PROXYV2");
    assert_eq!(p.listener.protocol, "TCP");
    assert_eq!(p.pool.lb_algorithm, "LEAST_CONNECTIONS");
    assert_eq!(p.pool.persistence.as_deref(), Some("SOURCE_IP"));
    assert_eq!(p.listener.allowed_cidrs, ["192.0.2.0/24", "198.51.100.0/24"]);
    let d = build_with(
        &cfg,
        &service(json!({ annotation::SOURCE_RANGES: "0.0.0.0/0" }), json!({})),
        &[],
    )
    .unwrap();
    assert!(
        d.ports[0].listener.allowed_cidrs.is_empty(),
        "everyone is no list"
    );
    let old = Inputs {
        config: &cfg,
        cluster: "prod",
        features: Features::of_version((2, 0)),
        detected_floating_network: None,
    };
    let d = build(&service(json!({}), json!({})), std::iter::empty(), &old).unwrap();
    assert!(
        d.tags.is_empty() && d.ports[0].listener.timeouts.is_none(),
        "old Octavia gets neither tags nor timeouts"
    );
}

#[test]
fn only_services_without_a_class_or_with_berths_class_are_served() {
    let plain = service(json!({}), json!({}));
    assert!(wants_load_balancer(&plain, None));
    let classed = service(json!({}), json!({ "loadBalancerClass": "example.com/other" }));
    assert!(!wants_load_balancer(&classed, None));
    assert!(wants_load_balancer(&classed, Some("example.com/other")));
    let cluster_ip = service(json!({}), json!({ "type": "ClusterIP" }));
    assert!(!wants_load_balancer(&cluster_ip, None));
}

fn applied_from(d: &Desired) -> Applied {
    Applied {
        id: "lb".into(),
        name: d.name.clone(),
        owned: true,
        vip_address: "10.0.0.9".into(),
        vip_port_id: "port".into(),
        vip_subnet_id: "sub-1".into(),
        tags: d.tags.clone(),
        ports: d
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| AppliedPort {
                listener_id: format!("l{i}"),
                pool_id: Some(format!("p{i}")),
                monitor_id: None,
                spec: p.clone(),
            })
            .collect(),
        floating_ip: None,
        floating_ip_known: true,
        security_group: None,
    }
}

#[test]
fn plans_change_only_what_differs() {
    let cfg = config("");
    let two = [
        node("n1", "10.0.0.5", true, json!({})),
        node("n2", "10.0.0.6", true, json!({})),
    ];
    let svc = service(json!({}), json!({}));
    let d = build_with(&cfg, &svc, &two[..1]).unwrap();
    let applied = applied_from(&d);
    assert!(
        plan_names(&d, &applied).is_empty(),
        "nothing to do when nothing changed"
    );
    let joined = build_with(&cfg, &svc, &two).unwrap();
    assert_eq!(
        plan_names(&joined, &applied),
        ["Members"],
        "a joining Node is one member update"
    );
    let limited = build_with(
        &cfg,
        &service(json!({ annotation::CONNECTION_LIMIT: "100" }), json!({})),
        &two[..1],
    )
    .unwrap();
    assert_eq!(plan_names(&limited, &applied), ["UpdateListener"]);
    let proxied = build_with(
        &cfg,
        &service(json!({ annotation::PROXY_PROTOCOL: "true" }), json!({})),
        &two[..1],
    )
    .unwrap();
    assert_eq!(
        plan_names(&proxied, &applied),
        ["ReplacePool"],
        "a pool's protocol cannot change in place"
    );
    let moved = build_with(
        &cfg,
        &service(
            json!({}),
            json!({ "ports": [{ "port": 8080, "nodePort": 30080 }] }),
        ),
        &two[..1],
    )
    .unwrap();
    assert_eq!(plan_names(&moved, &applied), ["AddListener", "RemoveListener"]);
    let mut adopted = applied.clone();
    adopted.tags = vec!["a1234abcd".into()];
    assert_eq!(
        plan_names(&d, &adopted),
        ["Tags"],
        "an adopted load balancer gets berth's tags"
    );
}

#[test]
fn subnet_patterns_and_tags_match_as_upstream() {
    assert!(name_matches("public-*", "public-1").unwrap());
    assert!(!name_matches("public-*", "private-1").unwrap());
    assert!(name_matches("!public-*", "private-1").unwrap());
    assert!(name_matches("~^pub.*[0-9]$", "public-7").unwrap());
    assert!(name_matches("~(", "x").is_err());
    let tags = ["a".to_owned(), "b".to_owned()];
    assert!(tags_match("a,c", &tags));
    assert!(!tags_match("&a,c", &tags));
    assert!(tags_match("&a,b", &tags));
    assert!(tags_match("!c", &tags));
}

#[test]
fn names_are_cut_to_octavias_limit() {
    let long = "n".repeat(300);
    assert_eq!(lb_name("c", "ns", &long).len(), 255);
    assert_eq!(legacy_lb_name("0123456789abcdef-0123456789abcdef-ff").len(), 32);
}

#[test]
fn security_group_rules_open_node_ports_to_member_subnets() {
    use crate::services::security_group::{Rule, wanted_rules};
    let cfg = config("create-monitor = true");
    let nodes = [
        node("n1", "10.0.0.5", true, json!({})),
        node("n2", "10.1.0.5", true, json!({})),
    ];
    let local = json!({ "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
        "ports": [{ "protocol": "UDP", "port": 53, "nodePort": 30053 }] });
    let d = build_with(&cfg, &service(json!({}), local), &nodes).unwrap();
    // n2's subnet is unknown (no port found): no rule is made from a guess.
    let cidrs = [("10.0.0.5".to_owned(), "10.0.0.0/24".to_owned())].into();
    let rule = |protocol: &str, port| Rule {
        protocol: protocol.into(),
        port,
        remote: "10.0.0.0/24".into(),
    };
    assert_eq!(
        wanted_rules(&d, &cidrs),
        [rule("udp", 30053), rule("tcp", 32000)].into()
    );
}

#[test]
fn members_on_the_vip_subnet_are_sent_without_one() {
    let cfg = config("");
    let nodes = [node("n1", "10.0.0.5", true, json!({}))];
    let d = build_with(&cfg, &service(json!({}), json!({})), &nodes).unwrap();
    // Octavia puts a member without a subnet on the VIP's: the same, for fewer Neutron calls.
    assert_eq!(member_subnet(&d, "sub-1"), None);
    // VIP elsewhere (or not known yet: VIP by network or port): the members' subnet is said.
    assert_eq!(member_subnet(&d, "sub-vip").as_deref(), Some("sub-1"));
    assert_eq!(member_subnet(&d, "").as_deref(), Some("sub-1"));
    let annotated = service(
        json!({ "loadbalancer.openstack.org/member-subnet-id": "sub-members" }),
        json!({}),
    );
    let d = build_with(&cfg, &annotated, &nodes).unwrap();
    assert_eq!(member_subnet(&d, "sub-1").as_deref(), Some("sub-members"));
}
