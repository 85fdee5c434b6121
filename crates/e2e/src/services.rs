//! LoadBalancer Services for the service-controller tests, and what they leave in OpenStack.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use anyhow::{Result, bail};
use berth_openstack::{Client, load_balancer::LoadBalancer};
use k8s_openapi::api::core::v1::{Event, Service};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;

use crate::{CloudController, HollowNodeOptions, Testbed, eventually};

/// A Service port: name, protocol, port.
pub type ServicePort<'a> = (&'a str, &'a str, u16);

/// A `type: LoadBalancer` Service in `default` with these ports and annotations; `extra` is
/// merged into its spec (e.g. `{"loadBalancerSourceRanges": [...]}`).
pub fn lb_service(
    name: &str,
    ports: &[ServicePort<'_>],
    annotations: &[(&str, &str)],
    extra: serde_json::Value,
) -> Result<Service> {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    let ports: Vec<_> = ports
        .iter()
        .map(|(n, proto, port)| json!({ "name": n, "protocol": proto, "port": port, "targetPort": 8080 }))
        .collect();
    let mut spec = json!({ "type": "LoadBalancer", "ports": ports, "selector": { "app": name } });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": "default", "annotations": annotations },
        "spec": spec,
    }))?)
}

/// Creates the Service.
pub async fn create_service(kube: &kube::Client, svc: &Service) -> Result<Service> {
    Ok(Api::<Service>::namespaced(kube.clone(), "default")
        .create(&PostParams::default(), svc)
        .await?)
}

/// The Service's first ingress IP or hostname, once it has one.
pub async fn wait_ingress(kube: &kube::Client, name: &str, timeout: Duration) -> Result<String> {
    let api = Api::<Service>::namespaced(kube.clone(), "default");
    eventually(&format!("ingress of Service {name}"), timeout, || async {
        let svc = api.get(name).await?;
        Ok(svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress)
            .and_then(|i| i.into_iter().next())
            .and_then(|i| i.ip.or(i.hostname)))
    })
    .await
}

/// Deletes the Service and waits until it is gone (its finalizer removed).
pub async fn delete_service(kube: &kube::Client, name: &str, timeout: Duration) -> Result<()> {
    let api = Api::<Service>::namespaced(kube.clone(), "default");
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    eventually(&format!("Service {name} gone"), timeout, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// The live load balancer of this name, if exactly one.
pub async fn lb_named(os: &Client, name: &str) -> Result<Option<LoadBalancer>> {
    let found: Vec<LoadBalancer> = os
        .load_balancer()
        .list(&[("name", name.to_owned())])
        .await?
        .into_iter()
        .filter(|l| l.provisioning_status != "DELETED")
        .collect();
    if found.len() > 1 {
        bail!("{} load balancers named {name}", found.len());
    }
    Ok(found.into_iter().next())
}

/// Everything in OpenStack that belongs to `cluster` (by berth's tag or upstream's name),
/// as `kind id`: load balancers, floating IPs, security groups and VIP ports.
pub async fn cluster_objects(os: &Client, cluster: &str) -> Result<Vec<String>> {
    let tag = format!("berth-cluster={cluster}");
    let prefix = format!("kube_service_{cluster}_");
    let mut found = Vec::new();
    let lbs = os.load_balancer().list(&[]).await?;
    for lb in &lbs {
        if lb.tags.contains(&tag) || lb.name.starts_with(&prefix) {
            found.push(format!(
                "loadbalancer {} {} {}",
                lb.id, lb.name, lb.provisioning_status
            ));
        }
    }
    for f in os.network().floating_ips(&[]).await? {
        if f.tags.contains(&tag) || f.description.ends_with(&format!("from cluster {cluster}")) {
            found.push(format!("floatingip {} {}", f.id, f.floating_ip_address));
        }
    }
    for g in os.network().security_groups(&[("tags", tag.clone())]).await? {
        found.push(format!("securitygroup {} {}", g.id, g.name));
    }
    Ok(found)
}

/// The VIP ports (Octavia names them `octavia-lb-<id>`) still there of these load balancers.
pub async fn vip_ports_left(os: &Client, lb_ids: &[String]) -> Result<Vec<String>> {
    let mut left = Vec::new();
    for id in lb_ids {
        for p in os
            .network()
            .ports(&[("name", format!("octavia-lb-{id}"))])
            .await?
        {
            left.push(format!("vip-port {} of load balancer {id}", p.id));
        }
    }
    Ok(left)
}

/// Options of a hollow Node labelled `e2e-cluster=<cluster>`: a test's Services select such
/// Nodes ([`node_selector`]), so their members are the test's Nodes whatever else the shared
/// cluster holds.
pub fn labelled_node(cluster: &str) -> HollowNodeOptions {
    HollowNodeOptions {
        heartbeat: Duration::from_secs(2),
        labels: [("e2e-cluster".to_owned(), cluster.to_owned())].into(),
        ..HollowNodeOptions::default()
    }
}

/// The `loadbalancer.openstack.org/node-selector` value that picks [`labelled_node`]s.
pub fn node_selector(cluster: &str) -> String {
    format!("e2e-cluster={cluster}")
}

/// `berth cloud-controller` with only its service controller, for `cluster`, plus `extra` flags.
pub fn service_controller(
    testbed: &Testbed,
    log_name: &str,
    cluster: &str,
    extra: &[&str],
) -> Result<CloudController> {
    let mut args = vec![
        "--cluster-name",
        cluster,
        "--controllers",
        "service",
        "--leader-elect=false",
    ];
    args.extend_from_slice(extra);
    CloudController::start(testbed, log_name, &args)
}

/// `reason: message` of every Event about the Service `name` in `default`.
pub async fn service_events(kube: &kube::Client, name: &str) -> Result<Vec<String>> {
    Ok(Api::<Event>::namespaced(kube.clone(), "default")
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Service")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect())
}

/// The member addresses of a load balancer with one pool.
pub async fn single_pool_members(os: &Client, lb: &LoadBalancer) -> Result<BTreeSet<String>> {
    let octavia = os.load_balancer();
    let pools = octavia.pools(&[("loadbalancer_id", lb.id.clone())]).await?;
    if pools.len() != 1 {
        bail!("load balancer {} has {} pools, not one", lb.id, pools.len());
    }
    Ok(octavia
        .members(&pools[0].id)
        .await?
        .into_iter()
        .map(|m| m.address)
        .collect())
}

/// Writes `dir/cloud.conf`: the testbed's, with `global` lines added to `[Global]` and `lb`
/// lines to `[LoadBalancer]` (each ending in a newline).
pub fn cloud_conf_with(
    testbed: &Testbed,
    dir: &std::path::Path,
    global: &str,
    lb: &str,
) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let text = std::fs::read_to_string(&testbed.cloud_conf)?;
    if !text.contains("[Global]\n") || !text.contains("[LoadBalancer]\n") {
        bail!(
            "{} lacks [Global] or [LoadBalancer]",
            testbed.cloud_conf.display()
        );
    }
    let text = text
        .replacen("[Global]\n", &format!("[Global]\n{global}"), 1)
        .replacen("[LoadBalancer]\n", &format!("[LoadBalancer]\n{lb}"), 1);
    let conf = dir.join("cloud.conf");
    std::fs::write(&conf, text)?;
    Ok(conf)
}
