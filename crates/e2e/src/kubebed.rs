//! A Kubernetes 1.20 control plane of a test's own (etcd, kube-apiserver and, if asked,
//! kube-controller-manager), on free ports in a private directory, torn down on drop.
//!
//! For what must not run on the shared one: kube-controller-manager with the in-tree OpenStack
//! provider would serve every LoadBalancer Service of every other test there.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use crate::{Testbed, free_port, unique_name};

/// kube-controller-manager's controllers switched off so that only its service controller runs
/// (and the token controllers that give it credentials). The bed's `--controllers=*,…` comes
/// first and a repeated `--controllers` adds to it, so everything else is named with `-`.
pub const ONLY_SERVICE_CONTROLLER: &[&str] = &[
    "attachdetach",
    "cloud-node-lifecycle",
    "clusterrole-aggregation",
    "cronjob",
    "csrapproving",
    "csrcleaner",
    "csrsigning",
    "daemonset",
    "deployment",
    "disruption",
    "endpoint",
    "endpointslice",
    "endpointslicemirroring",
    "ephemeral-volume",
    "garbagecollector",
    "horizontalpodautoscaling",
    "job",
    "namespace",
    "nodeipam",
    "nodelifecycle",
    "persistentvolume-binder",
    "persistentvolume-expander",
    "podgc",
    "pv-protection",
    "pvc-protection",
    "replicaset",
    "replicationcontroller",
    "resourcequota",
    "root-ca-cert-publisher",
    "route",
    "statefulset",
    "ttl",
    "ttl-after-finished",
];

/// The `--controllers` flag that leaves kube-controller-manager only its service controller.
pub fn only_service_controller_flag() -> String {
    let off: Vec<String> = ONLY_SERVICE_CONTROLLER.iter().map(|c| format!("-{c}")).collect();
    format!("--controllers={}", off.join(","))
}

/// kube-controller-manager 1.20 with its in-tree OpenStack provider.
#[derive(Debug, Clone)]
pub struct InTreeKcm {
    /// Its cloud.conf.
    pub cloud_conf: PathBuf,
    /// `--cluster-name`.
    pub cluster_name: String,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running bed.
#[derive(Debug)]
pub struct KubeBed {
    dir: PathBuf,
    env: Vec<(String, String)>,
}

impl KubeBed {
    /// Starts etcd and kube-apiserver, and the in-tree kube-controller-manager if asked.
    pub fn start(testbed: &Testbed, kcm: Option<&InTreeKcm>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("berth-{}", unique_name("kubebed")));
        let mut env = vec![
            ("KUBEBED_DIR".to_owned(), dir.display().to_string()),
            ("KUBEBED_ETCD_PORT".to_owned(), free_port()?.to_string()),
            ("KUBEBED_ETCD_PEER_PORT".to_owned(), free_port()?.to_string()),
            ("KUBEBED_APISERVER_PORT".to_owned(), free_port()?.to_string()),
            ("KUBEBED_KCM_PORT".to_owned(), free_port()?.to_string()),
            ("BERTH_TESTBED".to_owned(), testbed.dir.display().to_string()),
        ];
        if let Some(k) = kcm {
            env.extend([
                ("KUBEBED_KCM".to_owned(), "1".to_owned()),
                ("KUBEBED_KCM_CLOUD_PROVIDER".to_owned(), "openstack".to_owned()),
                (
                    "KUBEBED_KCM_CLOUD_CONFIG".to_owned(),
                    k.cloud_conf.display().to_string(),
                ),
                (
                    "KUBEBED_KCM_ARGS".to_owned(),
                    format!(
                        "{} --cluster-name={}",
                        only_service_controller_flag(),
                        k.cluster_name
                    ),
                ),
            ]);
        }
        let bed = Self { dir, env };
        let out = bed.script("up.sh", &[])?;
        if !out.status.success() {
            bail!(
                "testbed/kubernetes/up.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(bed)
    }

    fn script(&self, script: &str, args: &[&str]) -> Result<std::process::Output> {
        Command::new("bash")
            .arg(repo_root().join("testbed/kubernetes").join(script))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("KUBEBED_ETCD_DATA")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running testbed/kubernetes/{script}"))
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The testbed description with this bed's Kubernetes API instead of the shared one.
    pub fn testbed(&self, testbed: &Testbed) -> Testbed {
        let mut t = testbed.clone();
        t.kubeconfig = self.kubeconfig();
        t
    }

    /// Stops kube-controller-manager (the rest keeps running).
    pub fn stop_kcm(&self) -> Result<()> {
        let out = self.script("down.sh", &["kube-controller-manager"])?;
        if !out.status.success() {
            bail!("down.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// kube-controller-manager's log so far.
    pub fn kcm_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("logs/kube-controller-manager.log")).unwrap_or_default()
    }
}

impl Drop for KubeBed {
    fn drop(&mut self) {
        let _ = self.script("down.sh", &["--purge"]);
    }
}
