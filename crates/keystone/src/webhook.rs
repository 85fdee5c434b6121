//! `berth keystone-webhook`: the process.
//!
//! One HTTPS listener (`--listen`, default `0.0.0.0:8443`) serves `POST /webhook` (TokenReview
//! and SubjectAccessReview), `GET /healthz` and `GET /metrics`; `--metrics-listen` also serves
//! the last two over plain HTTP. The policy comes from `--keystone-policy-file` (checked for
//! changes every `--reload-period`) or from the ConfigMap `--policy-configmap-name` (watched);
//! without either, every SubjectAccessReview is denied. Every failure is answered with HTTP 200
//! and `authenticated: false` / `allowed: false` and a reason, as kube-apiserver expects.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant, SystemTime},
};

use axum::{
    Router,
    body::Body,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use berth_config::CloudConfig;
use berth_openstack::metrics::ApiMetrics;
use clap::Args as ClapArgs;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{
    events::{Event as KubeEvent, EventType, Recorder, Reporter},
    watcher,
};
use prometheus_client::registry::Registry;
use serde_json::Value;
use tracing::{debug, error, info, warn};

use crate::{
    Error, Result,
    authn::{Authenticator, CacheOptions, KeystoneValidator, Outcome},
    metrics::Metrics,
    policy::Policy,
    review::{self, Review},
    server::{self, ReloadingCert, Shutdown},
    sync::{SyncConfig, Syncer},
};

/// The largest request body read; a bigger one is refused (with HTTP 200 and a reason).
pub const MAX_BODY: usize = 1024 * 1024;

fn duration(s: &str) -> std::result::Result<Duration, String> {
    berth_config::cloud_conf::parse_duration(s)
}

/// `berth keystone-webhook` flags.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Where to serve HTTPS (`POST /webhook`, `/healthz`, `/metrics`).
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// The PEM serving certificate (chain); reloaded when it changes.
    #[arg(long)]
    pub tls_cert_file: PathBuf,
    /// The PEM private key of the serving certificate; reloaded when it changes.
    #[arg(long)]
    pub tls_private_key_file: PathBuf,
    /// A cloud.conf with the webhook's own Keystone credentials; without it, the `OS_*`
    /// variables (and `OS_CLOUD` with clouds.yaml) are used. Validating other users' tokens
    /// needs a role that Keystone's `identity:validate_token` policy allows (admin or service).
    #[arg(long, env = "BERTH_CLOUD_CONFIG")]
    pub cloud_config: Option<PathBuf>,
    /// Keystone's URL, instead of the configuration's auth-url.
    #[arg(long)]
    pub keystone_url: Option<url::Url>,
    /// A PEM CA bundle to trust for Keystone, instead of the configuration's ca-file.
    #[arg(long)]
    pub keystone_ca_file: Option<PathBuf>,
    /// How long one Keystone request may take.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub keystone_timeout: Duration,
    /// Add the user's Keystone group names to their Kubernetes groups (one more Keystone call
    /// per validation).
    #[arg(long)]
    pub keystone_groups: bool,
    /// The authorization policy file (JSON; upstream k8s-keystone-auth formats v1 and v2).
    /// Wins over --policy-configmap-name.
    #[arg(long)]
    pub keystone_policy_file: Option<PathBuf>,
    /// The ConfigMap holding the policy under the key `policies`; watched.
    #[arg(long)]
    pub policy_configmap_name: Option<String>,
    /// The namespace of the policy ConfigMap.
    #[arg(long, default_value = "kube-system")]
    pub policy_configmap_namespace: String,
    /// The sync configuration file (YAML: role-mappings, data-types-to-sync, namespace-format…).
    #[arg(long)]
    pub sync_config_file: Option<PathBuf>,
    /// The kubeconfig for the policy ConfigMap and sync; default: in-cluster or ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The longest a valid token's user is reused from the cache (never past the token's
    /// expiry); revocations take effect after this.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub token_cache_ttl: Duration,
    /// How long Keystone's refusal of a token is reused.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub negative_cache_ttl: Duration,
    /// The most tokens cached.
    #[arg(long, default_value_t = 10_000)]
    pub token_cache_size: usize,
    /// Also serve `/metrics` and `/healthz` over plain HTTP here.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// How often the certificate and policy files are checked for changes.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub reload_period: Duration,
}

/// The policy in force and where it comes from.
#[derive(Debug)]
pub struct PolicyStore {
    current: RwLock<Option<Arc<Policy>>>,
    metrics: Arc<Metrics>,
}

