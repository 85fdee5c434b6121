//! `cargo xtask bench nodes`: berth's cloud controller beside kube-controller-manager 1.20's
//! in-tree OpenStack provider, one after the other on the same fresh testbed.
//!
//! For N hollow nodes with pod CIDRs it measures the time from Node creation until every
//! route exists on the router (and, for berth, until every Node is initialised; the in-tree
//! provider leaves that to kubelets), the OpenStack calls made to get there, the calls made
//! per minute afterwards while nothing changes, and the controller's memory. OpenStack calls
//! are counted in the APIs' own request logs (`testbed up --reqlog`) by user agent, so both
//! controllers are counted the same way.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use berth_e2e::{E2E_PREFIX, Testbed};
use berth_openstack::{
    Client,
    compute::NewServer,
    network::{AddressPair, Route},
};
use clap::Args;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, api::PostParams};
use serde_json::json;

use crate::{paths, run::exec, testbed};

#[derive(Args)]
pub(crate) struct Options {
    /// How many hollow nodes.
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    /// How long to count calls while nothing changes, in seconds.
    #[arg(long, default_value_t = 120)]
    steady: u64,
    /// Reuse a running testbed (it must have been started with --reqlog).
    #[arg(long)]
    reuse_testbed: bool,
}

const CLUSTER_CIDR: &str = "10.100.0.0/16";

fn pod_cidr(i: usize) -> String {
    format!("10.100.{i}.0/24")
}

/// What one controller did.
#[derive(Debug, Default)]
struct Outcome {
    routes_burst: Option<f64>,
    routes_all: Option<f64>,
    routes_p50: Option<f64>,
    init_all: Option<f64>,
    calls_to_converge: usize,
    calls_per_minute_idle: f64,
    rss_mib: u64,
}

pub(crate) fn run(options: &Options) -> Result<()> {
    if !options.reuse_testbed {
        testbed::up(&testbed::UpOptions {
            fresh: true,
            reqlog: true,
            kcm: None,
        })?;
    }
    let rt = tokio::runtime::Runtime::new()?;
    let tb = Testbed::load()?;
    let servers = rt.block_on(make_servers(&tb, options.nodes))?;
    let result = (|| -> Result<(Outcome, Outcome)> {
        let intree = rt.block_on(in_tree(&tb, &servers, options))?;
        let berth = rt.block_on(berth(&tb, &servers, options))?;
        Ok((intree, berth))
    })();
    rt.block_on(delete_servers(&tb, &servers))?;
    let (intree, berth) = result?;
    println!("{}", report(options, &intree, &berth));
    Ok(())
}

/// (name, id, IPv4 address) of each hollow server.
type Servers = Vec<(String, String, String)>;

pub(crate) async fn client(tb: &Testbed) -> Result<Client> {
    // Its own user agent, so the bench's own calls are not counted for either controller.
    let options = berth_openstack::ClientOptions {
        region: Some(tb.region.clone()),
        user_agent: "berth-bench".into(),
        ..Default::default()
    };
    Ok(Client::connect(tb.credentials(&tb.demo)?, options).await?)
}

async fn make_servers(tb: &Testbed, n: usize) -> Result<Servers> {
    let os = client(tb).await?;
    let compute = os.compute();
    let flavor = compute
        .flavors()
        .await?
        .into_iter()
        .find(|f| f.name == tb.flavor)
        .context("flavor")?;
    let image = os
        .images_named(&tb.image)
        .await?
        .into_iter()
        .next()
        .context("image")?;
    eprintln!("bench: creating {n} hollow servers");
    let mut ids = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(10) {
        let made = futures::future::join_all(chunk.iter().map(|i| {
            let server = NewServer {
                name: format!("{E2E_PREFIX}bench-{i:03}"),
                flavor_ref: flavor.id.clone(),
                image_ref: image.id.clone(),
                networks: vec![json!({ "uuid": tb.tenant.network_id })],
                availability_zone: None,
                metadata: BTreeMap::new(),
            };
            let compute = os.compute();
            async move {
                let id = compute.create_server(&server).await?;
                compute
                    .wait_for_status(&id, "ACTIVE", Duration::from_secs(300))
                    .await?;
                Ok::<_, anyhow::Error>((server.name, id))
            }
        }))
        .await;
        for m in made {
            ids.push(m?);
        }
    }
    let ports = os
        .network()
        .ports(&[("network_id", tb.tenant.network_id.clone())])
        .await?;
    ids.into_iter()
        .map(|(name, id)| {
            let ip = ports
                .iter()
                .find(|p| p.device_id == id)
                .and_then(|p| p.fixed_ips.first())
                .map(|f| f.ip_address.clone())
                .context("server without an address")?;
            Ok((name, id, ip))
        })
        .collect()
}

