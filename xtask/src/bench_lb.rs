//! `cargo xtask bench lb`: berth's service controller beside kube-controller-manager 1.20's
//! in-tree OpenStack provider (`use-octavia = true`), one after the other on the same testbed.
//!
//! Both run against a Kubernetes control plane of the bench's own (its own directory and
//! ports, so the shared one on :6443 and its Services are never touched) holding N hollow
//! nodes. For each peer: S LoadBalancer Services at once (a share of them public through a
//! floating IP), the time until every one has `status.loadBalancer.ingress` and the OpenStack
//! calls that took; one more Node, the time until it is a member of every pool and the calls
//! that took; the calls over an idle period; the controller's memory; then every Service
//! deleted, the time until they and their load balancers are gone and the calls that took.
//! OpenStack calls are counted in the APIs' own request logs (`testbed up --reqlog`) by user
//! agent, like `bench nodes`; berth's own `/metrics` are shown beside them as a cross-check.
//! Whatever a peer leaves behind is reported and deleted before the next one starts.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use berth_e2e::{
    HollowNode, HollowNodeOptions, Testbed, free_port, openstack_calls,
    services::{create_service, lb_service},
};
use berth_openstack::{Client, load_balancer::LoadBalancer};
use clap::Args;
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};

use crate::{
    bench::{client, count_calls, now_ms, rss_mib},
    paths,
    run::exec,
    testbed,
};

#[derive(Args)]
pub(crate) struct Options {
    /// How many LoadBalancer Services.
    #[arg(long, default_value_t = 50)]
    services: usize,
    /// How many hollow nodes (one more joins during the run).
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// The share of the Services that are public (a floating IP); the rest are internal.
    #[arg(long, default_value_t = 0.5)]
    public_ratio: f64,
    /// How long to count calls while nothing changes, in seconds.
    #[arg(long, default_value_t = 300)]
    idle: u64,
    /// Reuse the running testbed (calls are counted only if it was started with --reqlog).
    #[arg(long)]
    reuse_testbed: bool,
    /// Run berth only (its column beside an earlier in-tree run, e.g. after a berth change:
    /// the in-tree half takes most of an hour).
    #[arg(long)]
    berth_only: bool,
}

/// The in-tree provider's cluster name (its load balancers are named `a<uid>` whatever it is;
/// its floating IPs' descriptions end with `from cluster <it>`).
const INTREE_CLUSTER: &str = "bench-intree";
/// berth's cluster name (its load balancers are `kube_service_<it>_<ns>_<name>`, tagged).
const BERTH_CLUSTER: &str = "bench-berth";
/// The bench's Kubernetes bed: ports apart from the shared bed's (6443, 12379, 10257).
const BED_ETCD_PORT: u16 = 22379;
const BED_ETCD_PEER_PORT: u16 = 22380;
const BED_APISERVER_PORT: u16 = 16443;
const BED_KCM_PORT: u16 = 20257;
/// Prefix of the hollow nodes (and their servers): `e2e-…`, so `cargo xtask leaks` finds them.
const NODE_PREFIX: &str = "e2e-bench-lb-";
/// Prefix of the bench's Services (in the bench's own bed only).
const SERVICE_PREFIX: &str = "bench-lb-";
/// Settling time after a phase before its calls are counted up to (late follow-up calls).
const SETTLE: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Peer {
    InTree,
    Berth,
}

impl Peer {
    /// The user agent its OpenStack calls carry.
    fn agent(self) -> &'static str {
        match self {
            Self::InTree => "gophercloud",
            Self::Berth => "berth-cloud-controller",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::InTree => "kube-controller-manager 1.20 (in-tree OpenStack provider)",
            Self::Berth => "berth cloud-controller",
        }
    }
}

/// What one controller did.
#[derive(Debug, Default)]
struct Outcome {
    startup_calls: usize,
    ingress_all: Option<f64>,
    ingress_p50: Option<f64>,
    calls_create: usize,
    pools: usize,
    join_all: Option<f64>,
    calls_join: usize,
    calls_idle: usize,
    delete_all: Option<f64>,
    calls_delete: usize,
    rss_mib: u64,
    /// berth's own count (`berth_openstack_api_calls_total`): start-up, create, join, idle, delete.
    metrics: Option<[f64; 5]>,
    /// What it left behind after its Services were deleted (then deleted by the bench).
    leftovers: Vec<String>,
}

