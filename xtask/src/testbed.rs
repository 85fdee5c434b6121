//! `cargo xtask testbed up|down|status`: the local testbed.
//!
//! The shell recipes under `testbed/` do the work (see `testbed/README.md`); this adds the
//! order, the timings and the files berth's tests and demo read:
//! `$BERTH_TESTBED/testbed.json` (the harness), `cloud.conf` (a cluster's cloud config for
//! the demo project) and `env` (`source` it for `openstack` and `kubectl`).

use std::{
    fs,
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::{
    paths,
    run::{Stopwatch, exec, spawn, wait},
};

#[derive(Subcommand)]
pub(crate) enum Action {
    /// Install what is missing, build or reuse the caches, and start everything (idempotent).
    Up(UpOptions),
    /// Stop the processes the testbed started (only those, by checked pid).
    Down {
        /// Also delete the state (databases, certificates, logs); caches are kept.
        #[arg(long)]
        purge: bool,
    },
    /// Show the testbed's processes and their memory, and whether the APIs answer.
    Status,
}

#[derive(Args, Clone, Default)]
pub(crate) struct UpOptions {
    /// Wipe the state first: Nova's fake driver forgets its servers on restart, so tests start fresh.
    #[arg(long)]
    pub(crate) fresh: bool,
    /// Make every OpenStack API log one line per request with its user agent (for benchmarks).
    #[arg(long)]
    pub(crate) reqlog: bool,
    /// Also run kube-controller-manager with this --cloud-provider (`openstack` runs the Go
    /// in-tree provider with the testbed's cloud.conf; `external` leaves clouds to berth).
    #[arg(long, value_name = "PROVIDER", value_parser = ["openstack", "external"])]
    pub(crate) kcm: Option<String>,
}

pub(crate) fn run(action: Action) -> Result<()> {
    match action {
        Action::Up(options) => up(&options),
        Action::Down { purge } => down(purge),
        Action::Status => status(),
    }
}

fn script(path: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(paths::repo().join("testbed").join(path));
    cmd.env("BERTH_TESTBED", paths::testbed_dir())
        .env("BERTH_CACHE", paths::cache_dir());
    cmd
}

pub(crate) fn up(options: &UpOptions) -> Result<()> {
    let total = Stopwatch::start();
    let dir = paths::testbed_dir();
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    exec(&mut script("deps.sh"))?;
    let step = Stopwatch::start();
    exec(&mut script("kubernetes/build.sh"))?;
    let build_secs = step.secs();

    if options.fresh {
        exec(script("kubernetes/down.sh").arg("--purge"))?;
        // Files describing the old testbed must not outlive it.
        for f in ["testbed.json", "cloud.conf", "env"] {
            let _ = fs::remove_file(dir.join(f));
        }
    }
    let step = Stopwatch::start();
    let mut openstack = script("openstack/up.sh");
    if options.fresh {
        openstack.arg("--fresh");
    }
    if options.reqlog {
        openstack.env("OSBED_UWSGI_REQLOG", "1");
    }
    let (shown, child) = spawn(&mut openstack)?;
    // Kubernetes starts in seconds: bring it up while OpenStack starts, unless the
    // controller manager needs the cloud.conf that exists only once OpenStack is up.
    if options.kcm.is_none() {
        exec(&mut script("kubernetes/up.sh"))?;
    }
    wait(&shown, child)?;
    let openstack_secs = step.secs();

    write_descriptions(&dir)?;
    if let Some(provider) = &options.kcm {
        let mut k = script("kubernetes/up.sh");
        k.env("KUBEBED_KCM", "1")
            .env("KUBEBED_KCM_CLOUD_PROVIDER", provider);
        if provider == "openstack" {
            k.env("KUBEBED_KCM_CLOUD_CONFIG", dir.join("cloud.conf"));
        }
        // Hollow nodes have no kubelet lease: node lifecycle would evict them.
        if std::env::var_os("KUBEBED_KCM_ARGS").is_none() {
            k.env("KUBEBED_KCM_ARGS", "--controllers=*,-nodelifecycle");
        }
        exec(&mut k)?;
    }
    eprintln!(
        "testbed up in {:.0}s (kubernetes build {:.0}s, openstack {:.0}s)",
        total.secs(),
        build_secs,
        openstack_secs
    );
    eprintln!(
        "  source {}/env    # openstack and kubectl, as the demo user and the cluster admin",
        dir.display()
    );
    eprintln!(
        "  {}/cloud.conf    # a cluster's cloud config for the demo project",
        dir.display()
    );
    Ok(())
}

/// Writes `testbed.json`, `cloud.conf` and `env` from what the recipes left in the state dir.
fn write_descriptions(dir: &Path) -> Result<()> {
    let os_dir = dir.join("openstack");
    let tenant_path = os_dir.join("tenant.json");
    let tenant: Value = serde_json::from_str(
        &fs::read_to_string(&tenant_path).with_context(|| format!("reading {}", tenant_path.display()))?,
    )
    .with_context(|| format!("parsing {}", tenant_path.display()))?;
    let id = |k: &str| {
        tenant
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let password = std::env::var("OSBED_PASSWORD").unwrap_or_else(|_| "secret".into());
    let az = std::env::var("OSBED_AZ").unwrap_or_else(|_| "zone-a".into());
    let kubeconfig = dir.join("kubernetes/admin.kubeconfig");
    let user = |name: &str| json!({ "username": name, "password": password, "project_name": name, "domain_name": "Default" });
    let description = json!({
        "auth_url": "http://127.0.0.1:5000/v3",
        "region": "RegionOne",
        "admin": user("admin"),
        "demo": user("demo"),
        "tenant": tenant,
        "availability_zone": az,
        "flavor": "m1.tiny",
        "image": "osbed-tiny",
        "kubeconfig": kubeconfig,
        "cloud_conf": dir.join("cloud.conf"),
        "dir": dir,
    });
    write_private(
        &dir.join("testbed.json"),
        &serde_json::to_string_pretty(&description)?,
    )?;

    let cloud_conf = format!(
        "# A cluster's cloud config for the testbed's demo project (written by cargo xtask testbed up).\n\
         [Global]\n\
         auth-url = http://127.0.0.1:5000/v3\n\
         username = demo\n\
         password = {password}\n\
         tenant-name = demo\n\
         domain-name = Default\n\
         region = RegionOne\n\
         \n\
         [LoadBalancer]\n\
         use-octavia = true\n\
         subnet-id = {subnet}\n\
         floating-network-id = {public}\n\
         \n\
         [Route]\n\
         router-id = {router}\n",
        subnet = id("subnet_id"),
        public = id("public_network_id"),
        router = id("router_id"),
    );
    write_private(&dir.join("cloud.conf"), &cloud_conf)?;

    let env = format!(
        "# source me: the testbed's OpenStack (as the demo user) and Kubernetes (as admin)\n\
         export OS_CLIENT_CONFIG_FILE={clouds}\n\
         export OS_CLOUD=osbed-demo\n\
         export KUBECONFIG={kubeconfig}\n\
         export PATH={kube_bin}:{venv}/bin:$PATH\n",
        clouds = os_dir.join("clouds.yaml").display(),
        kubeconfig = kubeconfig.display(),
        kube_bin = paths::kube_bin().display(),
        venv = paths::venv().display(),
    );
    write_private(&dir.join("env"), &env)?;
    Ok(())
}

/// Writes a file only its owner may read: these hold the testbed's (throwaway) passwords.
fn write_private(path: &PathBuf, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    drop(f);
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

pub(crate) fn down(purge: bool) -> Result<()> {
    // The demo's cloud controller first: it talks to what is about to stop.
    if let Some(pid) = crate::demo::ccm_pid() {
        exec(Command::new("kill").arg(pid.to_string()))?;
        let _ = fs::remove_file(paths::testbed_dir().join("berth-cloud-controller.pid"));
        eprintln!("stopped berth cloud-controller (pid {pid})");
    }
    let mut k = script("kubernetes/down.sh");
    let mut o = script("openstack/down.sh");
    if purge {
        k.arg("--purge");
        o.arg("--purge");
        for f in ["testbed.json", "cloud.conf", "env"] {
            let _ = fs::remove_file(paths::testbed_dir().join(f));
        }
    }
    exec(&mut k)?;
    exec(&mut o)
}

fn status() -> Result<()> {
    exec(&mut script("openstack/status.sh"))?;
    exec(&mut script("kubernetes/status.sh"))
}
