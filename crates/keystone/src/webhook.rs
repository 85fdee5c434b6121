//! `berth keystone-webhook`: the process.
//!
//! One HTTPS listener (`--listen`, default `0.0.0.0:8443`) serves `POST /webhook` (TokenReview
//! and SubjectAccessReview), `GET /healthz` and `GET /metrics`; `--metrics-listen` also serves
//! the last two over plain HTTP. The policy comes from `--keystone-policy-file` (checked for
//! changes every `--reload-period`) or from the ConfigMap `--policy-configmap-name` (watched);
//! without either, every SubjectAccessReview is denied. The sync configuration comes from
//! `--sync-config-file` (read at start) or from the ConfigMap `--sync-configmap-name` (key
//! `syncConfig`, watched). A refused ConfigMap keeps the previous configuration in force and
//! gets a Warning Event (`InvalidPolicy`, `InvalidSyncConfig`). Every failure is answered with HTTP 200
//! and `authenticated: false` / `allowed: false` and a reason, as kube-apiserver expects.

use std::{
    collections::BTreeMap,
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
    sync::{RoleMapping, SyncConfig, Syncer},
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
    /// Wins over --sync-configmap-name.
    #[arg(long)]
    pub sync_config_file: Option<PathBuf>,
    /// The ConfigMap holding the sync configuration under the key `syncConfig`; watched.
    #[arg(long)]
    pub sync_configmap_name: Option<String>,
    /// The namespace of the sync ConfigMap.
    #[arg(long, default_value = "kube-system")]
    pub sync_configmap_namespace: String,
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

/// What a watched ConfigMap is doing, from the watcher's events: `Some(cm)` when it was
/// created or changed, `None` when it is gone. Tracks the initial list (and every relist after a
/// lost watch) so that a ConfigMap deleted while the watch was down is seen as gone.
#[derive(Debug, Default)]
struct ConfigMapTracker {
    /// In a (re)list: whether it held the ConfigMap so far.
    listing: Option<bool>,
    /// The data last handed out (`None`: absent), to skip relists that change nothing.
    last: Option<Option<BTreeMap<String, String>>>,
}

impl ConfigMapTracker {
    /// The change `event` makes, if any: `Some(Some(cm))` applied, `Some(None)` gone.
    fn on(&mut self, event: watcher::Event<ConfigMap>) -> Option<Option<ConfigMap>> {
        let change = match event {
            watcher::Event::Init => {
                self.listing = Some(false);
                return None;
            }
            watcher::Event::InitApply(cm) => {
                self.listing = Some(true);
                Some(cm)
            }
            watcher::Event::InitDone => {
                if self.listing.take() == Some(true) {
                    return None;
                }
                None
            }
            watcher::Event::Apply(cm) => Some(cm),
            watcher::Event::Delete(_) => None,
        };
        let data = change.as_ref().map(|cm| cm.data.clone().unwrap_or_default());
        if self.last.as_ref() == Some(&data) {
            return None;
        }
        self.last = Some(data);
        Some(change)
    }
}

/// Watches the ConfigMap `namespace/name` and hands its changes to `apply` (`None`: it is
/// gone). When `apply` refuses the contents, a Warning Event `reason` is published on the
/// ConfigMap. `ready` is told once the first list is done.
async fn watch_configmap(
    kube: kube::Client,
    namespace: String,
    name: String,
    reason: &'static str,
    mut apply: impl FnMut(Option<&ConfigMap>) -> Result<()> + Send,
    ready: tokio::sync::oneshot::Sender<()>,
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
    let mut stream = std::pin::pin!(watcher::watcher(api, config));
    let mut tracker = ConfigMapTracker::default();
    let mut ready = Some(ready);
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            e = stream.next() => e,
        };
        let event = match event {
            None => return,
            Some(Err(e)) => {
                warn!(configmap = %format!("{namespace}/{name}"), error = %e, "watching the ConfigMap failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Some(Ok(event)) => event,
        };
        let list_done = matches!(event, watcher::Event::InitDone);
        if let Some(change) = tracker.on(event)
            && let Err(e) = apply(change.as_ref())
            && let Some(cm) = &change
        {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(format!("{e}; the previous configuration stays in force")),
                action: "Load".into(),
                secondary: None,
            };
            let reference = kube::Resource::object_ref(cm, &());
            if let Err(err) = recorder.publish(&event, &reference).await {
                warn!(error = %err, reason, "cannot publish the Event");
            }
        }
        if list_done && let Some(r) = ready.take() {
            let _ = r.send(());
        }
    }
}