/// The bench's own Kubernetes control plane.
struct Bed {
    dir: PathBuf,
}

impl Bed {
    fn script(&self, script: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(paths::repo().join("testbed/kubernetes").join(script))
            .env("BERTH_TESTBED", paths::testbed_dir())
            .env("BERTH_CACHE", paths::cache_dir())
            .env("KUBEBED_DIR", &self.dir)
            .env("KUBEBED_ETCD_PORT", BED_ETCD_PORT.to_string())
            .env("KUBEBED_ETCD_PEER_PORT", BED_ETCD_PEER_PORT.to_string())
            .env("KUBEBED_APISERVER_PORT", BED_APISERVER_PORT.to_string())
            .env("KUBEBED_KCM_PORT", BED_KCM_PORT.to_string())
            // Not inherited from the caller's shell: only what this bench asks for.
            .env_remove("KUBEBED_KCM")
            .env_remove("KUBEBED_KCM_ARGS")
            .env_remove("KUBEBED_KCM_CLOUD_PROVIDER")
            .env_remove("KUBEBED_KCM_CLOUD_CONFIG")
            .env_remove("KUBEBED_ETCD_DATA");
        cmd
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    fn up(&self) -> Result<()> {
        exec(&mut self.script("up.sh"))
    }

    fn start_kcm(&self, cloud_conf: &Path) -> Result<()> {
        let args = format!(
            "{} --cluster-name={INTREE_CLUSTER}",
            berth_e2e::kubebed::only_service_controller_flag()
        );
        exec(
            self.script("up.sh")
                .env("KUBEBED_KCM", "1")
                .env("KUBEBED_KCM_CLOUD_PROVIDER", "openstack")
                .env("KUBEBED_KCM_CLOUD_CONFIG", cloud_conf)
                .env("KUBEBED_KCM_ARGS", args),
        )
    }

    fn kcm_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("kube-controller-manager.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn kcm_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("logs/kube-controller-manager.log")).unwrap_or_default()
    }

    fn stop_kcm(&self) -> Result<()> {
        exec(self.script("down.sh").arg("kube-controller-manager"))
    }

    /// Stops everything of the bed and deletes its directory.
    fn destroy(&self) -> Result<()> {
        exec(self.script("down.sh").arg("--purge"))?;
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir).with_context(|| format!("removing {}", self.dir.display()))?;
        }
        Ok(())
    }
}

/// What the bench made that must go whatever happens.
#[derive(Default)]
struct Made {
    nodes: Vec<HollowNode>,
    join: Option<HollowNode>,
    /// The in-tree provider's load balancer names (`a` + the Service UID), of every Service made.
    intree_names: BTreeSet<String>,
}