async fn delete_servers(tb: &Testbed, servers: &Servers) -> Result<()> {
    let os = client(tb).await?;
    for chunk in servers.chunks(10) {
        futures::future::join_all(chunk.iter().map(|(_, id, _)| {
            let compute = os.compute();
            async move {
                compute.delete_server(id).await?;
                compute.wait_for_deletion(id, Duration::from_secs(300)).await
            }
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(())
}

/// Registers the Nodes a kubelet would: Ready, InternalIP, a pod CIDR; tainted for berth.
/// Returns when creating began, and for each pod CIDR the seconds until its Node existed.
async fn create_nodes(
    tb: &Testbed,
    servers: &Servers,
    taint: bool,
) -> Result<(Instant, BTreeMap<String, f64>)> {
    let nodes = Api::<Node>::all(tb.kube().await?);
    let started = Instant::now();
    let created = futures::future::join_all(servers.iter().enumerate().map(|(i, (name, _, ip))| {
        let nodes = nodes.clone();
        let spec = if taint {
            json!({ "podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)], "taints": [{
                "key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule" }] })
        } else {
            json!({ "podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)] })
        };
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
            "spec": spec,
            "status": {
                "addresses": [{ "type": "InternalIP", "address": ip }, { "type": "Hostname", "address": name }],
                "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady",
                                 "lastHeartbeatTime": now, "lastTransitionTime": now }]
            }
        });
        async move {
            nodes.create(&PostParams::default(), &serde_json::from_value::<Node>(node)?).await?;
            Ok::<_, anyhow::Error>((pod_cidr(i), started.elapsed().as_secs_f64()))
        }
    }))
    .await
    .into_iter()
    .collect::<Result<BTreeMap<_, _>>>()?;
    Ok((started, created))
}

async fn delete_nodes(tb: &Testbed, servers: &Servers) -> Result<()> {
    let nodes = Api::<Node>::all(tb.kube().await?);
    for (name, _, _) in servers {
        let _ = nodes.delete(name, &Default::default()).await;
    }
    Ok(())
}

/// Waits until every route exists; returns, by pod CIDR, the seconds since `started` when it did.
async fn wait_routes(
    os: &Client,
    tb: &Testbed,
    servers: &Servers,
    started: Instant,
) -> Result<BTreeMap<String, f64>> {
    let want: BTreeMap<String, String> = servers
        .iter()
        .enumerate()
        .map(|(i, (_, _, ip))| (pod_cidr(i), ip.clone()))
        .collect();
    let mut seen: BTreeMap<String, f64> = BTreeMap::new();
    while seen.len() < want.len() {
        if started.elapsed() > Duration::from_secs(600) {
            bail!("only {} of {} routes after 10 minutes", seen.len(), want.len());
        }
        let routes = os.network().router(&tb.tenant.router_id).await?.routes;
        let t = started.elapsed().as_secs_f64();
        for r in routes {
            if want.get(&r.destination) == Some(&r.nexthop) {
                seen.entry(r.destination).or_insert(t);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(seen)
}

/// (last route from the burst's start, slowest and median route from its own Node's creation)
fn latencies(seen: &BTreeMap<String, f64>, created: &BTreeMap<String, f64>) -> (f64, f64, f64) {
    let mut own: Vec<f64> = seen
        .iter()
        .map(|(cidr, t)| t - created.get(cidr).copied().unwrap_or(0.0))
        .collect();
    own.sort_by(f64::total_cmp);
    let last = seen.values().copied().fold(0.0, f64::max);
    (
        last,
        own.last().copied().unwrap_or(0.0),
        own.get(own.len() / 2).copied().unwrap_or(0.0),
    )
}

async fn clear_routes(tb: &Testbed, servers: &Servers) -> Result<()> {
    let os = client(tb).await?;
    let net = os.network();
    let routes: Vec<Route> = net
        .router(&tb.tenant.router_id)
        .await?
        .routes
        .into_iter()
        .filter(|r| r.destination.starts_with("10.100."))
        .collect();
    if !routes.is_empty() {
        net.remove_extraroutes(&tb.tenant.router_id, &routes).await?;
    }
    let ids: BTreeSet<&str> = servers.iter().map(|(_, id, _)| id.as_str()).collect();
    for p in net.ports(&[("network_id", tb.tenant.network_id.clone())]).await? {
        if ids.contains(p.device_id.as_str()) && !p.allowed_address_pairs.is_empty() {
            let keep: Vec<AddressPair> = p
                .allowed_address_pairs
                .into_iter()
                .filter(|a| !a.ip_address.starts_with("10.100."))
                .collect();
            net.set_allowed_address_pairs(&p.id, &keep).await?;
        }
    }
    Ok(())
}

/// OpenStack API requests in the testbed's request logs whose user agent contains `agent`,
/// made between `from` and `to` (Unix ms).
pub(crate) fn count_calls(dir: &Path, agent: &str, from: u128, to: u128) -> Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir.join("openstack/log"))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "out") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            let mut parts = line.splitn(7, ' ');
            if parts.next() != Some("REQ") {
                continue;
            }
            let Some(ms) = parts.next().and_then(|t| t.parse::<u128>().ok()) else {
                continue;
            };
            let ua = line.splitn(7, ' ').nth(6).unwrap_or_default();
            if ms >= from && ms <= to && ua.contains(agent) {
                n += 1;
            }
        }
    }
    Ok(n)
}

