//! `berth cloud-controller`: the process around the controllers.
//!
//! Reads the cloud config, connects to Kubernetes (a kubeconfig, or in-cluster) and OpenStack,
//! serves `/healthz`, `/readyz` and `/metrics`, campaigns for the Lease when leader election is
//! on, and runs the enabled controllers while it leads. SIGTERM or SIGINT stop it gracefully
//! (a leader releases the Lease); losing the Lease stops every controller at once and exits
//! with an error, as kube-controller-manager does.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context as _, Result, bail};
use berth_config::CloudConfig;
use berth_openstack::metrics::ApiMetrics;
use ipnet::IpNet;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::{
    Metrics,
    events::Publisher,
    inventory::Inventory,
    leader::{Elector, Outcome, Settings},
    nodes, routes, services,
};

/// Flag durations are Go durations, as in cloud.conf: `15s`, `2m`, `500ms`, `0`.
fn duration(s: &str) -> Result<Duration, String> {
    berth_config::cloud_conf::parse_duration(s)
}

/// `berth cloud-controller` flags (upstream's names where upstream has them).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The cloud config.
    #[arg(long, value_name = "FILE", default_value = "/etc/kubernetes/cloud.conf")]
    pub cloud_config: PathBuf,
    /// A kubeconfig; without it, the in-cluster service account is used.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The cluster's name: it goes into the names and tags of what berth creates.
    #[arg(long, default_value = "kubernetes")]
    pub cluster_name: String,
    /// Elect a leader among replicas; only the leader reconciles.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long the Lease stays the leader's without renewal.
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long a leader tries to renew before it gives up.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try and leaders renew.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// The Lease's name.
    #[arg(long, default_value = "cloud-controller-manager")]
    pub leader_elect_resource_name: String,
    /// The Lease's namespace.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// Controllers to run: `*` for all, a name to add one, `-name` to leave one out
    /// (cloud-node, cloud-node-lifecycle, route, service).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// The cluster's pod CIDRs (comma-separated): routes inside them are berth's.
    #[arg(long, value_delimiter = ',')]
    pub cluster_cidr: Vec<String>,
    /// Create routes for the Nodes' pod CIDRs (needs [Route] router-id and --cluster-cidr).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub configure_cloud_routes: bool,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:10258")]
    pub metrics_bind_address: SocketAddr,
    /// How often each Node is checked against its server (addresses, shutdown, deletion).
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub node_sync_period: Duration,
    /// How often routes are checked although no Node changed, to repair hand edits of the
    /// router (0: never; Node changes are acted on at once either way).
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub route_reconcile_period: Duration,
    /// How many Services are reconciled at once (each load balancer still sees one operation
    /// at a time).
    #[arg(long, default_value_t = 20)]
    pub concurrent_service_syncs: u16,
    /// The `spec.loadBalancerClass` berth serves besides Services without a class (by
    /// default berth serves only Services without one).
    #[arg(long)]
    pub load_balancer_class: Option<String>,
    /// How often to sweep for load balancers, floating IPs and security groups whose Service
    /// is gone (besides at start-up; 0: only at start-up).
    #[arg(long, default_value = "30m", value_parser = duration)]
    pub load_balancer_gc_period: Duration,
    /// The longest a server and port list is reused before it is taken again (default: the
    /// node sync period, so an idle cluster costs one server list and one port list per period).
    #[arg(long, value_parser = duration)]
    pub openstack_cache_max_age: Option<Duration>,
}

impl Args {
    fn enabled(&self, name: &str) -> bool {
        let c = &self.controllers;
        if c.iter().any(|x| x == &format!("-{name}")) {
            return false;
        }
        c.iter().any(|x| x == "*" || x == name)
    }
}

fn identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "berth".into());
    let suffix: String = std::iter::repeat_with(fastrand_char).take(6).collect();
    format!("{host}_{suffix}")
}

fn fastrand_char() -> char {
    let n = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id())
        % 36;
    std::char::from_digit(n, 36).unwrap_or('x')
}

/// A Kubernetes client from a kubeconfig, or in-cluster without one.
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let cfg =
                kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
            kube::Client::try_from(cfg)?
        }
        None => kube::Client::try_default()
            .await
            .context("no --kubeconfig, and not running in a cluster")?,
    })
}

