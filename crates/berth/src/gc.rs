//! `berth gc`: deletes the load balancers, floating IPs and security groups berth made for a
//! cluster's Services that no longer exist (the sweep the cloud controller also runs).
//!
//! Only objects tagged with the cluster and a Service UID are considered; with `--dry-run`
//! nothing is deleted and the table says what would be.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{Context as _, Result};
use berth_config::CloudConfig;
use berth_openstack::Client;

/// `berth gc` flags.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The cloud config, as for the cloud controller.
    #[arg(long, value_name = "FILE", default_value = "/etc/kubernetes/cloud.conf")]
    cloud_config: PathBuf,
    /// A kubeconfig; without it, the in-cluster service account is used.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The cluster whose leftovers to sweep (the cloud controller's --cluster-name).
    #[arg(long)]
    cluster_name: String,
    /// Only list what would be deleted.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    let config = CloudConfig::load(&args.cloud_config)?;
    let (credentials, mut options) = config.credentials()?;
    options.user_agent = format!("berth-gc/{}", env!("CARGO_PKG_VERSION"));
    let os = Client::connect(credentials, options)
        .await
        .with_context(|| format!("logging in with {}", args.cloud_config.display()))?;
    let kube = berth_controller::process::kube_client(args.kubeconfig.as_deref()).await?;
    let orphans = berth_controller::services::gc::sweep(&os, &kube, &args.cluster_name, args.dry_run).await?;
    if orphans.is_empty() {
        println!(
            "nothing to collect: every object tagged for cluster {:?} belongs to an existing Service",
            args.cluster_name
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<13} {:<36} {:<40} {:<36} action",
        "kind", "id", "name", "service uid"
    );
    for o in &orphans {
        println!(
            "{:<13} {:<36} {:<40} {:<36} {}",
            o.kind, o.id, o.name, o.service_uid, o.action
        );
    }
    Ok(ExitCode::SUCCESS)
}
