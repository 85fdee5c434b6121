//! `berth check`: is this cloud.conf right, and what can berth do with this cloud?
//!
//! Reads the file (warnings for unknown keys, errors for bad values), logs in, lists the
//! catalog and the API extensions that matter, checks that the ids the file names exist, and
//! prints a verdict for each feature. Exit status: 0 when every configured feature works,
//! 1 when the file or the login fails, 2 when a configured feature cannot work.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{Context as _, Result};
use berth_config::CloudConfig;
use berth_openstack::{Client, client::Service};

/// `berth check` flags.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The cloud config, as for the cloud controller.
    #[arg(long, value_name = "FILE", default_value = "/etc/kubernetes/cloud.conf")]
    cloud_config: PathBuf,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Enabled,
    Disabled,
    Broken,
}

struct Verdict {
    feature: &'static str,
    state: State,
    why: String,
}

/// Neutron extensions that change how berth works.
const EXTENSIONS: &[(&str, &str)] = &[
    ("extraroute-atomic", "routes are added and removed atomically"),
    ("extraroute", "static routes on routers"),
    ("allowed-address-pairs", "pod CIDRs on node ports"),
    (
        "port-security",
        "port security (decides whether pairs are needed)",
    ),
    (
        "standard-attr-tag",
        "tags on ports, floating IPs and security groups",
    ),
    ("security-group", "security groups"),
];

pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    let config = CloudConfig::load(&args.cloud_config)?;
    println!("cloud config: {}", args.cloud_config.display());
    for w in &config.warnings {
        println!("  warning: {w}");
    }
    let (credentials, options) = config.credentials()?;
    let client = Client::connect(credentials.clone(), options.clone())
        .await
        .with_context(|| format!("logging in with {}", args.cloud_config.display()))?;
    let token = client.token().await?;
    println!(
        "Keystone: logged in at {} as {} ({}), project {} ({}), token valid until {}",
        credentials.auth_url,
        token.user_name,
        token.user_id,
        token.project_name.as_deref().unwrap_or("-"),
        token.project_id.as_deref().unwrap_or("-"),
        token.expires_at
    );
    println!("  roles: {}", token.roles.join(", "));

    println!(
        "catalog ({} interface, region {}):",
        options.interface,
        options.region.as_deref().unwrap_or("any")
    );
    let mut has = std::collections::BTreeMap::new();
    for service in [
        Service::Compute,
        Service::Network,
        Service::LoadBalancer,
        Service::BlockStorage,
        Service::Image,
    ] {
        let found = client.endpoint(service).await;
        match &found {
            Ok(url) => println!("  {:<14} {url}", service.service_type()),
            Err(e) => println!("  {:<14} missing: {e}", service.service_type()),
        }
        has.insert(service.service_type(), found.is_ok());
    }

    let mut aliases = Vec::new();
    if has["network"] {
        aliases = client
            .network()
            .extension_aliases()
            .await
            .context("listing Neutron extensions")?;
        println!("Neutron extensions:");
        for (alias, what) in EXTENSIONS {
            let yes = aliases.iter().any(|a| a == alias);
            println!("  {:<22} {:<3} {what}", alias, if yes { "yes" } else { "no" });
        }
    }
    let octavia = if has["load-balancer"] {
        let v = client
            .load_balancer()
            .api_version()
            .await
            .context("reading Octavia's API versions")?;
        println!("Octavia API: v{}.{}", v.0, v.1);
        Some(v)
    } else {
        None
    };

    let verdicts = vec![
        nodes(&has),
        load_balancers(&client, &config, &has, octavia).await,
        routes(&client, &config, &aliases).await,
        block_storage(&has),
    ];
    println!("features:");
    for v in &verdicts {
        let state = match v.state {
            State::Enabled => "enabled",
            State::Disabled => "disabled",
            State::Broken => "BROKEN",
        };
        println!("  {:<15} {:<9} {}", v.feature, state, v.why);
    }
    if verdicts.iter().any(|v| v.state == State::Broken) {
        println!("verdict: a configured feature cannot work (see BROKEN above)");
        return Ok(ExitCode::from(2));
    }
    println!("verdict: ok");
    Ok(ExitCode::SUCCESS)
}

