//! `berth` as a user runs it: the binary next to the test executable, and a running
//! `berth cloud-controller` that is stopped (and its log kept) when the test ends.

use std::{
    io::Read as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use crate::Testbed;

/// The berth binary built alongside the tests (`cargo xtask test` builds it first).
pub fn berth_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("berth"))
        .context("no target directory above the test executable")?;
    if !bin.exists() {
        bail!("{} is missing: run `cargo build -p berth` first", bin.display());
    }
    Ok(bin)
}

/// A port nobody listens on now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A running `berth cloud-controller`.
#[derive(Debug)]
pub struct CloudController {
    child: Child,
    /// Where its `/metrics` are.
    pub metrics_url: String,
    /// Its log file.
    pub log: PathBuf,
}

/// The sum of every `berth_openstack_api_calls_total` series in a `/metrics` text.
pub fn openstack_calls(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("berth_openstack_api_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

impl CloudController {
    /// Starts `berth cloud-controller` on the testbed with `args` after the defaults
    /// (testbed kubeconfig and cloud.conf, metrics on a free loopback port, quick periods).
    pub fn start(testbed: &Testbed, name: &str, args: &[&str]) -> Result<Self> {
        let port = free_port()?;
        let log = std::env::temp_dir().join(format!("berth-ccm-{name}-{port}.log"));
        let file = std::fs::File::create(&log)?;
        let mut cmd = Command::new(berth_binary()?);
        cmd.arg("cloud-controller")
            .arg("--kubeconfig")
            .arg(&testbed.kubeconfig);
        if !args.contains(&"--cloud-config") {
            cmd.arg("--cloud-config").arg(&testbed.cloud_conf);
        }
        cmd.args(["--metrics-bind-address", &format!("127.0.0.1:{port}")]);
        // Quick periods for tests, unless the test sets its own.
        for (flag, value) in [
            ("--node-sync-period", "2s"),
            ("--openstack-cache-max-age", "1s"),
            ("--route-reconcile-period", "2s"),
        ] {
            if !args.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        cmd.args(args)
            .env("BERTH_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        let child = cmd.spawn().context("starting berth cloud-controller")?;
        Ok(Self {
            child,
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            log,
        })
    }

    /// Its `/metrics` text, once it answers (waits up to 20 s).
    pub async fn metrics(&self) -> Result<String> {
        for _ in 0..100 {
            if let Ok(text) = http_get(&self.metrics_url).await {
                return Ok(text);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("no /metrics at {} (log {})", self.metrics_url, self.log.display())
    }

    /// The value of one metric line (exact name with labels), 0 when absent.
    pub async fn metric(&self, series: &str) -> Result<f64> {
        let text = self.metrics().await?;
        Ok(text
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Whether it still runs, and its exit code if not.
    pub fn exited(&mut self) -> Option<i32> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|s| s.code().unwrap_or(-1))
    }

    /// Sends SIGTERM (a graceful stop) and waits up to 20 s.
    pub async fn terminate(&mut self) -> Result<Option<i32>> {
        signal(self.child.id(), "TERM")?;
        for _ in 0..100 {
            if let Some(code) = self.exited() {
                return Ok(Some(code));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(None)
    }

    /// Kills it at once (SIGKILL), as a crashed node would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for CloudController {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends a signal by name (`TERM`, `STOP`, `CONT`) to a process, or to a group with `-pgid`.
pub fn signal(target: impl std::fmt::Display, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg("--")
        .arg(target.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -{name} {target} failed");
    }
    Ok(())
}

/// A minimal HTTP GET for loopback `/metrics` (plain HTTP/1.0, no keep-alive).
async fn http_get(url: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").context("http only")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    stream
        .write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await?;
    let (head, body) = buf.split_once("\r\n\r\n").context("no HTTP body")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("{}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_owned())
}

/// Freezes a testbed OpenStack service (SIGSTOP to its process group) until dropped.
#[derive(Debug)]
pub struct Frozen {
    pgid: String,
}

impl Frozen {
    /// Freezes `service` (e.g. `keystone`, `nova-api`) of the testbed.
    pub fn service(testbed: &Testbed, service: &str) -> Result<Self> {
        let pidfile = testbed.dir.join("openstack/run").join(format!("{service}.pid"));
        let pid =
            std::fs::read_to_string(&pidfile).with_context(|| format!("reading {}", pidfile.display()))?;
        let pgid = format!("-{}", pid.trim());
        signal(&pgid, "STOP")?;
        Ok(Self { pgid })
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal(&self.pgid, "CONT");
    }
}
