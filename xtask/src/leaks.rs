//! What e2e tests left behind: servers, load balancers, networks, ports, floating IPs,
//! security groups, volumes and Nodes named (or described) `e2e-…`, and what berth's service
//! controller made for e2e clusters (tagged `berth-cluster=e2e-…`, or named
//! `kube_service_e2e-…`) and e2e Services, what benchmarks' clusters (`bench-…`) left, and load
//! balancers of kube-controller-manager's in-tree provider (`a<uid>`, made only by tests and
//! benchmarks here).

use anyhow::{Result, bail};
use berth_e2e::{E2E_PREFIX, Testbed};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};

/// The cluster-name prefixes of tests (`e2e-…`) and benchmarks (`bench-berth`, `bench-intree`).
const TEST_CLUSTERS: [&str; 2] = [E2E_PREFIX, "bench-"];

/// Made by berth's service controller for an e2e test's or a benchmark's cluster.
fn e2e_cluster(name: &str, description: &str, tags: &[String]) -> bool {
    TEST_CLUSTERS.iter().any(|prefix| {
        name.starts_with(&format!("kube_service_{prefix}"))
            || description.contains(&format!("from cluster {prefix}"))
            || tags
                .iter()
                .any(|t| t.starts_with(&format!("berth-cluster={prefix}")))
    })
}

/// Made by kube-controller-manager's in-tree provider (`a` + a Service UID without dashes, cut
/// to 32 characters):
/// on the testbed only the adoption test and `bench lb` run it.
fn in_tree(name: &str, description: &str) -> bool {
    name.len() == 32
        && name.starts_with('a')
        && name[1..].bytes().all(|b| b.is_ascii_hexdigit())
        && description.starts_with("Kubernetes external service")
}

/// Leftovers, each as `kind name (id)`.
pub(crate) fn find() -> Result<Vec<String>> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let tb = Testbed::load()?;
        let os = tb.openstack_demo().await?;
        let mut found = Vec::new();
        for s in os
            .compute()
            .servers(&[("name", format!("^{E2E_PREFIX}"))])
            .await?
        {
            found.push(format!("server {} ({}, {})", s.name, s.id, s.status));
        }
        for lb in os.load_balancer().list(&[]).await? {
            if in_tree(&lb.name, &lb.description) {
                for f in os
                    .network()
                    .floating_ips(&[("port_id", lb.vip_port_id.clone())])
                    .await?
                {
                    found.push(format!(
                        "floating IP {} ({}, in-tree)",
                        f.floating_ip_address, f.id
                    ));
                }
            }
            if lb.name.starts_with(E2E_PREFIX)
                || e2e_cluster(&lb.name, &lb.description, &lb.tags)
                || in_tree(&lb.name, &lb.description)
            {
                found.push(format!(
                    "load balancer {} ({}, {})",
                    lb.name, lb.id, lb.provisioning_status
                ));
            }
        }
        let net = os.network();
        for n in net.networks(&[]).await? {
            if n.name.starts_with(E2E_PREFIX) {
                found.push(format!("network {} ({})", n.name, n.id));
            }
        }
        for p in net.ports(&[]).await? {
            if p.name.starts_with(E2E_PREFIX) {
                found.push(format!("port {} ({})", p.name, p.id));
            }
        }
        for f in net.floating_ips(&[]).await? {
            if f.description.starts_with(E2E_PREFIX) || e2e_cluster("", &f.description, &f.tags) {
                found.push(format!("floating IP {} ({})", f.floating_ip_address, f.id));
            }
        }
        for g in net.security_groups(&[]).await? {
            if g.name.starts_with(E2E_PREFIX) || e2e_cluster(&g.name, &g.description, &g.tags) {
                found.push(format!("security group {} ({})", g.name, g.id));
            }
        }
        for v in os.volumes(&[]).await? {
            if v.name.as_deref().is_some_and(|n| n.starts_with(E2E_PREFIX)) {
                found.push(format!(
                    "volume {} ({}, {})",
                    v.name.unwrap_or_default(),
                    v.id,
                    v.status
                ));
            }
        }
        for p in os
            .network()
            .ports(&[("network_id", tb.tenant.network_id.clone())])
            .await?
        {
            // A compute port whose server is gone is a leak; routers' and DHCP ports are not ours.
            if p.device_owner.starts_with("compute:") && os.compute().server(&p.device_id).await.is_err() {
                found.push(format!("port {} of deleted server {}", p.id, p.device_id));
            }
        }
        let nodes = Api::<Node>::all(tb.kube().await?);
        for n in nodes.list(&ListParams::default()).await? {
            let name = n.metadata.name.unwrap_or_default();
            if name.starts_with(E2E_PREFIX) {
                found.push(format!("Node {name}"));
            }
        }
        for s in Api::<Service>::all(tb.kube().await?)
            .list(&ListParams::default())
            .await?
        {
            let name = s.metadata.name.unwrap_or_default();
            if name.starts_with(E2E_PREFIX) {
                found.push(format!(
                    "Service {}/{name}",
                    s.metadata.namespace.unwrap_or_default()
                ));
            }
        }
        Ok(found)
    })
}