/// Runs the cloud controller until a signal (Ok) or a lost Lease (Err).
pub async fn run(args: Args) -> Result<()> {
    let config = CloudConfig::load(&args.cloud_config)?;
    for w in &config.warnings {
        warn!("{w}");
    }
    let (credentials, mut options) = config.credentials()?;
    let api_metrics = Arc::new(ApiMetrics::default());
    options.metrics = api_metrics.clone();
    options.user_agent = format!("berth-cloud-controller/{}", env!("CARGO_PKG_VERSION"));
    let openstack = berth_openstack::Client::new(credentials, options)?;
    let kube = kube_client(args.kubeconfig.as_deref()).await?;
    let cluster_cidrs: Vec<IpNet> = args
        .cluster_cidr
        .iter()
        .map(|c| {
            c.parse::<IpNet>()
                .map(|n| n.trunc())
                .with_context(|| format!("--cluster-cidr {c:?} is not a CIDR"))
        })
        .collect::<Result<_>>()?;
    let routes_wanted =
        args.enabled("route") && args.configure_cloud_routes && config.route.router_id.is_some();
    if routes_wanted && cluster_cidrs.is_empty() {
        bail!(
            "routes are on ([Route] router-id is set) but --cluster-cidr is missing: berth needs it to know which routes are its own"
        );
    }

    let services_wanted = args.enabled("service") && config.load_balancer.enabled;
    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::with_prefix("berth");
    api_metrics.register(&mut registry);
    metrics.register(&mut registry);
    let shutdown = CancellationToken::new();
    let http = tokio::spawn(serve(
        args.metrics_bind_address,
        Arc::new(registry),
        shutdown.clone(),
    ));
    tokio::spawn(stop_on_signal(shutdown.clone()));

    let config = Arc::new(config);
    let max_age = args.openstack_cache_max_age.unwrap_or(args.node_sync_period);
    let inventory = Arc::new(Inventory::new(openstack.clone(), max_age));
    let identity = identity();
    let events = Arc::new(Publisher::new(kube.clone(), "berth-cloud-controller", &identity));
    let start = |stop: CancellationToken| {
        let mut tasks = Vec::new();
        if args.enabled("cloud-node") || args.enabled("cloud-node-lifecycle") {
            let ctx = Arc::new(nodes::Context {
                kube: kube.clone(),
                openstack: openstack.clone(),
                config: config.clone(),
                inventory: inventory.clone(),
                events: events.clone(),
                metrics: metrics.clone(),
                sync_period: args.node_sync_period,
            });
            tasks.push(tokio::spawn(nodes::run(ctx, stop.clone())));
        }
        if services_wanted {
            let ctx = Arc::new(services::Context {
                kube: kube.clone(),
                openstack: openstack.clone(),
                config: config.clone(),
                cluster_name: args.cluster_name.clone(),
                class: args.load_balancer_class.clone(),
                events: events.clone(),
                metrics: metrics.clone(),
                concurrency: args.concurrent_service_syncs.max(1),
                gc_period: args.load_balancer_gc_period,
            });
            tasks.push(tokio::spawn(services::run(ctx, stop.clone())));
        }
        if routes_wanted {
            let (kube, openstack, inventory, metrics, config) = (
                kube.clone(),
                openstack.clone(),
                inventory.clone(),
                metrics.clone(),
                config.clone(),
            );
            let (cidrs, period, stop) = (cluster_cidrs.clone(), args.route_reconcile_period, stop.clone());
            tasks.push(tokio::spawn(async move {
                let atomic = loop {
                    match openstack.network().extension_aliases().await {
                        Ok(a) => break a.iter().any(|a| a == "extraroute-atomic"),
                        Err(e) => warn!(error = %e, "cannot list Neutron extensions yet; retrying"),
                    }
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    }
                };
                let ctx = Arc::new(routes::Context {
                    kube,
                    openstack,
                    router_id: config.route.router_id.clone().unwrap_or_default(),
                    cluster_cidrs: cidrs,
                    atomic,
                    inventory,
                    metrics,
                    region: config.global.region.clone(),
                    period,
                });
                routes::run(ctx, stop).await;
            }));
        }
        tasks
    };

    let result = if args.leader_elect {
        let settings = Settings {
            name: args.leader_elect_resource_name.clone(),
            namespace: args.leader_elect_resource_namespace.clone(),
            identity: identity.clone(),
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        };
        info!(lease = %settings.name, namespace = %settings.namespace, identity = %settings.identity, "campaigning for leadership");
        let (elector, mut leading) = Elector::new(kube.clone(), settings);
        let controllers = shutdown.child_token();
        let election = elector.run(shutdown.clone());
        tokio::pin!(election);
        let mut tasks = Vec::new();
        let outcome = loop {
            tokio::select! {
                outcome = &mut election => break outcome,
                changed = leading.changed() => {
                    if changed.is_err() { continue; }
                    let now = *leading.borrow();
                    metrics.set_leader(now);
                    if now && tasks.is_empty() {
                        info!("leading: starting the controllers");
                        tasks = start(controllers.clone());
                    }
                }
            }
        };
        controllers.cancel();
        metrics.set_leader(false);
        for t in tasks {
            let _ = t.await;
        }
        match outcome {
            Outcome::Lost => Err(anyhow::anyhow!("lost the leader Lease: stopped reconciling")),
            Outcome::Shutdown => Ok(()),
        }
    } else {
        metrics.set_leader(true);
        let tasks = start(shutdown.clone());
        shutdown.cancelled().await;
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    };
    shutdown.cancel();
    let _ = http.await;
    result
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    info!("signal received: shutting down");
    shutdown.cancel();
}

async fn serve(addr: SocketAddr, registry: Arc<Registry>, shutdown: CancellationToken) {
    use axum::{Router, http::header, routing::get};
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    let mut text = String::new();
                    match prometheus_client::encoding::text::encode(&mut text, &registry) {
                        Ok(()) => (
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        ),
                        Err(e) => (
                            [(header::CONTENT_TYPE, "text/plain")],
                            format!("# encoding failed: {e}"),
                        ),
                    }
                }
            }),
        );
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            error!(%addr, error = %e, "cannot serve health and metrics");
            shutdown.cancel();
            return;
        }
    };
    info!(%addr, "serving /healthz, /readyz and /metrics");
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
    {
        error!(error = %e, "health and metrics server failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_controller_selection() {
        assert_eq!(duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(duration("soon").is_err());
        let mut args = <Args as clap::FromArgMatches>::from_arg_matches(
            &<Args as clap::Args>::augment_args(clap::Command::new("t")).get_matches_from([
                "t",
                "--controllers",
                "*,-route",
            ]),
        )
        .unwrap();
        assert!(args.enabled("cloud-node"));
        assert!(!args.enabled("route"));
        args.controllers = vec!["route".into()];
        assert!(args.enabled("route") && !args.enabled("cloud-node"));
    }
}