impl PolicyStore {
    /// A store with no policy (everything denied).
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            current: RwLock::new(None),
            metrics,
        }
    }

    /// Parses and installs `text`; on error the previous policy stays in force.
    pub fn load(&self, source_name: &str, text: &str) -> Result<usize> {
        match Policy::parse(text) {
            Ok(p) => {
                let n = p.len();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(p));
                self.metrics.policy_loaded(true, Some(n));
                info!(source = source_name, rules = n, "authorization policy loaded");
                Ok(n)
            }
            Err(reason) => {
                self.metrics.policy_loaded(false, None);
                let e = Error::Policy {
                    source_name: source_name.to_owned(),
                    reason,
                };
                error!(error = %e, "authorization policy refused; the previous one stays in force");
                Err(e)
            }
        }
    }

    /// Removes the policy (everything denied).
    pub fn clear(&self) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = None;
        self.metrics.policy_loaded(true, Some(0));
    }

    /// The policy in force.
    pub fn get(&self) -> Option<Arc<Policy>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the handlers share.
pub struct AppState {
    /// TokenReviews.
    pub authenticator: Authenticator,
    /// SubjectAccessReviews.
    pub policy: Arc<PolicyStore>,
    /// The webhook's metrics.
    pub metrics: Arc<Metrics>,
    /// Everything `/metrics` shows.
    pub registry: Registry,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

/// The routes: `POST /webhook`, `GET /healthz`, `GET /metrics`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/webhook", post(webhook))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Only `/healthz` and `/metrics`.
fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn json(v: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

async fn webhook(State(state): State<Arc<AppState>>, body: Body) -> Response {
    let started = Instant::now();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            state.metrics.token_review("malformed");
            return json(&review::unauthenticated(
                review::AUTHN_V1,
                "the request body is unreadable or larger than 1 MiB",
            ));
        }
    };
    json(&answer(&state, &bytes, started).await)
}

/// The answer to one request body.
pub async fn answer(state: &AppState, body: &[u8], started: Instant) -> Value {
    match review::decode(body) {
        Err(e) => {
            match e.kind {
                review::Kind::Token => state.metrics.token_review("malformed"),
                review::Kind::Access => state.metrics.access_review("malformed"),
            }
            debug!(reason = %e, "refusing a request that is not a review");
            review::refusal(&e)
        }
        Ok(Review::Token { api_version, token }) => {
            let answer = match state.authenticator.authenticate(&token).await {
                Outcome::User(user) => {
                    debug!(user = %user.username, "authenticated");
                    review::authenticated(&api_version, &user)
                }
                Outcome::Refused(reason) | Outcome::Unavailable(reason) => {
                    debug!(%reason, "token refused");
                    review::unauthenticated(&api_version, &reason)
                }
            };
            state.metrics.duration("token", started.elapsed().as_secs_f64());
            answer
        }
        Ok(Review::Access { api_version, request }) => {
            let (allowed, reason) = match state.policy.get() {
                None => (false, "no Keystone authorization policy is loaded".to_owned()),
                Some(p) => match p.allows(&request) {
                    Some(i) => (true, format!("allowed by rule {i} of the Keystone policy")),
                    None => (false, "no rule of the Keystone policy allows this".to_owned()),
                },
            };
            state
                .metrics
                .access_review(if allowed { "allowed" } else { "denied" });
            debug!(user = %request.user, allowed, "access review");
            state.metrics.duration("access", started.elapsed().as_secs_f64());
            review::access(&api_version, allowed, &reason, None)
        }
    }
}

/// The OpenStack configuration from `OS_*` variables (and `OS_CLOUD` with clouds.yaml), as
/// `openstack` and upstream's plugin read them. `var` looks a variable up.
pub fn config_from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<CloudConfig> {
    let mut config = CloudConfig::parse(Path::new("(OS_* environment)"), "", var)?;
    if var("OS_CLOUD").is_some_and(|c| !c.is_empty()) || var("OS_CLIENT_CONFIG_FILE").is_some() {
        config.merge_clouds_yaml(var)?;
    }
    Ok(config)
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

async fn watch_policy_file(path: PathBuf, store: Arc<PolicyStore>, period: Duration, shutdown: Shutdown) {
    let mut seen = mtime(&path);
    let name = path.display().to_string();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let now = mtime(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let _ = store.load(&name, &text);
            }
            Err(e) => {
                store.metrics.policy_loaded(false, None);
                error!(file = %name, error = %e, "cannot read the policy file; the previous policy stays in force");
            }
        }
    }
}

async fn watch_policy_configmap(
    kube: kube::Client,
    namespace: String,
    name: String,
    store: Arc<PolicyStore>,
    shutdown: Shutdown,
) {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(kube.clone(), &namespace);
    let recorder = Recorder::new(
        kube,
        Reporter {
            controller: "berth-keystone-webhook".into(),
            instance: std::env::var("HOSTNAME").ok(),
        },
    );
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let source = format!("configmap {namespace}/{name}");
    let mut stream = std::pin::pin!(watcher::watcher(api, config));
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            e = stream.next() => e,
        };
        let cm = match event {
            None => return,
            Some(Err(e)) => {
                warn!(error = %e, "watching the policy ConfigMap failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Some(Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm))) => cm,
            Some(Ok(watcher::Event::Delete(_))) => {
                warn!(source = %source, "the policy ConfigMap was deleted: every request is now denied");
                store.clear();
                continue;
            }
            Some(Ok(_)) => continue,
        };
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get("policies"))
            .cloned()
            .unwrap_or_default();
        if let Err(e) = store.load(&source, &text) {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: "InvalidPolicy".into(),
                note: Some(format!("{e}; the previous policy stays in force")),
                action: "LoadPolicy".into(),
                secondary: None,
            };
            let reference = kube::Resource::object_ref(&cm, &());
            if let Err(err) = recorder.publish(&event, &reference).await {
                warn!(error = %err, "cannot publish the InvalidPolicy event");
            }
        }
    }
}