fn nodes(has: &std::collections::BTreeMap<&str, bool>) -> Verdict {
    if has["compute"] {
        Verdict {
            feature: "nodes",
            state: State::Enabled,
            why: "Nova answers: providerID, addresses, instance type, zone and lifecycle from servers".into(),
        }
    } else {
        Verdict {
            feature: "nodes",
            state: State::Broken,
            why: "no compute endpoint in the catalog".into(),
        }
    }
}

async fn load_balancers(
    client: &Client,
    config: &CloudConfig,
    has: &std::collections::BTreeMap<&str, bool>,
    octavia: Option<(u32, u32)>,
) -> Verdict {
    let lb = &config.load_balancer;
    let verdict = |state, why: String| Verdict {
        feature: "load-balancers",
        state,
        why,
    };
    if !lb.enabled {
        return verdict(State::Disabled, "[LoadBalancer] enabled = false".into());
    }
    let Some((major, minor)) = octavia else {
        return verdict(
            State::Broken,
            "no load-balancer (Octavia) endpoint in the catalog".into(),
        );
    };
    let mut notes = vec![format!("Octavia v{major}.{minor}")];
    if (major, minor) < (2, 5) {
        notes.push("no tags before v2.5: ownership falls back to names".into());
    }
    if !has["network"] {
        return verdict(
            State::Broken,
            "no network (Neutron) endpoint in the catalog".into(),
        );
    }
    let net = client.network();
    match &lb.subnet_id {
        Some(id) => match net.subnet(id).await {
            Ok(s) => notes.push(format!("VIPs on subnet {} ({}, {})", s.name, s.id, s.cidr)),
            Err(e) => return verdict(State::Broken, format!("[LoadBalancer] subnet-id {id}: {e}")),
        },
        None => notes.push("VIP subnet detected from the nodes' ports (no subnet-id)".into()),
    }
    if lb.internal_lb {
        notes.push("every load balancer is internal (internal-lb = true)".into());
    } else {
        match &lb.floating_network_id {
            Some(id) => match net.network(id).await {
                Ok(n) if n.external => notes.push(format!("floating IPs from {} ({})", n.name, n.id)),
                Ok(n) => {
                    return verdict(
                        State::Broken,
                        format!(
                            "[LoadBalancer] floating-network-id {id} ({}) is not an external network",
                            n.name
                        ),
                    );
                }
                Err(e) => {
                    return verdict(
                        State::Broken,
                        format!("[LoadBalancer] floating-network-id {id}: {e}"),
                    );
                }
            },
            None => notes.push("floating network detected when exactly one external network exists".into()),
        }
    }
    verdict(State::Enabled, notes.join("; "))
}

async fn routes(client: &Client, config: &CloudConfig, aliases: &[String]) -> Verdict {
    let verdict = |state, why: String| Verdict {
        feature: "routes",
        state,
        why,
    };
    let Some(router_id) = &config.route.router_id else {
        return verdict(State::Disabled, "[Route] router-id is not set".into());
    };
    let has = |a: &str| aliases.iter().any(|x| x == a);
    if !has("extraroute") && !has("extraroute-atomic") {
        return verdict(
            State::Broken,
            "Neutron has neither extraroute nor extraroute-atomic".into(),
        );
    }
    match client.network().router(router_id).await {
        Ok(r) => {
            let mode = if has("extraroute-atomic") {
                "atomic route updates (extraroute-atomic)"
            } else {
                "serialised read-modify-write of the route table (no extraroute-atomic)"
            };
            let pairs = if has("allowed-address-pairs") {
                "pod CIDRs added to node ports' allowed address pairs"
            } else {
                "no allowed-address-pairs: only ports without port security can carry pod traffic"
            };
            verdict(
                State::Enabled,
                format!("router {} ({}); {mode}; {pairs}", r.name, r.id),
            )
        }
        Err(e) => verdict(State::Broken, format!("[Route] router-id {router_id}: {e}")),
    }
}

fn block_storage(has: &std::collections::BTreeMap<&str, bool>) -> Verdict {
    if has["block-storage"] {
        Verdict {
            feature: "block-storage",
            state: State::Enabled,
            why: "Cinder answers (CSI comes later)".into(),
        }
    } else {
        Verdict {
            feature: "block-storage",
            state: State::Disabled,
            why: "no block-storage endpoint".into(),
        }
    }
}