/// Prints the leftovers; fails if there are any.
pub(crate) fn report(found: &[String]) -> Result<()> {
    if found.is_empty() {
        eprintln!("no leftovers: OpenStack and Kubernetes hold nothing named {E2E_PREFIX}…");
        return Ok(());
    }
    for f in found {
        eprintln!("LEAK: {f}");
    }
    bail!("{} object(s) left behind by the e2e tests", found.len())
}

/// Deletes everything named `e2e-…` that the demo user can see, and the e2e Nodes.
pub(crate) fn delete() -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let tb = Testbed::load()?;
        let os = tb.openstack_demo().await?;
        let net = os.network();
        let wait = std::time::Duration::from_secs(120);
        // Services first (without their finalizer), so no controller re-creates anything.
        let kube = tb.kube().await?;
        for s in Api::<Service>::all(kube.clone())
            .list(&ListParams::default())
            .await?
        {
            let name = s.metadata.name.unwrap_or_default();
            let ns = s.metadata.namespace.unwrap_or_default();
            if name.starts_with(E2E_PREFIX) {
                eprintln!("deleting Service {ns}/{name}");
                let api = Api::<Service>::namespaced(kube.clone(), &ns);
                let patch = serde_json::json!({ "metadata": { "finalizers": null } });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                let _ = api.delete(&name, &Default::default()).await;
            }
        }
        for f in net.floating_ips(&[]).await? {
            if e2e_cluster("", &f.description, &f.tags) {
                eprintln!("deleting floating IP {}", f.floating_ip_address);
                net.delete_floating_ip(&f.id).await?;
            }
        }
        for lb in os.load_balancer().list(&[]).await? {
            if in_tree(&lb.name, &lb.description) {
                // The in-tree provider's floating IPs carry no mark but their port.
                for f in net.floating_ips(&[("port_id", lb.vip_port_id.clone())]).await? {
                    eprintln!("deleting floating IP {} (in-tree)", f.floating_ip_address);
                    net.delete_floating_ip(&f.id).await?;
                }
            }
            if lb.name.starts_with(E2E_PREFIX)
                || e2e_cluster(&lb.name, &lb.description, &lb.tags)
                || in_tree(&lb.name, &lb.description)
            {
                eprintln!("deleting load balancer {} ({})", lb.name, lb.id);
                os.load_balancer().delete(&lb.id, true).await?;
                os.load_balancer().wait_deleted(&lb.id, wait).await?;
            }
        }
        for s in os
            .compute()
            .servers(&[("name", format!("^{E2E_PREFIX}"))])
            .await?
        {
            eprintln!("deleting server {} ({})", s.name, s.id);
            os.compute().delete_server(&s.id).await?;
            os.compute().wait_for_deletion(&s.id, wait).await?;
        }
        for v in os.volumes(&[]).await? {
            if v.name.as_deref().is_some_and(|n| n.starts_with(E2E_PREFIX)) {
                eprintln!("deleting volume {}", v.id);
                os.block_storage().delete_volume(&v.id).await?;
            }
        }
        for f in net.floating_ips(&[]).await? {
            if f.description.starts_with(E2E_PREFIX) {
                eprintln!("deleting floating IP {}", f.floating_ip_address);
                net.delete_floating_ip(&f.id).await?;
            }
        }
        for p in net.ports(&[]).await? {
            if p.name.starts_with(E2E_PREFIX) {
                eprintln!("deleting port {} ({})", p.name, p.id);
                net.delete_port(&p.id).await?;
            }
        }
        for g in net.security_groups(&[]).await? {
            if g.name.starts_with(E2E_PREFIX) || e2e_cluster(&g.name, &g.description, &g.tags) {
                eprintln!("deleting security group {}", g.name);
                net.delete_security_group(&g.id).await?;
            }
        }
        for n in net.networks(&[]).await? {
            if n.name.starts_with(E2E_PREFIX) {
                eprintln!("deleting network {}", n.name);
                net.delete_network(&n.id).await?;
            }
        }
        let nodes = Api::<Node>::all(tb.kube().await?);
        for n in nodes.list(&ListParams::default()).await? {
            let name = n.metadata.name.unwrap_or_default();
            if name.starts_with(E2E_PREFIX) {
                eprintln!("deleting Node {name}");
                nodes.delete(&name, &Default::default()).await?;
            }
        }
        Ok(())
    })
}