pub(crate) fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

pub(crate) fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// Waits for the controller to finish what convergence started (port updates come after the
/// routes), then counts its calls per minute over `secs` of nothing changing. Returns the end
/// of the settling time (Unix ms) and the calls per minute.
async fn settle_then_count(dir: &Path, agent: &str, secs: u64) -> Result<(u128, f64)> {
    tokio::time::sleep(Duration::from_secs(15)).await;
    let settled = now_ms();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let n = count_calls(dir, agent, settled, now_ms())?;
    Ok((settled, n as f64 * 60.0 / secs as f64))
}

async fn in_tree(tb: &Testbed, servers: &Servers, options: &Options) -> Result<Outcome> {
    eprintln!("bench: kube-controller-manager 1.20 with the in-tree OpenStack provider");
    let os = client(tb).await?;
    let mut up = Command::new("bash");
    up.arg(paths::repo().join("testbed/kubernetes/up.sh"))
        .env("BERTH_TESTBED", paths::testbed_dir())
        .env("BERTH_CACHE", paths::cache_dir())
        .env("KUBEBED_KCM", "1")
        .env("KUBEBED_KCM_CLOUD_PROVIDER", "openstack")
        .env("KUBEBED_KCM_CLOUD_CONFIG", &tb.cloud_conf)
        .env(
            "KUBEBED_KCM_ARGS",
            format!(
                "--controllers=*,-nodelifecycle --allocate-node-cidrs=true --cluster-cidr={CLUSTER_CIDR} \
                 --node-cidr-mask-size=24 --configure-cloud-routes=true"
            ),
        );
    exec(&mut up)?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let from = now_ms();
    let (started, created) = create_nodes(tb, servers, false).await?;
    let times = wait_routes(&os, tb, servers, started).await;
    let pid: u32 =
        std::fs::read_to_string(paths::testbed_dir().join("kubernetes/kube-controller-manager.pid"))?
            .trim()
            .parse()?;
    let mut out = Outcome {
        rss_mib: rss_mib(pid),
        ..Outcome::default()
    };
    if let Ok(times) = &times {
        let (burst, slowest, median) = latencies(times, &created);
        out.routes_burst = Some(burst);
        out.routes_all = Some(slowest);
        out.routes_p50 = Some(median);
        let (settled, idle) = settle_then_count(&paths::testbed_dir(), "gophercloud", options.steady).await?;
        out.calls_to_converge = count_calls(&paths::testbed_dir(), "gophercloud", from, settled)?;
        out.calls_per_minute_idle = idle;
    }
    let mut down = Command::new("bash");
    down.arg(paths::repo().join("testbed/kubernetes/down.sh"))
        .arg("kube-controller-manager")
        .env("BERTH_TESTBED", paths::testbed_dir());
    exec(&mut down)?;
    delete_nodes(tb, servers).await?;
    clear_routes(tb, servers).await?;
    times?;
    Ok(out)
}