pub(crate) fn run(options: &Options) -> Result<()> {
    if !(0.0..=1.0).contains(&options.public_ratio) {
        bail!("--public-ratio must be between 0 and 1");
    }
    if options.services == 0 || options.nodes == 0 {
        bail!("--services and --nodes must be at least 1");
    }
    if !options.reuse_testbed {
        testbed::up(&testbed::UpOptions {
            fresh: true,
            reqlog: true,
            kcm: None,
        })?;
    }
    let reqlog = reqlog_present(&paths::testbed_dir());
    if !reqlog {
        eprintln!(
            "bench: WARNING: the testbed's OpenStack APIs write no request log (not started with \
             `cargo xtask testbed up --reqlog`): every call count from the logs will read 0; \
             berth's /metrics are still shown"
        );
    }
    let tb = Testbed::load()?;
    let bed = Bed {
        dir: paths::testbed_dir().join("bench-kube"),
    };
    if bed.dir.exists() {
        // A bed left by an interrupted run: start from nothing.
        bed.destroy()?;
    }
    let berth_bin = paths::cargo_target().join("release/berth");
    if !berth_bin.exists() {
        bail!(
            "{} is missing: run `cargo build -p berth --release`",
            berth_bin.display()
        );
    }
    let rt = tokio::runtime::Runtime::new()?;
    let mut made = Made::default();
    let result = (|| -> Result<(Outcome, Outcome)> {
        bed.up()?;
        let mut btb = tb.clone();
        btb.kubeconfig = bed.kubeconfig();
        made.nodes = rt.block_on(make_nodes(&btb, options.nodes))?;
        let intree = if options.berth_only {
            Outcome::default()
        } else {
            rt.block_on(one_peer(Peer::InTree, &btb, &bed, &berth_bin, options, &mut made))?
        };
        let berth = rt.block_on(one_peer(Peer::Berth, &btb, &bed, &berth_bin, options, &mut made))?;
        Ok((intree, berth))
    })();
    // Whatever happened: the Nodes' servers, what either peer left in OpenStack, the bed.
    let cleanup = rt.block_on(async {
        let os = client(&tb).await?;
        let mut btb = tb.clone();
        btb.kubeconfig = bed.kubeconfig();
        let kube = btb.kube().await.ok();
        let mut nodes = std::mem::take(&mut made.nodes);
        nodes.extend(made.join.take());
        remove_nodes(&os, kube.as_ref(), nodes).await;
        leftovers(&os, &made.intree_names, true).await
    });
    let destroyed = bed.destroy();
    match &cleanup {
        Ok(left) if !left.is_empty() => eprintln!("bench: deleted leftovers at the end: {left:?}"),
        Ok(_) => {}
        Err(e) => eprintln!("bench: WARNING: cleanup failed: {e:#} (see `cargo xtask leaks`)"),
    }
    if let Err(e) = &destroyed {
        eprintln!("bench: WARNING: tearing down {} failed: {e:#}", bed.dir.display());
    }
    let (intree, berth) = result?;
    cleanup?;
    destroyed?;
    println!("{}", report(options, reqlog, &intree, &berth));
    Ok(())
}

/// Whether any OpenStack API log holds request lines (`testbed up --reqlog`).
fn reqlog_present(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir.join("openstack/log")) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        path.extension().is_some_and(|x| x == "out")
            && std::fs::read_to_string(&path)
                .map(|t| t.lines().any(|l| l.starts_with("REQ ")))
                .unwrap_or(false)
    })
}

/// N hollow nodes (Nova fake servers on the cluster network, Ready Nodes with their InternalIP,
/// heartbeat every 10 s), made a few at a time; all or none.
async fn make_nodes(tb: &Testbed, n: usize) -> Result<Vec<HollowNode>> {
    eprintln!("bench: creating {n} hollow nodes");
    let os = client(tb).await?;
    let kube = tb.kube().await?;
    let mut nodes = Vec::new();
    let mut failed = None;
    for chunk in (0..n).collect::<Vec<_>>().chunks(5) {
        let made = futures::future::join_all(chunk.iter().map(|i| {
            let (os, kube) = (&os, &kube);
            async move {
                let name = format!("{NODE_PREFIX}{i:03}");
                HollowNode::create(tb, os, kube, &name, HollowNodeOptions::default()).await
            }
        }))
        .await;
        for m in made {
            match m {
                Ok(node) => nodes.push(node),
                Err(e) => failed = Some(e),
            }
        }
        if failed.is_some() {
            break;
        }
    }
    if let Some(e) = failed {
        remove_nodes(&os, Some(&kube), nodes).await;
        return Err(e.context("creating the hollow nodes"));
    }
    Ok(nodes)
}

/// Deletes the Nodes (if the bed answers) and their servers, ten at a time; errors are shown,
/// not returned, so the rest of the cleanup still runs.
async fn remove_nodes(os: &Client, kube: Option<&kube::Client>, mut nodes: Vec<HollowNode>) {
    while !nodes.is_empty() {
        let batch: Vec<HollowNode> = nodes.drain(..nodes.len().min(10)).collect();
        let done = futures::future::join_all(batch.into_iter().map(|mut node| async move {
            node.stop_heartbeat();
            if let Some(kube) = kube {
                let _ = Api::<k8s_openapi::api::core::v1::Node>::all(kube.clone())
                    .delete(&node.name, &DeleteParams::default())
                    .await;
            }
            let compute = os.compute();
            compute.delete_server(&node.server_id).await?;
            compute
                .wait_for_deletion(&node.server_id, Duration::from_secs(300))
                .await
                .with_context(|| format!("deleting server {}", node.name))
        }))
        .await;
        for d in done {
            if let Err(e) = d {
                eprintln!("bench: WARNING: {e:#} (see `cargo xtask leaks`)");
            }
        }
    }
}