/// Applies the policy ConfigMap's `policies`; `None` (deleted or missing) denies everything.
fn apply_policy_configmap(store: &PolicyStore, source: &str, cm: Option<&ConfigMap>) -> Result<()> {
    let Some(cm) = cm else {
        if store.get().is_some() {
            warn!(
                source,
                "the policy ConfigMap is gone: every request is now denied"
            );
        } else {
            warn!(
                source,
                "the policy ConfigMap does not exist: every request is denied until it does"
            );
        }
        store.clear();
        return Ok(());
    };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("policies"))
        .cloned()
        .unwrap_or_default();
    store.load(source, &text).map(|_| ())
}

/// Where the sync configuration in force lives: the role mappings the authenticator applies
/// and the configuration the syncer reads.
#[derive(Debug, Clone)]
struct SyncTargets {
    mappings: Arc<RwLock<Vec<RoleMapping>>>,
    config: Arc<RwLock<SyncConfig>>,
    metrics: Arc<Metrics>,
}

impl SyncTargets {
    fn install(&self, config: SyncConfig) {
        *self.mappings.write().unwrap_or_else(PoisonError::into_inner) = config.role_mappings.clone();
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config;
    }

    /// Applies the sync ConfigMap's `syncConfig`; `None` (deleted or missing) means upstream's
    /// defaults: no mappings, nothing synced.
    fn apply_configmap(&self, source: &str, cm: Option<&ConfigMap>) -> Result<()> {
        let Some(cm) = cm else {
            info!(source, "no sync ConfigMap: no role mappings, nothing synced");
            self.install(SyncConfig::default());
            self.metrics.sync_config_loaded(true);
            return Ok(());
        };
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get("syncConfig"))
            .cloned()
            .unwrap_or_default();
        match SyncConfig::parse(source, &text) {
            Ok(config) => {
                info!(
                    source,
                    role_mappings = config.role_mappings.len(),
                    sync = ?config.data_types_to_sync,
                    "sync configuration loaded"
                );
                self.install(config);
                self.metrics.sync_config_loaded(true);
                Ok(())
            }
            Err(e) => {
                self.metrics.sync_config_loaded(false);
                error!(error = %e, "sync configuration refused; the previous one stays in force");
                Err(e)
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
    let mut initial_lists = Vec::new();
    let needs_kube = args.keystone_policy_file.is_none() && args.policy_configmap_name.is_some()
        || args.sync_config_file.is_some()
        || args.sync_configmap_name.is_some();
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
        let namespace = args.policy_configmap_namespace.clone();
        let source = format!("configmap {namespace}/{name}");
        let store = policy.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(watch_configmap(
            kube.clone(),
            namespace,
            name.clone(),
            "InvalidPolicy",
            move |cm| apply_policy_configmap(&store, &source, cm),
            tx,
            shutdown.clone(),
        ));
        initial_lists.push(rx);
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
    let sync_config = Arc::new(RwLock::new(SyncConfig::default()));
    if let Some(path) = &args.sync_config_file {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let sync = SyncConfig::parse(&path.display().to_string(), &text)?;
        let syncs = !sync.data_types_to_sync.is_empty();
        *mappings.write().unwrap_or_else(PoisonError::into_inner) = sync.role_mappings.clone();
        *sync_config.write().unwrap_or_else(PoisonError::into_inner) = sync;
        if syncs && let Some(kube) = &kube {
            authenticator = authenticator.with_syncer(Syncer::new(kube.clone(), sync_config.clone()));
        }
    } else if let (Some(name), Some(kube)) = (&args.sync_configmap_name, &kube) {
        let namespace = args.sync_configmap_namespace.clone();
        let source = format!("configmap {namespace}/{name}");
        let targets = SyncTargets {
            mappings: mappings.clone(),
            config: sync_config.clone(),
            metrics: metrics.clone(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(watch_configmap(
            kube.clone(),
            namespace,
            name.clone(),
            "InvalidSyncConfig",
            move |cm| targets.apply_configmap(&source, cm),
            tx,
            shutdown.clone(),
        ));
        initial_lists.push(rx);
        // The ConfigMap may enable syncing at any time: the syncer reads the configuration
        // in force on each sync.
        authenticator = authenticator.with_syncer(Syncer::new(kube.clone(), sync_config.clone()));
    }
    // Answer only once the ConfigMaps are known (as upstream waits for its informer), so that
    // the first reviews are not denied for want of a policy; not forever if the API is down.
    for rx in initial_lists {
        if tokio::time::timeout(Duration::from_secs(10), rx).await.is_err() {
            warn!(
                "the ConfigMaps could not be listed within 10 s; serving anyway (they are applied once listed)"
            );
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn cm(policies: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("kube-system".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("policies".to_owned(), policies.to_owned())])),
            ..ConfigMap::default()
        }
    }

    fn data(change: Option<Option<ConfigMap>>) -> Option<Option<String>> {
        change.map(|c| c.map(|cm| cm.data.unwrap()["policies"].clone()))
    }

    #[test]
    fn the_tracker_reports_changes_and_a_configmap_gone_during_a_relist() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let mut t = ConfigMapTracker::default();
        // Missing at start: reported as gone once the list is done.
        assert_eq!(data(t.on(Init)), None);
        assert_eq!(data(t.on(InitDone)), Some(None));
        // Created, changed, the same again (no change), deleted.
        assert_eq!(data(t.on(Apply(cm("a")))), Some(Some("a".into())));
        assert_eq!(data(t.on(Apply(cm("b")))), Some(Some("b".into())));
        assert_eq!(data(t.on(Apply(cm("b")))), None);
        assert_eq!(data(t.on(Delete(cm("b")))), Some(None));
        // Present in a relist: applied once, the list's end changes nothing.
        assert_eq!(data(t.on(Init)), None);
        assert_eq!(data(t.on(InitApply(cm("c")))), Some(Some("c".into())));
        assert_eq!(data(t.on(InitDone)), None);
        // A relist that finds the same data changes nothing.
        assert_eq!(data(t.on(Init)), None);
        assert_eq!(data(t.on(InitApply(cm("c")))), None);
        assert_eq!(data(t.on(InitDone)), None);
        // Deleted while the watch was down: the relist ends without it.
        assert_eq!(data(t.on(Init)), None);
        assert_eq!(data(t.on(InitDone)), Some(None));
    }

    #[test]
    fn a_refused_policy_configmap_keeps_the_previous_policy() {
        let metrics = Arc::new(Metrics::default());
        let store = PolicyStore::new(metrics);
        let good = r#"[{"nonresource": {"verbs": ["get"], "path": "/healthz"}, "match": [{"type": "group", "values": ["*"]}]}]"#;
        apply_policy_configmap(&store, "cm", Some(&cm(good))).unwrap();
        assert_eq!(store.get().unwrap().len(), 1);
        let e = apply_policy_configmap(&store, "cm", Some(&cm("{garbage"))).unwrap_err();
        assert!(e.to_string().contains("invalid policy in cm"), "{e}");
        assert_eq!(store.get().unwrap().len(), 1);
        apply_policy_configmap(&store, "cm", None).unwrap();
        assert!(store.get().is_none());
    }

    #[test]
    fn a_sync_configmap_installs_mappings_and_config_and_keeps_them_when_refused() {
        let targets = SyncTargets {
            mappings: Arc::new(RwLock::new(Vec::new())),
            config: Arc::new(RwLock::new(SyncConfig::default())),
            metrics: Arc::new(Metrics::default()),
        };
        let sync_cm = |text: &str| ConfigMap {
            data: Some(BTreeMap::from([("syncConfig".to_owned(), text.to_owned())])),
            ..ConfigMap::default()
        };
        let good =
            "role-mappings:\n  - keystone-role: member\n    groups: [g]\ndata-types-to-sync: [projects]\n";
        targets.apply_configmap("cm", Some(&sync_cm(good))).unwrap();
        assert_eq!(targets.mappings.read().unwrap()[0].groups, ["g"]);
        assert_eq!(targets.config.read().unwrap().data_types_to_sync, ["projects"]);
        assert!(
            targets
                .apply_configmap("cm", Some(&sync_cm("data-types-to-sync: [users]")))
                .is_err()
        );
        assert_eq!(targets.mappings.read().unwrap().len(), 1);
        assert_eq!(targets.config.read().unwrap().data_types_to_sync, ["projects"]);
        targets.apply_configmap("cm", None).unwrap();
        assert!(targets.mappings.read().unwrap().is_empty());
        assert_eq!(*targets.config.read().unwrap(), SyncConfig::default());
    }
}
