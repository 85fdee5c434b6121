//! `cargo xtask demo`: berth's main job on the local testbed.
//!
//! Brings the testbed up, checks that it serves what berth needs (Octavia takes a load
//! balancer to ACTIVE on the cluster subnet; the Kubernetes API is ready), then starts
//! `berth cloud-controller` (left running, like a real one) and registers two hollow nodes the
//! way kubelets with `--cloud-provider=external` would: it shows them initialised from their
//! Nova servers and their pod-network routes on the Neutron router. Last, the headline:
//! `kubectl expose … --type=LoadBalancer` as a Service `demo-web`, which gets an Octavia load
//! balancer with the two Nodes as members and a floating IP as its EXTERNAL-IP.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail, ensure};
use berth_e2e::{HollowNode, HollowNodeOptions, Testbed};
use berth_openstack::load_balancer::NewLoadBalancer;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::{
    paths,
    run::{Stopwatch, exec},
    testbed,
};

const CLUSTER_CIDR: &str = "10.244.0.0/16";
const NODES: [(&str, &str); 2] = [("demo-node-1", "10.244.1.0/24"), ("demo-node-2", "10.244.2.0/24")];

pub(crate) fn run() -> Result<()> {
    testbed::up(&testbed::UpOptions::default())?;
    exec(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())).args([
            "build",
            "--package",
            "berth",
        ]),
    )?;
    tokio::runtime::Runtime::new()?.block_on(async {
        check().await?;
        cloud_controller().await
    })?;
    let dir = paths::testbed_dir();
    println!();
    println!("The testbed is up: real OpenStack and Kubernetes 1.20.2 on 127.0.0.1, with berth's");
    println!("cloud controller running (log: {}).", ccm_log().display());
    println!();
    println!("  source {}/env", dir.display());
    println!("  kubectl get nodes -o wide; kubectl describe node demo-node-1");
    println!("  kubectl get svc {DEMO_SERVICE}; kubectl describe svc {DEMO_SERVICE}");
    println!("  openstack loadbalancer list; openstack floating ip list");
    println!("  openstack server list; openstack router show berth-router -c routes");
    println!("  curl -s http://127.0.0.1:10258/metrics | grep ^berth_");
    println!();
    println!(
        "  cloud.conf for a cluster in the demo project: {}/cloud.conf",
        dir.display()
    );
    println!("  stop it all with: cargo xtask testbed down   (add --purge to wipe its state)");
    Ok(())
}

async fn check() -> Result<()> {
    let tb = Testbed::load()?;
    let os = tb.openstack_demo().await?;
    let lbs = os.load_balancer();
    let clock = Stopwatch::start();
    let lb = lbs
        .create(&NewLoadBalancer {
            name: "berth-demo-check".into(),
            description: "made and deleted by cargo xtask demo".into(),
            vip_subnet_id: tb.tenant.subnet_id.clone(),
            tags: vec!["berth-demo".into()],
            ..NewLoadBalancer::default()
        })
        .await
        .context("creating a load balancer as the demo user")?;
    let active = lbs.wait_active(&lb.id, Duration::from_secs(120)).await?;
    println!(
        "Octavia: load balancer {} is {} with VIP {} after {:.1}s",
        active.name,
        active.provisioning_status,
        active.vip_address,
        clock.secs()
    );
    lbs.delete(&lb.id, true).await?;
    lbs.wait_deleted(&lb.id, Duration::from_secs(120)).await?;
    println!("Octavia: cascade delete removed it again");

    let kube = tb.kube().await?;
    let version = kube.apiserver_version().await?;
    let readyz: String = kube
        .request_text(http::Request::get("/readyz").body(Vec::new())?)
        .await?;
    ensure!(readyz == "ok", "kube-apiserver /readyz answered {readyz:?}");
    println!("Kubernetes: {} /readyz {readyz}", version.git_version);
    Ok(())
}

fn ccm_log() -> PathBuf {
    paths::testbed_dir().join("berth-cloud-controller.log")
}