/// A running controller.
enum Running {
    Kcm,
    Berth { child: Child, metrics: String },
}

impl Running {
    fn pid(&self, bed: &Bed) -> Option<u32> {
        match self {
            Self::Kcm => bed.kcm_pid(),
            Self::Berth { child, .. } => Some(child.id()),
        }
    }

    /// berth's own count of its OpenStack calls.
    fn metric_calls(&self) -> Option<f64> {
        match self {
            Self::Kcm => None,
            Self::Berth { metrics, .. } => http_get(metrics).map(|t| openstack_calls(&t)),
        }
    }

    fn stop(self, bed: &Bed) -> Result<()> {
        match self {
            Self::Kcm => bed.stop_kcm(),
            Self::Berth { mut child, .. } => {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                for _ in 0..100 {
                    if child.try_wait()?.is_some() {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = child.kill();
                let _ = child.wait();
                Ok(())
            }
        }
    }
}

/// A plain HTTP/1.0 GET on loopback; the body if 200.
fn http_get(addr_and_path: &str) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let (addr, path) = addr_and_path.split_once('/')?;
    let mut s = std::net::TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.lines()
        .next()
        .is_some_and(|l| l.contains(" 200"))
        .then(|| body.to_owned())
}

/// Starts the peer and waits until it has started and settled. Returns it and when it was
/// started (Unix ms).
async fn start(peer: Peer, tb: &Testbed, bed: &Bed, berth_bin: &Path) -> Result<(Running, u128)> {
    let started = now_ms();
    match peer {
        Peer::InTree => {
            bed.start_kcm(&tb.cloud_conf)?;
            let t = Instant::now();
            while !bed.kcm_log().contains("Starting service controller") {
                if t.elapsed() > Duration::from_secs(90) {
                    bail!(
                        "kube-controller-manager did not start its service controller in 90 s (log {})",
                        bed.dir.join("logs/kube-controller-manager.log").display()
                    );
                }
                if bed
                    .kcm_pid()
                    .is_none_or(|p| !Path::new(&format!("/proc/{p}")).exists())
                {
                    bail!(
                        "kube-controller-manager exited (log {})",
                        bed.dir.join("logs/kube-controller-manager.log").display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok((Running::Kcm, started))
        }
        Peer::Berth => {
            let port = free_port()?;
            let log = bed.dir.join("logs/berth-cloud-controller.log");
            let file = std::fs::File::create(&log)?;
            let child = Command::new(berth_bin)
                .arg("cloud-controller")
                .arg("--kubeconfig")
                .arg(bed.kubeconfig())
                .arg("--cloud-config")
                .arg(&tb.cloud_conf)
                .args(["--cluster-name", BERTH_CLUSTER, "--controllers", "service"])
                .args(["--leader-elect=false", "--metrics-bind-address"])
                .arg(format!("127.0.0.1:{port}"))
                .env("BERTH_LOG", "info,kube=warn")
                .stdin(Stdio::null())
                .stdout(file.try_clone()?)
                .stderr(file)
                .spawn()
                .with_context(|| format!("starting {}", berth_bin.display()))?;
            let mut running = Running::Berth {
                child,
                metrics: format!("127.0.0.1:{port}/metrics"),
            };
            let t = Instant::now();
            while running.metric_calls().is_none() {
                let exited = match &mut running {
                    Running::Berth { child, .. } => child.try_wait()?.is_some(),
                    Running::Kcm => false,
                };
                if exited || t.elapsed() > Duration::from_secs(30) {
                    let _ = running.stop(bed);
                    bail!(
                        "berth cloud-controller did not serve /metrics (log {})",
                        log.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Its start-up GC sweep runs now; what it calls is counted apart.
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok((running, started))
        }
    }
}

/// The scenario for one peer; it stops the peer and deletes what it left, whatever happened.
async fn one_peer(
    peer: Peer,
    tb: &Testbed,
    bed: &Bed,
    berth_bin: &Path,
    options: &Options,
    made: &mut Made,
) -> Result<Outcome> {
    eprintln!("bench: {}", peer.name());
    let os = client(tb).await?;
    let kube = tb.kube().await?;
    let (running, started) = start(peer, tb, bed, berth_bin).await?;
    let mut out = Outcome::default();
    // Ctrl-C ends the scenario, not the cleanup.
    let result = tokio::select! {
        r = scenario(peer, tb, &os, &kube, bed, &running, started, options, made, &mut out) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    out.rss_mib = out.rss_mib.max(running.pid(bed).map_or(0, rss_mib));
    let stopped = running.stop(bed);
    // Services a failed run left: without their finalizer, so nothing waits on a controller.
    let services = Api::<Service>::namespaced(kube.clone(), "default");
    if let Ok(list) = services.list(&ListParams::default()).await {
        for s in list.items {
            let name = s.metadata.name.unwrap_or_default();
            if name.starts_with(SERVICE_PREFIX) {
                let patch = serde_json::json!({ "metadata": { "finalizers": null } });
                let _ = services
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                let _ = services.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
    if let Some(join) = made.join.take() {
        remove_nodes(&os, Some(&kube), vec![join]).await;
    }
    out.leftovers = leftovers(&os, &made.intree_names, true).await?;
    if !out.leftovers.is_empty() {
        eprintln!(
            "bench: {} left behind (deleted now): {:?}",
            peer.name(),
            out.leftovers
        );
    }
    stopped?;
    result?;
    Ok(out)
}

/// The load balancers of the bench's Services, made by either peer.
fn ours(lb: &LoadBalancer, intree_names: &BTreeSet<String>) -> bool {
    intree_names.contains(&lb.name)
        || lb.name.starts_with(&format!("kube_service_{BERTH_CLUSTER}_"))
        || lb.tags.contains(&format!("berth-cluster={BERTH_CLUSTER}"))
}

/// The in-tree provider's name for a Service's load balancer (upstream's
/// `cloudprovider.DefaultLoadBalancerName`).
fn intree_name(uid: &str) -> String {
    let mut name = format!("a{}", uid.replace('-', ""));
    name.truncate(32);
    name
}

/// The live load balancers of the bench's Services.
async fn our_lbs(os: &Client, intree_names: &BTreeSet<String>) -> Result<Vec<LoadBalancer>> {
    Ok(os
        .load_balancer()
        .list(&[])
        .await?
        .into_iter()
        .filter(|lb| lb.provisioning_status != "DELETED" && ours(lb, intree_names))
        .collect())
}

/// Lists (and with `delete`, deletes) what the bench's Services left in OpenStack: load
/// balancers of either peer, floating IPs described `… from cluster bench-…` or tagged for
/// berth's cluster, berth's security groups.
async fn leftovers(os: &Client, intree_names: &BTreeSet<String>, delete: bool) -> Result<Vec<String>> {
    let net = os.network();
    let lbs = our_lbs(os, intree_names).await?;
    let vip_ports: BTreeSet<&str> = lbs.iter().map(|l| l.vip_port_id.as_str()).collect();
    let tag = format!("berth-cluster={BERTH_CLUSTER}");
    let mut found = Vec::new();
    for f in net.floating_ips(&[]).await? {
        if f.description.contains("from cluster bench-")
            || f.tags.contains(&tag)
            || f.port_id.as_deref().is_some_and(|p| vip_ports.contains(p))
        {
            found.push(format!("floating IP {} ({})", f.floating_ip_address, f.id));
            if delete {
                net.delete_floating_ip(&f.id).await?;
            }
        }
    }
    let wait = Duration::from_secs(180);
    for lb in &lbs {
        found.push(format!(
            "load balancer {} ({}, {})",
            lb.name, lb.id, lb.provisioning_status
        ));
        if delete {
            // Octavia refuses (409) to delete one in PENDING_*: let it settle first.
            let t = Instant::now();
            while os
                .load_balancer()
                .get(&lb.id)
                .await
                .is_ok_and(|l| l.provisioning_status.starts_with("PENDING"))
                && t.elapsed() < wait
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            os.load_balancer().delete(&lb.id, true).await?;
            os.load_balancer().wait_deleted(&lb.id, wait).await?;
        }
    }
    for g in net.security_groups(&[("tags", tag.clone())]).await? {
        found.push(format!("security group {} ({})", g.name, g.id));
        if delete {
            net.delete_security_group(&g.id).await?;
        }
    }
    Ok(found)
}

/// Ends the phase: waits for late calls, then counts the peer's calls since `from`. Returns the
/// count and the end of the window (Unix ms).
async fn settle_and_count(peer: Peer, from: u128) -> Result<(usize, u128)> {
    tokio::time::sleep(SETTLE).await;
    let to = now_ms();
    Ok((count_calls(&paths::testbed_dir(), peer.agent(), from, to)?, to))
}

#[allow(clippy::too_many_arguments)]
async fn scenario(
    peer: Peer,
    tb: &Testbed,
    os: &Client,
    kube: &kube::Client,
    bed: &Bed,
    running: &Running,
    started: u128,
    options: &Options,
    made: &mut Made,
    out: &mut Outcome,
) -> Result<()> {
    let dir = paths::testbed_dir();
    let agent = peer.agent();
    let sample_rss = |out: &mut Outcome| {
        out.rss_mib = out.rss_mib.max(running.pid(bed).map_or(0, rss_mib));
    };
    let baseline = now_ms();
    out.startup_calls = count_calls(&dir, agent, started, baseline)?;
    let mut metric_marks = vec![running.metric_calls()];

    // 1. S Services at once.
    let s = options.services;
    let public = ((s as f64) * options.public_ratio).round() as usize;
    let names: Vec<String> = (0..s).map(|i| format!("{SERVICE_PREFIX}{i:03}")).collect();
    eprintln!("bench: {s} LoadBalancer Services ({public} public)");
    let from = now_ms();
    let t0 = Instant::now();
    let created = futures::future::join_all(names.iter().enumerate().map(|(i, name)| {
        let annotations: Vec<(&str, &str)> = if i < public {
            vec![
                (
                    "service.beta.kubernetes.io/openstack-internal-load-balancer",
                    "false",
                ),
                (
                    "loadbalancer.openstack.org/floating-network-id",
                    tb.tenant.public_network_id.as_str(),
                ),
            ]
        } else {
            vec![(
                "service.beta.kubernetes.io/openstack-internal-load-balancer",
                "true",
            )]
        };
        async move {
            let svc = lb_service(name, &[("tcp", "TCP", 80)], &annotations, serde_json::json!({}))?;
            create_service(kube, &svc).await
        }
    }))
    .await;
    for c in created {
        let svc = c?;
        if let Some(uid) = svc.metadata.uid {
            made.intree_names.insert(intree_name(&uid));
        }
    }
    let services = Api::<Service>::namespaced(kube.clone(), "default");
    let limit = Duration::from_secs(600.max(30 * s as u64));
    let mut seen: BTreeMap<String, f64> = BTreeMap::new();
    while seen.len() < s {
        if t0.elapsed() > limit {
            bail!("only {} of {s} Services had ingress after {limit:?}", seen.len());
        }
        let t = t0.elapsed().as_secs_f64();
        for svc in services.list(&ListParams::default()).await?.items {
            let name = svc.metadata.name.clone().unwrap_or_default();
            let has = svc
                .status
                .and_then(|st| st.load_balancer)
                .and_then(|l| l.ingress)
                .is_some_and(|i| !i.is_empty());
            if has && names.contains(&name) {
                seen.entry(name).or_insert(t);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut times: Vec<f64> = seen.values().copied().collect();
    times.sort_by(f64::total_cmp);
    out.ingress_all = times.last().copied();
    out.ingress_p50 = times.get(times.len() / 2).copied();
    eprintln!(
        "bench: every Service has ingress after {:.1} s",
        out.ingress_all.unwrap_or(0.0)
    );
    sample_rss(out);
    let (n, to) = settle_and_count(peer, from).await?;
    out.calls_create = n;
    metric_marks.push(running.metric_calls());

    // 2. One more Node: until it is a member of every pool of the bench's load balancers.
    let lbs = our_lbs(os, &made.intree_names).await?;
    if lbs.len() != s {
        bail!("{} load balancers for {s} Services", lbs.len());
    }
    let pool_ids: BTreeSet<String> = lbs
        .iter()
        .flat_map(|l| l.pools.iter().map(|p| p.id.clone()))
        .collect();
    out.pools = pool_ids.len();
    let before = options.nodes;
    let name = format!(
        "{NODE_PREFIX}join-{}",
        if peer == Peer::InTree { "intree" } else { "berth" }
    );
    eprintln!("bench: Node {name} joins ({} pools)", pool_ids.len());
    // The server boots first; the clock starts when its Node is registered (the last step).
    let join = HollowNode::create(tb, os, kube, &name, HollowNodeOptions::default()).await?;
    let join_from = now_ms();
    let t0 = Instant::now();
    let ip = join.internal_ip.clone();
    made.join = Some(join);
    let limit = Duration::from_secs(600.max(20 * s as u64));
    let mut done: BTreeSet<String> = BTreeSet::new();
    while done.len() < pool_ids.len() {
        if t0.elapsed() > limit {
            bail!(
                "Node {name} in only {} of {} pools after {limit:?}",
                done.len(),
                pool_ids.len()
            );
        }
        // One call a round; a pool's members are read only once it has one more.
        for pool in os.load_balancer().pools(&[]).await? {
            if pool_ids.contains(&pool.id) && !done.contains(&pool.id) && pool.members.len() > before {
                let members = os.load_balancer().members(&pool.id).await?;
                if members.iter().any(|m| m.address == ip) {
                    done.insert(pool.id);
                }
            }
        }
        if done.len() < pool_ids.len() {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    out.join_all = Some(t0.elapsed().as_secs_f64());
    eprintln!(
        "bench: Node {name} in every pool after {:.1} s",
        out.join_all.unwrap_or(0.0)
    );
    let (n, idle_from) = settle_and_count(peer, join_from.max(to)).await?;
    out.calls_join = n;
    metric_marks.push(running.metric_calls());

    // 3. Idle.
    eprintln!("bench: idle for {} s", options.idle);
    tokio::time::sleep(Duration::from_secs(options.idle)).await;
    let idle_to = now_ms();
    out.calls_idle = count_calls(&dir, agent, idle_from, idle_to)?;
    metric_marks.push(running.metric_calls());
    sample_rss(out);

    // 4. Delete every Service: until they are gone from Kubernetes and their load balancers
    // from Octavia.
    eprintln!("bench: deleting the {s} Services");
    let t0 = Instant::now();
    futures::future::join_all(
        names
            .iter()
            .map(|n| async { services.delete(n, &DeleteParams::default()).await }),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    loop {
        let left_k8s = services
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|s| s.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
            .count();
        // Octavia is asked only once Kubernetes is done (the bench's calls are not counted, but
        // they load the API the peer uses).
        let left_lbs = if left_k8s == 0 {
            our_lbs(os, &made.intree_names).await?.len()
        } else {
            s
        };
        if left_k8s == 0 && left_lbs == 0 {
            break;
        }
        if t0.elapsed() > limit {
            bail!(
                "after {limit:?}: {left_k8s} Services left, load balancers left: {}",
                left_lbs > 0
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    out.delete_all = Some(t0.elapsed().as_secs_f64());
    eprintln!("bench: all gone after {:.1} s", out.delete_all.unwrap_or(0.0));
    let (n, _) = settle_and_count(peer, idle_to).await?;
    out.calls_delete = n;
    metric_marks.push(running.metric_calls());
    sample_rss(out);
    if let Some(m) = metric_marks.into_iter().collect::<Option<Vec<f64>>>() {
        // m[0] is the start-up count, then the count at the end of each phase.
        out.metrics = Some([m[0], m[1] - m[0], m[2] - m[1], m[3] - m[2], m[4] - m[3]]);
    }
    Ok(())
}

fn secs(v: Option<f64>) -> String {
    v.map_or("—".into(), |s| format!("{s:.1} s"))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else if a > 0.0 {
        "∞ (berth 0)".into()
    } else {
        "—".into()
    }
}

fn report(options: &Options, reqlog: bool, intree: &Outcome, berth: &Outcome) -> String {
    let s = options.services as f64;
    let public = ((s) * options.public_ratio).round() as usize;
    let per = |n: usize, d: f64| if d > 0.0 { n as f64 / d } else { 0.0 };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "```sh\ncargo xtask bench lb --services {} --nodes {} --public-ratio {} --idle {}{}{}\n```\n",
        options.services,
        options.nodes,
        options.public_ratio,
        options.idle,
        if options.reuse_testbed {
            " --reuse-testbed"
        } else {
            ""
        },
        if options.berth_only { " --berth-only" } else { "" }
    );
    if options.berth_only {
        let _ = writeln!(t, "(berth only: the in-tree column reads 0.)\n");
    }
    if !reqlog {
        let _ = writeln!(
            t,
            "**No request logs on this testbed (not started with --reqlog): OpenStack call counts \
             from the logs read 0.**\n"
        );
    }
    let _ = writeln!(
        t,
        "| {} Services ({public} public) × {} nodes | in-tree (KCM 1.20) | berth | in-tree ÷ berth |",
        options.services, options.nodes
    );
    let _ = writeln!(t, "|---|---|---|---|");
    let row = |t: &mut String, what: &str, a: String, b: String, r: String| {
        let _ = writeln!(t, "| {what} | {a} | {b} | {r} |");
    };
    row(
        &mut t,
        "every Service has ingress, from their creation",
        secs(intree.ingress_all),
        secs(berth.ingress_all),
        ratio(
            intree.ingress_all.unwrap_or(0.0),
            berth.ingress_all.unwrap_or(0.0),
        ),
    );
    row(
        &mut t,
        "median Service has ingress",
        secs(intree.ingress_p50),
        secs(berth.ingress_p50),
        ratio(
            intree.ingress_p50.unwrap_or(0.0),
            berth.ingress_p50.unwrap_or(0.0),
        ),
    );
    row(
        &mut t,
        "OpenStack calls until quiet, from creation (per LB)",
        format!("{} ({:.1})", intree.calls_create, per(intree.calls_create, s)),
        format!("{} ({:.1})", berth.calls_create, per(berth.calls_create, s)),
        ratio(intree.calls_create as f64, berth.calls_create as f64),
    );
    row(
        &mut t,
        &format!(
            "a joining Node in every pool ({} pools)",
            berth.pools.max(intree.pools)
        ),
        secs(intree.join_all),
        secs(berth.join_all),
        ratio(intree.join_all.unwrap_or(0.0), berth.join_all.unwrap_or(0.0)),
    );
    row(
        &mut t,
        "OpenStack calls for the join (per pool)",
        format!(
            "{} ({:.1})",
            intree.calls_join,
            per(intree.calls_join, intree.pools as f64)
        ),
        format!(
            "{} ({:.1})",
            berth.calls_join,
            per(berth.calls_join, berth.pools as f64)
        ),
        ratio(intree.calls_join as f64, berth.calls_join as f64),
    );
    row(
        &mut t,
        &format!("OpenStack calls in {} s while nothing changes", options.idle),
        intree.calls_idle.to_string(),
        berth.calls_idle.to_string(),
        ratio(intree.calls_idle as f64, berth.calls_idle as f64),
    );
    row(
        &mut t,
        "every Service and load balancer gone, from deletion",
        secs(intree.delete_all),
        secs(berth.delete_all),
        ratio(intree.delete_all.unwrap_or(0.0), berth.delete_all.unwrap_or(0.0)),
    );
    row(
        &mut t,
        "OpenStack calls to delete (per LB)",
        format!("{} ({:.1})", intree.calls_delete, per(intree.calls_delete, s)),
        format!("{} ({:.1})", berth.calls_delete, per(berth.calls_delete, s)),
        ratio(intree.calls_delete as f64, berth.calls_delete as f64),
    );
    row(
        &mut t,
        "OpenStack calls at start-up (before the first Service; berth: its GC sweep)",
        intree.startup_calls.to_string(),
        berth.startup_calls.to_string(),
        String::new(),
    );
    row(
        &mut t,
        "left behind after delete (then deleted by the bench)",
        intree.leftovers.len().to_string(),
        berth.leftovers.len().to_string(),
        String::new(),
    );
    row(
        &mut t,
        "controller memory (RSS, max)",
        format!("{} MiB (KCM, service controller only)", intree.rss_mib),
        format!("{} MiB", berth.rss_mib),
        ratio(intree.rss_mib as f64, berth.rss_mib as f64),
    );
    if let Some(m) = berth.metrics {
        let _ = writeln!(
            t,
            "\nberth's own count (`berth_openstack_api_calls_total`): start-up {:.0}, create {:.0}, \
             join {:.0}, idle {:.0}, delete {:.0}.",
            m[0], m[1], m[2], m[3], m[4]
        );
    }
    t
}
