//! `cargo xtask demo`: berth's main job on the local testbed.
//!
//! Until the cloud controller exists, the demo brings the testbed up, proves that it serves
//! what berth needs (Octavia takes a load balancer to ACTIVE on the cluster subnet; the
//! Kubernetes API is ready) and prints how to reach it.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use berth_e2e::Testbed;
use berth_openstack::load_balancer::NewLoadBalancer;

use crate::{paths, run::Stopwatch, testbed};

pub(crate) fn run() -> Result<()> {
    testbed::up(&testbed::UpOptions::default())?;
    tokio::runtime::Runtime::new()?.block_on(check())?;
    let dir = paths::testbed_dir();
    println!();
    println!("The testbed is up: real OpenStack and Kubernetes 1.20.2 on 127.0.0.1.");
    println!();
    println!("  source {}/env", dir.display());
    println!("  openstack server list; openstack loadbalancer list; openstack network list");
    println!("  kubectl get --raw /readyz; kubectl get nodes");
    println!();
    println!(
        "  cloud.conf for a cluster in the demo project: {}/cloud.conf",
        dir.display()
    );
    println!("  stop it with: cargo xtask testbed down   (add --purge to wipe its state)");
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