/// The running demo controller's pid, if its pid file names a live berth process.
pub(crate) fn ccm_pid() -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(paths::testbed_dir().join("berth-cloud-controller.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    String::from_utf8_lossy(&cmdline)
        .contains("cloud-controller")
        .then_some(pid)
}

async fn cloud_controller() -> Result<()> {
    let tb = Testbed::load()?;
    if ccm_pid().is_none() {
        let bin = paths::cargo_target().join("debug/berth");
        let log = std::fs::File::create(ccm_log())?;
        let child = Command::new(&bin)
            .arg("cloud-controller")
            .arg("--kubeconfig")
            .arg(&tb.kubeconfig)
            .arg("--cloud-config")
            .arg(&tb.cloud_conf)
            .args(["--cluster-cidr", CLUSTER_CIDR, "--cluster-name", "demo"])
            .args([
                "--metrics-bind-address",
                "127.0.0.1:10258",
                "--node-sync-period",
                "10s",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        std::fs::write(
            paths::testbed_dir().join("berth-cloud-controller.pid"),
            child.id().to_string(),
        )?;
        println!("berth cloud-controller: started (pid {})", child.id());
    } else {
        println!("berth cloud-controller: already running");
    }

    let os = tb.openstack_demo().await?;
    let kube = tb.kube().await?;
    let nodes = Api::<Node>::all(kube.clone());
    for (name, cidr) in NODES {
        if nodes.get_opt(name).await?.is_none() {
            let options = HollowNodeOptions {
                uninitialized_taint: true,
                pod_cidr: Some(cidr.into()),
                ..HollowNodeOptions::default()
            };
            // The heartbeat stops when the demo exits; nothing here needs it afterwards.
            let node = HollowNode::create(&tb, &os, &kube, name, options).await?;
            println!(
                "registered Node {name} (server {}, {}) with the uninitialized taint",
                node.server_id, node.internal_ip
            );
        }
    }
    let clock = Stopwatch::start();
    loop {
        let mut ready = 0;
        for (name, _) in NODES {
            let n = nodes.get(name).await?;
            let tainted = n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| {
                t.iter()
                    .any(|t| t.key == "node.cloudprovider.kubernetes.io/uninitialized")
            });
            let routed = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
                });
            if !tainted && routed {
                ready += 1;
            }
        }
        if ready == NODES.len() {
            break;
        }
        if clock.secs() > 90.0 {
            bail!(
                "the nodes were not initialised and routed within 90s; see {}",
                ccm_log().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("\nNodes, initialised by berth in {:.1}s:", clock.secs());
    println!(
        "  {:<12} {:<48} {:<11} {:<9} {:<7} POD-CIDR",
        "NAME", "PROVIDER-ID", "INTERNAL-IP", "TYPE", "ZONE"
    );
    for (name, _) in NODES {
        let n = nodes.get(name).await?;
        let label = |k: &str| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .cloned()
                .unwrap_or_default()
        };
        let spec = n.spec.clone().unwrap_or_default();
        let ip = n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
            .unwrap_or_default();
        println!(
            "  {:<12} {:<48} {:<11} {:<9} {:<7} {}",
            name,
            spec.provider_id.unwrap_or_default(),
            ip,
            label("node.kubernetes.io/instance-type"),
            label("topology.kubernetes.io/zone"),
            spec.pod_cidr.unwrap_or_default()
        );
    }
    let router = os.network().router(&tb.tenant.router_id).await?;
    println!("\nRoutes on router {}:", router.name);
    for r in router
        .routes
        .iter()
        .filter(|r| r.destination.starts_with("10.244."))
    {
        println!("  {} via {}", r.destination, r.nexthop);
    }
    load_balancer_service(&tb, &os, &kube).await
}

const DEMO_SERVICE: &str = "demo-web";

/// A LoadBalancer Service, as `kubectl expose deployment web --port 80 --type=LoadBalancer`
/// makes it, until it has its EXTERNAL-IP.
async fn load_balancer_service(
    tb: &Testbed,
    os: &berth_openstack::Client,
    kube: &kube::Client,
) -> Result<()> {
    use k8s_openapi::api::core::v1::Service;
    let services = Api::<Service>::namespaced(kube.clone(), "default");
    if services.get_opt(DEMO_SERVICE).await?.is_none() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": DEMO_SERVICE, "labels": { "app": "web" } },
            "spec": {
                "type": "LoadBalancer",
                "selector": { "app": "web" },
                "ports": [{ "name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080 }],
            },
        }))?;
        services.create(&kube::api::PostParams::default(), &svc).await?;
        println!(
            "
created Service {DEMO_SERVICE} (type LoadBalancer, port 80)"
        );
    }
    let clock = Stopwatch::start();
    let svc = loop {
        let svc = services.get(DEMO_SERVICE).await?;
        let has_ip = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .is_some_and(|i| !i.is_empty());
        if has_ip {
            break svc;
        }
        if clock.secs() > 120.0 {
            bail!(
                "Service {DEMO_SERVICE} got no EXTERNAL-IP within 120s; see {}",
                ccm_log().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let spec = svc.spec.clone().unwrap_or_default();
    let external = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .and_then(|i| i.into_iter().next())
        .and_then(|i| i.ip.or(i.hostname))
        .unwrap_or_default();
    let ports: Vec<String> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            format!(
                "{}:{}/{}",
                p.port,
                p.node_port.unwrap_or_default(),
                p.protocol.as_deref().unwrap_or("TCP")
            )
        })
        .collect();
    println!(
        "
kubectl get svc {DEMO_SERVICE}   (EXTERNAL-IP after {:.1}s)",
        clock.secs()
    );
    println!(
        "  {:<10} {:<13} {:<15} {:<15} PORT(S)",
        "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP"
    );
    println!(
        "  {:<10} {:<13} {:<15} {:<15} {}",
        DEMO_SERVICE,
        "LoadBalancer",
        spec.cluster_ip.unwrap_or_default(),
        external,
        ports.join(",")
    );
    let name = format!("kube_service_demo_default_{DEMO_SERVICE}");
    if let Some(lb) = os
        .load_balancer()
        .list(&[("name", name.clone())])
        .await?
        .into_iter()
        .next()
    {
        println!(
            "
Octavia load balancer {name}: {} VIP {} on {}",
            lb.provisioning_status,
            lb.vip_address,
            if lb.vip_subnet_id == tb.tenant.subnet_id {
                "berth-subnet"
            } else {
                "another subnet"
            }
        );
        for l in os
            .load_balancer()
            .listeners(&[("loadbalancer_id", lb.id.clone())])
            .await?
        {
            let members = match &l.default_pool_id {
                Some(pool) => os.load_balancer().members(pool).await?,
                None => Vec::new(),
            };
            let list: Vec<String> = members
                .iter()
                .map(|m| format!("{} {}:{}", m.name, m.address, m.protocol_port))
                .collect();
            println!(
                "  listener {}/{} -> members {}",
                l.protocol,
                l.protocol_port,
                list.join(", ")
            );
        }
    }
    Ok(())
}
