//! Keystone auth fixtures: a running `berth keystone-webhook` with its own CA, a kube-apiserver
//! of its own that uses it for authentication and authorization, and a TCP proxy in front of
//! Keystone that a test can switch off and on (the shared Keystone itself is never stopped).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use tokio::{net::TcpListener, sync::Notify, task::JoinHandle};

use crate::{Testbed, berth_binary, free_port};

/// The directory of the Kubernetes 1.20 binaries the testbed built.
pub fn kube_bin_dir() -> PathBuf {
    let cache = std::env::var_os("BERTH_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/berth")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache/berth"));
    cache.join("kube-1.20.2/bin")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh private directory under /tmp, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes `/tmp/berth-e2e-<what>-<random>`.
    pub fn new(what: &str) -> Result<Self> {
        let path = std::env::temp_dir().join(format!("berth-{}", crate::unique_name(what)));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a CA and a serving certificate for 127.0.0.1 into `dir` (ca.crt, tls.crt, tls.key).
pub fn make_certificates(dir: &Path) -> Result<()> {
    let script = r#"set -e
openssl genrsa -out ca.key 2048 2>/dev/null
openssl req -x509 -new -nodes -key ca.key -sha256 -days 2 -subj "/CN=berth-e2e-webhook-ca" -out ca.crt
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' > tls.ext
openssl genrsa -out tls.key 2048 2>/dev/null
openssl req -new -key tls.key -subj "/CN=127.0.0.1" -out tls.csr
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 2 -extfile tls.ext -out tls.crt 2>/dev/null
"#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!("openssl failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Options of a [`Webhook`].
#[derive(Debug, Clone, Default)]
pub struct WebhookOptions {
    /// The policy text to start with (written to `policy.json`), if any.
    pub policy: Option<String>,
    /// Keystone's URL instead of the testbed's (e.g. a [`TcpProxy`]).
    pub keystone_url: Option<String>,
    /// More flags.
    pub args: Vec<String>,
    /// The berth binary to run instead of the one next to the tests (benchmarks use a release build).
    pub binary: Option<PathBuf>,
}

/// A running `berth keystone-webhook` with the testbed admin's credentials.
#[derive(Debug)]
pub struct Webhook {
    child: Child,
    dir: TempDir,
    /// `https://127.0.0.1:<port>/webhook`.
    pub url: String,
    /// Plain-HTTP `/metrics`.
    pub metrics_url: String,
    http: reqwest::Client,
}

/// A webhook's directory (certificates, cloud.conf, its kubeconfig for kube-apiserver) and
/// ports, before it runs: [`PreparedWebhook::spawn`] starts it.
#[derive(Debug)]
pub struct PreparedWebhook {
    dir: TempDir,
    port: u16,
    metrics_port: u16,
}

impl PreparedWebhook {
    /// `https://127.0.0.1:<port>/webhook`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}/webhook", self.port)
    }

    /// The kubeconfig for kube-apiserver's webhook flags (see [`Webhook::kubeconfig`]).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("webhook.kubeconfig")
    }

    /// Starts the webhook with `options` and `extra` flags, and waits until it answers.
    pub async fn spawn(self, options: &WebhookOptions, extra: &[String]) -> Result<Webhook> {
        let dir = self.dir;
        let (port, metrics_port) = (self.port, self.metrics_port);
        let log = std::fs::File::create(dir.path().join("webhook.log"))?;
        let binary = match &options.binary {
            Some(b) => b.clone(),
            None => berth_binary()?,
        };
        let mut cmd = Command::new(binary);
        cmd.arg("keystone-webhook")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .arg("--tls-cert-file")
            .arg(dir.path().join("tls.crt"))
            .arg("--tls-private-key-file")
            .arg(dir.path().join("tls.key"))
            .arg("--cloud-config")
            .arg(dir.path().join("cloud.conf"))
            .args(["--reload-period", "500ms"]);
        if let Some(policy) = &options.policy {
            let path = dir.path().join("policy.json");
            std::fs::write(&path, policy)?;
            cmd.arg("--keystone-policy-file").arg(path);
        }
        cmd.args(&options.args)
            .args(extra)
            .env("BERTH_LOG", "info,berth_keystone=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().context("starting berth keystone-webhook")?;
        let ca = std::fs::read(dir.path().join("ca.crt"))?;
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
            .timeout(Duration::from_secs(30))
            .build()?;
        let mut webhook = Webhook {
            child,
            dir,
            url: format!("https://127.0.0.1:{port}/webhook"),
            metrics_url: format!("http://127.0.0.1:{metrics_port}/metrics"),
            http,
        };
        // Up to 60 s: it logs in to Keystone (retried when Keystone is busy with other tests)
        // and may wait up to 10 s for its ConfigMaps before it serves.
        for _ in 0..600 {
            if let Some(code) = webhook.child.try_wait()?.and_then(|s| s.code()) {
                bail!("the webhook exited with {code}: {}", webhook.log());
            }
            let health = webhook.url.replace("/webhook", "/healthz");
            if webhook.http.get(&health).send().await.is_ok() {
                return Ok(webhook);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the webhook did not answer: {}", webhook.log())
    }

    fn write_kubeconfig(&self) -> Result<()> {
        std::fs::write(
            self.kubeconfig(),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: keystone-webhook\n  cluster:\n    certificate-authority: {}\n    server: {}\nusers:\n- name: kube-apiserver\n  user: {{}}\ncontexts:\n- name: webhook\n  context:\n    cluster: keystone-webhook\n    user: kube-apiserver\ncurrent-context: webhook\n",
                self.dir.path().join("ca.crt").display(),
                self.url()
            ),
        )?;
        Ok(())
    }
}

impl Webhook {
    /// Starts the webhook and waits until it answers.
    pub async fn start(testbed: &Testbed, options: WebhookOptions) -> Result<Self> {
        Self::prepare(testbed, &options)?.spawn(&options, &[]).await
    }

    /// Writes its certificates (a CA of its own), cloud.conf (the testbed admin) and the
    /// kubeconfig for kube-apiserver, and picks its ports, without starting it.
    pub fn prepare(testbed: &Testbed, options: &WebhookOptions) -> Result<PreparedWebhook> {
        berth_openstack::install_crypto_provider();
        let dir = TempDir::new("kwh")?;
        make_certificates(dir.path())?;
        let admin = &testbed.admin;
        let cloud_conf = dir.path().join("cloud.conf");
        std::fs::write(
            &cloud_conf,
            format!(
                "[Global]\nauth-url = {}\nusername = {}\npassword = {}\ntenant-name = {}\ndomain-name = {}\nregion = {}\n",
                options.keystone_url.as_deref().unwrap_or(&testbed.auth_url),
                admin.username,
                admin.password.expose(),
                admin.project_name,
                admin.domain_name,
                testbed.region
            ),
        )?;
        set_private(&cloud_conf)?;
        let prepared = PreparedWebhook {
            dir,
            port: free_port()?,
            metrics_port: free_port()?,
        };
        prepared.write_kubeconfig()?;
        Ok(prepared)
    }

    /// Its private directory (certificates, cloud.conf, policy.json, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA that signed its serving certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The policy file it watches.
    pub fn policy_file(&self) -> PathBuf {
        self.dir.path().join("policy.json")
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("webhook.log")).unwrap_or_default()
    }

    /// POSTs `body` to `/webhook`; the HTTP status and the JSON answer.
    pub async fn post(&self, body: impl Into<reqwest::Body>) -> Result<(u16, Value)> {
        let r = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = r.status().as_u16();
        Ok((status, r.json().await?))
    }

    /// A TokenReview of `token` in `version` (`v1` or `v1beta1`); the answer's `status`.
    pub async fn token_review(&self, version: &str, token: &str) -> Result<Value> {
        let body = serde_json::json!({
            "apiVersion": format!("authentication.k8s.io/{version}"),
            "kind": "TokenReview",
            "spec": { "token": token }
        });
        let (status, answer) = self.post(body.to_string()).await?;
        if status != 200 {
            bail!("HTTP {status}: {answer}");
        }
        if answer["apiVersion"] != format!("authentication.k8s.io/{version}") {
            bail!("the answer does not echo the apiVersion: {answer}");
        }
        Ok(answer["status"].clone())
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> Result<String> {
        Ok(self.http.get(&self.metrics_url).send().await?.text().await?)
    }

    /// The sum of the series of `name` whose labels contain `labels`.
    pub async fn metric(&self, name: &str, labels: &str) -> Result<f64> {
        Ok(self
            .metrics()
            .await?
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .filter(|l| l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum())
    }

    /// Token validations the webhook sent to Keystone (`GET /v3/auth/tokens`), any outcome.
    pub async fn keystone_validations(&self) -> Result<f64> {
        self.metric(
            "berth_openstack_api_calls_total",
            r#"service="identity",method="GET""#,
        )
        .await
    }

    /// A kubeconfig for kube-apiserver's `--authentication-token-webhook-config-file` and
    /// `--authorization-webhook-config-file` (written by [`Webhook::prepare`]).
    pub fn kubeconfig(&self) -> Result<PathBuf> {
        Ok(self.dir.path().join("webhook.kubeconfig"))
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn set_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// A kube-apiserver 1.20 (with its own etcd) that asks a [`Webhook`] for authentication and
/// authorization (after RBAC), torn down on drop.
#[derive(Debug)]
pub struct WebhookCluster {
    /// The webhook (dropped, so stopped, before the apiserver).
    pub webhook: Webhook,
    bed: KubeBed,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
}

/// A kube-apiserver and etcd started by `testbed/kubernetes/up.sh`, purged on drop.
#[derive(Debug)]
struct KubeBed {
    dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Drop for KubeBed {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("testbed/kubernetes/down.sh"))
            .arg("--purge")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output();
    }
}

impl WebhookCluster {
    /// Starts an apiserver sending `version` (`v1` or `v1beta1`) reviews to a webhook, then the
    /// webhook.
    pub async fn start(testbed: &Testbed, version: &str, options: WebhookOptions) -> Result<Self> {
        Self::start_with(testbed, version, options, false).await
    }

    /// Like [`WebhookCluster::start`]; with `kube_access`, the webhook also gets
    /// `--kubeconfig` with this cluster's admin (for policy and sync ConfigMaps, sync).
    pub async fn start_with(
        testbed: &Testbed,
        version: &str,
        options: WebhookOptions,
        kube_access: bool,
    ) -> Result<Self> {
        let prepared = Webhook::prepare(testbed, &options)?;
        let kubeconfig = prepared.kubeconfig();
        let dir = std::env::temp_dir().join(format!("berth-{}", crate::unique_name("kubebed")));
        let api_port = free_port()?;
        let env = vec![
            ("KUBEBED_DIR".to_owned(), dir.display().to_string()),
            ("KUBEBED_ETCD_PORT".to_owned(), free_port()?.to_string()),
            ("KUBEBED_ETCD_PEER_PORT".to_owned(), free_port()?.to_string()),
            ("KUBEBED_APISERVER_PORT".to_owned(), api_port.to_string()),
            (
                "KUBEBED_AUTHN_WEBHOOK".to_owned(),
                kubeconfig.display().to_string(),
            ),
            (
                "KUBEBED_AUTHZ_WEBHOOK".to_owned(),
                kubeconfig.display().to_string(),
            ),
            ("KUBEBED_WEBHOOK_VERSION".to_owned(), version.to_owned()),
        ];
        let bed = KubeBed { dir, env };
        let out = Command::new("bash")
            .arg(repo_root().join("testbed/kubernetes/up.sh"))
            .envs(bed.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .context("running testbed/kubernetes/up.sh")?;
        if !out.status.success() {
            bail!("up.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut extra = Vec::new();
        if kube_access {
            extra.push("--kubeconfig".to_owned());
            extra.push(bed.dir.join("admin.kubeconfig").display().to_string());
        }
        let webhook = prepared.spawn(&options, &extra).await?;
        Ok(Self {
            webhook,
            bed,
            server: format!("https://127.0.0.1:{api_port}"),
        })
    }

    /// A Kubernetes client with the cluster's admin.
    pub async fn kube(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.admin_kubeconfig())?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// The admin kubeconfig (static token, group system:masters).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.bed.dir.join("admin.kubeconfig")
    }

    /// Writes a kubeconfig whose user runs `berth keystone-login` (the documented stanza).
    pub fn keystone_kubeconfig(&self) -> Result<PathBuf> {
        let path = self.bed.dir.join("keystone.kubeconfig");
        std::fs::write(
            &path,
            format!(
                r#"apiVersion: v1
kind: Config
clusters:
- name: kubebed
  cluster:
    server: {}
    certificate-authority: {}
users:
- name: keystone
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {}
      args: ["keystone-login"]
contexts:
- name: keystone
  context:
    cluster: kubebed
    user: keystone
current-context: keystone
"#,
                self.server,
                self.bed.dir.join("pki/ca.crt").display(),
                berth_binary()?.display()
            ),
        )?;
        Ok(path)
    }

    /// Runs kubectl with `kubeconfig`, `env` and `args`.
    pub fn kubectl(&self, kubeconfig: &Path, env: &[(String, String)], args: &[&str]) -> Result<Output> {
        Ok(Command::new(kube_bin_dir().join("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()?)
    }
}

/// The `OS_*` variables of a testbed user, for `berth keystone-login`, with a private token
/// cache directory.
pub fn os_env(testbed: &Testbed, user: &crate::CloudUser, cache: &Path) -> Vec<(String, String)> {
    vec![
        ("OS_AUTH_URL".into(), testbed.auth_url.clone()),
        ("OS_USERNAME".into(), user.username.clone()),
        ("OS_PASSWORD".into(), user.password.expose().to_owned()),
        ("OS_PROJECT_NAME".into(), user.project_name.clone()),
        ("OS_USER_DOMAIN_NAME".into(), user.domain_name.clone()),
        ("OS_PROJECT_DOMAIN_NAME".into(), user.domain_name.clone()),
        ("XDG_CACHE_HOME".into(), cache.display().to_string()),
    ]
}

/// A TCP proxy on loopback to `target` that can be switched off (connections refused and
/// cut) and on again, on the same port.
#[derive(Debug)]
pub struct TcpProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    on: Arc<AtomicBool>,
    changed: Arc<Notify>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// Starts a proxy to `target`.
    pub async fn start(target: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let on = Arc::new(AtomicBool::new(true));
        let changed = Arc::new(Notify::new());
        let task = tokio::spawn(Self::run(
            Some(listener),
            addr,
            target,
            on.clone(),
            changed.clone(),
        ));
        Ok(Self {
            addr,
            on,
            changed,
            task,
        })
    }

    async fn run(
        mut listener: Option<TcpListener>,
        addr: SocketAddr,
        target: SocketAddr,
        on: Arc<AtomicBool>,
        changed: Arc<Notify>,
    ) {
        let mut conns: Vec<JoinHandle<()>> = Vec::new();
        loop {
            let Some(l) = listener.as_ref() else {
                changed.notified().await;
                if on.load(Ordering::SeqCst) {
                    listener = TcpListener::bind(addr).await.ok();
                }
                continue;
            };
            tokio::select! {
                () = changed.notified() => {
                    if !on.load(Ordering::SeqCst) {
                        listener = None;
                        for c in conns.drain(..) {
                            c.abort();
                        }
                    }
                }
                accepted = l.accept() => {
                    let Ok((mut inbound, _)) = accepted else { continue };
                    conns.retain(|c| !c.is_finished());
                    conns.push(tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    }));
                }
            }
        }
    }

    /// Switches it off (refusing and cutting connections) or on.
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
        self.changed.notify_one();
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