async fn berth(tb: &Testbed, servers: &Servers, options: &Options) -> Result<Outcome> {
    eprintln!("bench: berth cloud-controller");
    let os = client(tb).await?;
    let bin = paths::cargo_target().join("release/berth");
    let log = paths::testbed_dir().join("bench-berth.log");
    let mut child: Child = Command::new(&bin)
        .arg("cloud-controller")
        .arg("--kubeconfig")
        .arg(&tb.kubeconfig)
        .arg("--cloud-config")
        .arg(&tb.cloud_conf)
        .args(["--cluster-cidr", CLUSTER_CIDR, "--leader-elect", "false"])
        .args(["--metrics-bind-address", "127.0.0.1:10299"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(log.with_extension("err"))?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let from = now_ms();
    let (started, created) = create_nodes(tb, servers, true).await?;
    let nodes = Api::<Node>::all(tb.kube().await?);
    let names: BTreeSet<String> = servers.iter().map(|(n, _, _)| n.clone()).collect();
    let routes = async { wait_routes(&os, tb, servers, started).await };
    let init = async {
        loop {
            let list = nodes.list(&Default::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|n| names.contains(n.metadata.name.as_deref().unwrap_or_default()))
                .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some())
                .filter(|n| {
                    !n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| {
                        t.iter()
                            .any(|t| t.key == "node.cloudprovider.kubernetes.io/uninitialized")
                    })
                })
                .count();
            if done == names.len() {
                return Ok::<f64, anyhow::Error>(started.elapsed().as_secs_f64());
            }
            if started.elapsed() > Duration::from_secs(600) {
                bail!(
                    "only {done} of {} nodes initialised after 10 minutes",
                    names.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let (times, init) = tokio::join!(routes, init);
    let mut out = Outcome {
        rss_mib: rss_mib(child.id()),
        ..Outcome::default()
    };
    let ok = times.is_ok() && init.is_ok();
    if let (Ok(times), Ok(init)) = (&times, &init) {
        let (burst, slowest, median) = latencies(times, &created);
        out.routes_burst = Some(burst);
        out.routes_all = Some(slowest);
        out.routes_p50 = Some(median);
        out.init_all = Some(*init);
        let (settled, idle) =
            settle_then_count(&paths::testbed_dir(), "berth-cloud-controller", options.steady).await?;
        out.calls_to_converge = count_calls(&paths::testbed_dir(), "berth-cloud-controller", from, settled)?;
        out.calls_per_minute_idle = idle;
        out.rss_mib = out.rss_mib.max(rss_mib(child.id()));
    }
    let _ = child.kill();
    let _ = child.wait();
    delete_nodes(tb, servers).await?;
    clear_routes(tb, servers).await?;
    if !ok {
        times?;
        init?;
    }
    Ok(out)
}

fn secs(v: Option<f64>) -> String {
    v.map_or("—".into(), |s| format!("{s:.1} s"))
}

fn report(options: &Options, intree: &Outcome, berth: &Outcome) -> String {
    let n = options.nodes as f64;
    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.1}×", a / b)
        } else {
            "—".into()
        }
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| {} hollow nodes | in-tree (KCM 1.20) | berth | in-tree ÷ berth |",
        options.nodes
    );
    let _ = writeln!(s, "|---|---|---|---|");
    let _ = writeln!(
        s,
        "| every route on the router, from the first of the {} Nodes' creation | {} | {} | {} |",
        options.nodes,
        secs(intree.routes_burst),
        secs(berth.routes_burst),
        ratio(
            intree.routes_burst.unwrap_or(0.0),
            berth.routes_burst.unwrap_or(0.0)
        )
    );
    let _ = writeln!(
        s,
        "| slowest route, from its own Node's creation | {} | {} | {} |",
        secs(intree.routes_all),
        secs(berth.routes_all),
        ratio(intree.routes_all.unwrap_or(0.0), berth.routes_all.unwrap_or(0.0))
    );
    let _ = writeln!(
        s,
        "| median route, from its own Node's creation | {} | {} | {} |",
        secs(intree.routes_p50),
        secs(berth.routes_p50),
        ratio(intree.routes_p50.unwrap_or(0.0), berth.routes_p50.unwrap_or(0.0))
    );
    let _ = writeln!(
        s,
        "| every Node initialised (providerID, addresses, labels, taint off) | (kubelet's job) | {} | |",
        secs(berth.init_all)
    );
    let _ = writeln!(
        s,
        "| OpenStack calls until quiet, from Node creation (per node) | {} ({:.1}) | {} ({:.1}) | {} |",
        intree.calls_to_converge,
        intree.calls_to_converge as f64 / n,
        berth.calls_to_converge,
        berth.calls_to_converge as f64 / n,
        ratio(intree.calls_to_converge as f64, berth.calls_to_converge as f64)
    );
    let _ = writeln!(
        s,
        "| OpenStack calls per minute while nothing changes | {:.1} | {:.1} | {} |",
        intree.calls_per_minute_idle,
        berth.calls_per_minute_idle,
        ratio(intree.calls_per_minute_idle, berth.calls_per_minute_idle)
    );
    let _ = writeln!(
        s,
        "| controller memory (RSS) | {} MiB (whole KCM) | {} MiB | {} |",
        intree.rss_mib,
        berth.rss_mib,
        ratio(intree.rss_mib as f64, berth.rss_mib as f64)
    );
    s
}