async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Usage(format!("cannot read kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Usage(format!("kubeconfig {}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Usage(format!("no Kubernetes configuration: {e}")))?,
    };
    Ok(kube::Client::try_from(config)?)
}

async fn shutdown_signal(shutdown: Shutdown) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = term => {},
    }
    info!("shutting down");
    shutdown.cancel();
}

/// Runs the webhook until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> Result<()> {
    let config = match &args.cloud_config {
        Some(path) => CloudConfig::load(path)?,
        None => config_from_env(&|k| std::env::var(k).ok())?,
    };
    let (mut credentials, mut options) = config.credentials()?;
    if let Some(url) = &args.keystone_url {
        credentials.auth_url = url.clone();
    }
    if let Some(ca) = &args.keystone_ca_file {
        options.tls.ca_file = Some(ca.clone());
    }
    let api_metrics = Arc::new(ApiMetrics::default());
    options.metrics = api_metrics.clone();
    options.request_timeout = args.keystone_timeout;
    options.max_attempts = 2;
    options.max_backoff = Duration::from_millis(500);
    options.user_agent = concat!("berth-keystone-webhook/", env!("CARGO_PKG_VERSION")).into();
    let client = berth_openstack::Client::new(credentials, options)?;
    match client.token().await {
        Ok(t) => info!(user = %t.user_name, "logged in to Keystone"),
        Err(e) => warn!(error = %e, "cannot log in to Keystone yet; every token is refused until it works"),
    }

    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::with_prefix("berth");
    api_metrics.register(&mut registry);
    metrics.register(&mut registry);

    let cert = ReloadingCert::load(&args.tls_cert_file, &args.tls_private_key_file)?;
    let shutdown = Shutdown::new();
    tokio::spawn(cert.clone().watch(args.reload_period, shutdown.clone()));

    let policy = Arc::new(PolicyStore::new(metrics.clone()));
    let needs_kube = args.keystone_policy_file.is_none() && args.policy_configmap_name.is_some()
        || args.sync_config_file.is_some();
    let kube = if needs_kube {
        Some(kube_client(args.kubeconfig.as_deref()).await?)
    } else {
        None
    };
    if let Some(path) = &args.keystone_policy_file {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        policy.load(&path.display().to_string(), &text)?;
        tokio::spawn(watch_policy_file(
            path.clone(),
            policy.clone(),
            args.reload_period,
            shutdown.clone(),
        ));
    } else if let (Some(name), Some(kube)) = (&args.policy_configmap_name, &kube) {
        tokio::spawn(watch_policy_configmap(
            kube.clone(),
            args.policy_configmap_namespace.clone(),
            name.clone(),
            policy.clone(),
            shutdown.clone(),
        ));
    } else {
        info!("no authorization policy given: every SubjectAccessReview is denied (RBAC still applies)");
    }

    let mappings = Arc::new(RwLock::new(Vec::new()));
    let mut authenticator = Authenticator::new(
        Arc::new(KeystoneValidator::new(client, args.keystone_groups)),
        CacheOptions {
            ttl: args.token_cache_ttl,
            negative_ttl: args.negative_cache_ttl,
            max_entries: args.token_cache_size,
        },
        mappings.clone(),
        metrics.clone(),
    );
    if let Some(path) = &args.sync_config_file {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let sync = SyncConfig::parse(&path.display().to_string(), &text)?;
        *mappings.write().unwrap_or_else(PoisonError::into_inner) = sync.role_mappings.clone();
        if !sync.data_types_to_sync.is_empty()
            && let Some(kube) = &kube
        {
            authenticator = authenticator.with_syncer(Syncer::new(kube.clone(), Arc::new(RwLock::new(sync))));
        }
    }

    let state = Arc::new(AppState {
        authenticator,
        policy,
        metrics,
        registry,
    });
    let listener = server::bind(args.listen).await?;
    info!(addr = %args.listen, "serving POST /webhook, /healthz and /metrics over HTTPS");
    if let Some(addr) = args.metrics_listen {
        let l = server::bind(addr).await?;
        info!(%addr, "serving /metrics and /healthz over HTTP");
        tokio::spawn(server::serve_plain(
            l,
            metrics_router(state.clone()),
            shutdown.clone(),
        ));
    }
    tokio::spawn(shutdown_signal(shutdown.clone()));
    server::serve_tls(listener, server::tls_config(cert), router(state), shutdown).await;
    Ok(())
}
