//! The client: one shared login, endpoint lookup, and requests with bounded retries.
//!
//! Retry policy, per request:
//! - a connection that could not be made, 429 and 503 are retried for every method;
//! - 500, 502, 504 and a timed-out answer only for methods that are safe to repeat (GET, HEAD,
//!   PUT, DELETE): the service may have acted before the error, and a repeated POST would make
//!   a second object;
//! - 409 only on the load-balancer service, where it means "wait until the object is no
//!   longer PENDING_*": waited out for up to [`MAX_CONFLICT_WAITS`] answers (about a minute),
//!   apart from the retry budget;
//! - 401 once, after a fresh login (the token was revoked or expired early).
//!
//! Waits grow exponentially with full jitter, honour `Retry-After`, and are bounded in number
//! ([`ClientOptions::max_attempts`]) and each in length ([`ClientOptions::max_backoff`]).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use jiff::{SignedDuration, Timestamp};
use reqwest::{Method, StatusCode, header::HeaderValue};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Mutex;
use tracing::{Instrument, debug, debug_span, warn};
use url::Url;

use crate::{
    Credentials, Error, Interface, Result, Secret,
    auth::{Token, login},
    error::message_from_body,
    metrics::ApiMetrics,
};

/// The services this client speaks to, with how each wants to be addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Nova.
    Compute,
    /// Neutron.
    Network,
    /// Octavia.
    LoadBalancer,
    /// Glance.
    Image,
    /// Cinder.
    BlockStorage,
    /// Keystone, at the auth URL (not from the catalog).
    Identity,
}

impl Service {
    /// The catalog type.
    pub fn service_type(self) -> &'static str {
        match self {
            Service::Compute => "compute",
            Service::Network => "network",
            Service::LoadBalancer => "load-balancer",
            Service::Image => "image",
            Service::BlockStorage => "block-storage",
            Service::Identity => "identity",
        }
    }

    /// The API version path that the catalog URL may lack (Neutron, Octavia and Glance list
    /// unversioned URLs; Nova and Cinder versioned ones).
    fn version_suffix(self) -> Option<&'static str> {
        match self {
            Service::Network => Some("v2.0"),
            Service::LoadBalancer | Service::Image => Some("v2"),
            Service::Identity => Some("v3"),
            Service::Compute | Service::BlockStorage => None,
        }
    }

    /// The microversion header pinned for the service.
    fn microversion(self) -> Option<(&'static str, &'static str)> {
        match self {
            // 2.47: the server's flavor is embedded (name included), saving a flavor lookup.
            Service::Compute => Some(("openstack-api-version", "compute 2.47")),
            // 3.27: the new attachment API.
            Service::BlockStorage => Some(("openstack-api-version", "volume 3.27")),
            _ => None,
        }
    }
}

/// Knobs of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Which endpoints to use.
    pub interface: Interface,
    /// The region, or `None` for the first endpoint of each type.
    pub region: Option<String>,
    /// Endpoint URLs that replace the catalog's, by service type.
    pub endpoint_overrides: HashMap<String, String>,
    /// How long to wait for a connection.
    pub connect_timeout: Duration,
    /// How long one request may take in all.
    pub request_timeout: Duration,
    /// How many times a request is tried at most (the first try included).
    pub max_attempts: u32,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
    /// How long before `expires_at` a token is replaced.
    pub token_refresh_margin: Duration,
    /// The `User-Agent` header: what the OpenStack request logs show.
    pub user_agent: String,
    /// Where calls and logins are counted.
    pub metrics: Arc<ApiMetrics>,
    /// TLS settings for reaching the cloud's endpoints.
    pub tls: TlsOptions,
}

/// TLS settings: `[Global] ca-file`, `cert-file`, `key-file`, `tls-insecure` of cloud.conf.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// A PEM bundle of CAs to trust besides the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// A PEM client certificate, for clouds that want one.
    pub cert_file: Option<std::path::PathBuf>,
    /// The client certificate's PEM key.
    pub key_file: Option<std::path::PathBuf>,
    /// Accept any server certificate. For test clouds only: it makes TLS useless.
    pub insecure: bool,
}

impl TlsOptions {
    fn apply(&self, mut builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder> {
        let read = |what: &'static str, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| Error::Invalid {
                what,
                value: path.display().to_string(),
                reason: e.to_string(),
            })
        };
        if let Some(path) = &self.ca_file {
            let pem = read("ca-file", path)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| Error::Invalid {
                what: "ca-file",
                value: path.display().to_string(),
                reason: format!("not a PEM certificate bundle: {e}"),
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let mut pem = read("cert-file", cert)?;
                pem.push(b'\n');
                pem.extend(read("key-file", key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| Error::Invalid {
                    what: "cert-file/key-file",
                    value: cert.display().to_string(),
                    reason: format!("not a PEM certificate and key: {e}"),
                })?;
                builder = builder.identity(identity);
            }
            (Some(path), None) | (None, Some(path)) => {
                return Err(Error::Invalid {
                    what: "client certificate",
                    value: path.display().to_string(),
                    reason: "cert-file and key-file go together".into(),
                });
            }
            (None, None) => {}
        }
        if self.insecure {
            warn!("TLS certificate verification is off (tls-insecure): use this with test clouds only");
            builder = builder.danger_accept_invalid_certs(true);
        }
        Ok(builder)
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            interface: Interface::Public,
            region: None,
            endpoint_overrides: HashMap::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            max_attempts: 5,
            max_backoff: Duration::from_secs(8),
            token_refresh_margin: Duration::from_secs(120),
            user_agent: concat!("berth/", env!("CARGO_PKG_VERSION")).to_owned(),
            metrics: Arc::default(),
            tls: TlsOptions::default(),
        }
    }
}

/// An OpenStack client. Cheap to clone: clones share the token and the connection pool.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    credentials: Credentials,
    options: ClientOptions,
    /// Held while logging in, so concurrent callers wait for one login instead of each making one.
    token: Mutex<Option<Arc<Token>>>,
    /// Set while a background refresh runs, so only one runs.
    refreshing: AtomicBool,
    /// One lock per router for route-table read-modify-writes (when routes are not atomic).
    route_locks: std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// A request's body and query.
#[derive(Debug, Default)]
pub(crate) struct Req<'a> {
    pub(crate) query: &'a [(&'a str, String)],
    pub(crate) body: Option<&'a Value>,
    /// Keystone's `X-Subject-Token`: the token a request is about.
    pub(crate) subject_token: Option<&'a Secret>,
    /// Neutron's compare-and-swap: `If-Match: revision_number=<n>` (412 when it moved on).
    pub(crate) if_match: Option<String>,
}

impl Client {
    /// A client that logs in on its first request.
    pub fn new(credentials: Credentials, options: ClientOptions) -> Result<Self> {
        // reqwest panics without a process-wide provider; binaries install it first thing, this
        // keeps a library user who forgot from crashing.
        crate::install_crypto_provider();
        let builder = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            .user_agent(options.user_agent.clone());
        let http = options.tls.apply(builder)?.build().map_err(|e| Error::Invalid {
            what: "HTTP client settings",
            value: String::new(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                credentials,
                options,
                token: Mutex::new(None),
                refreshing: AtomicBool::new(false),
                route_locks: std::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A client that has logged in already: bad credentials fail here, not on first use.
    pub async fn connect(credentials: Credentials, options: ClientOptions) -> Result<Self> {
        let client = Self::new(credentials, options)?;
        client.token().await?;
        Ok(client)
    }

    /// The metrics of this client's calls.
    pub fn metrics(&self) -> &ApiMetrics {
        &self.inner.options.metrics
    }

    /// The credentials this client logs in with.
    pub fn credentials(&self) -> &Credentials {
        &self.inner.credentials
    }

    /// The lock that serialises route-table updates of one router.
    pub(crate) fn route_lock(&self, router_id: &str) -> Arc<Mutex<()>> {
        let mut locks = self
            .inner
            .route_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(router_id.to_owned()).or_default().clone()
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// A valid token: the cached one, or a new one when it is about to expire.
    pub async fn token(&self) -> Result<Arc<Token>> {
        self.fresh_token(None).await
    }

    /// Like [`Client::token`], but a cached token equal to `stale` is replaced (it was refused).
    ///
    /// A token within the refresh margin of its expiry is replaced before use. One that is
    /// within twice the margin is still used, while a background task replaces it, so callers
    /// rarely wait for Keystone.
    async fn fresh_token(&self, stale: Option<&Secret>) -> Result<Arc<Token>> {
        let margin = SignedDuration::try_from(self.inner.options.token_refresh_margin)
            .unwrap_or(SignedDuration::from_secs(120));
        let mut slot = self.inner.token.lock().await;
        if let Some(t) = slot.as_ref()
            && stale.is_none_or(|s| s != &t.value)
        {
            let now = Timestamp::now();
            if now + margin < t.expires_at {
                if now + margin + margin >= t.expires_at {
                    self.refresh_in_background(t.value.clone());
                }
                return Ok(t.clone());
            }
        }
        let token = Arc::new(self.login().await?);
        self.inner.options.metrics.login();
        debug!(user = %token.user_name, project = ?token.project_name, expires_at = %token.expires_at, "logged in to Keystone");
        *slot = Some(token.clone());
        Ok(token)
    }

    /// Logs in, retrying what is worth retrying (no answer, 429, 5xx) like any other call:
    /// Keystone has bad moments too. A refusal (401, 403, 404) is final.
    async fn login(&self) -> Result<Token> {
        let opts = &self.inner.options;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = std::time::Instant::now();
            let result = login(&self.inner.http, &self.inner.credentials).await;
            let transient = match &result {
                Ok(_) => false,
                Err(Error::Transport { source, .. }) => source.is_connect() || source.is_timeout(),
                Err(Error::Auth { status, .. }) => {
                    status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
                }
                Err(_) => false,
            };
            let status = match &result {
                Ok(_) => "201".to_owned(),
                Err(e) => e
                    .status()
                    .map_or_else(|| "error".to_owned(), |s| s.as_str().to_owned()),
            };
            opts.metrics
                .call("identity", "POST", &status, started.elapsed().as_secs_f64());
            if transient && attempt < opts.max_attempts {
                let wait = backoff(attempt, opts.max_backoff, None);
                warn!(
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "Keystone login failed, retrying"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            return result;
        }
    }

    fn refresh_in_background(&self, current: Secret) {
        if tokio::runtime::Handle::try_current().is_err()
            || self.inner.refreshing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let client = self.clone();
        tokio::spawn(async move {
            // Replace `current` only: a caller may have replaced it meanwhile.
            let mut slot = client.inner.token.lock().await;
            if slot.as_ref().is_some_and(|t| t.value == current) {
                match client.login().await {
                    Ok(t) => {
                        client.inner.options.metrics.login();
                        debug!(expires_at = %t.expires_at, "token refreshed in the background");
                        *slot = Some(Arc::new(t));
                    }
                    Err(e) => warn!(error = %e, "background token refresh failed; the next call retries"),
                }
            }
            drop(slot);
            client.inner.refreshing.store(false, Ordering::Release);
        });
    }

    /// The base URL of a service, from the override or the catalog, with its API version.
    pub async fn endpoint(&self, service: Service) -> Result<Url> {
        let raw = match self.inner.options.endpoint_overrides.get(service.service_type()) {
            Some(url) => url.clone(),
            None if service == Service::Identity => self.inner.credentials.auth_url.to_string(),
            None => self.token().await?.catalog.endpoint(
                service.service_type(),
                self.inner.options.interface,
                self.inner.options.region.as_deref(),
            )?,
        };
        let mut base = raw.trim_end_matches('/').to_owned();
        if let Some(v) = service.version_suffix() {
            // Leave a URL alone whose last segment is already a version (`v2`, `v2.0`).
            let last = base.rsplit('/').next().unwrap_or_default();
            let versioned = last
                .strip_prefix('v')
                .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()));
            if !versioned {
                base = format!("{base}/{v}");
            }
        }
        base.push('/');
        Url::parse(&base).map_err(|e| Error::Invalid {
            what: "endpoint URL",
            value: raw,
            reason: e.to_string(),
        })
    }

    /// Sends a request and decodes the JSON answer.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        service: Service,
        method: Method,
        path: &str,
        req: Req<'_>,
    ) -> Result<T> {
        let (url, text) = self.send(service, method.clone(), path, req).await?;
        serde_json::from_str(&text).map_err(|source| Error::Decode {
            service: service.service_type().into(),
            method,
            path: url.path().to_owned(),
            source,
        })
    }

    /// Sends a request whose answer has no body worth reading (DELETE, actions).
    pub(crate) async fn call_empty(
        &self,
        service: Service,
        method: Method,
        path: &str,
        req: Req<'_>,
    ) -> Result<()> {
        self.send(service, method, path, req).await.map(|_| ())
    }

    /// `GET path` and the object under `key` (`{"port": {…}}` → the port).
    pub(crate) async fn get_one<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        key: &str,
    ) -> Result<T> {
        let v: Value = self.call(service, Method::GET, path, Req::default()).await?;
        unwrap_key(service, Method::GET, path, v, key)
    }

    /// `POST path` with `{key: object}`, and the object under `key` in the answer.
    pub(crate) async fn post_one<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        key: &str,
        object: &impl serde::Serialize,
    ) -> Result<T> {
        let body = serde_json::json!({ key: object });
        let v: Value = self
            .call(
                service,
                Method::POST,
                path,
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await?;
        unwrap_key(service, Method::POST, path, v, key)
    }

    /// `PUT path` with `{key: fields}`, and the object under `key` in the answer.
    pub(crate) async fn put_one<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        key: &str,
        fields: Value,
    ) -> Result<T> {
        let body = serde_json::json!({ key: fields });
        let v: Value = self
            .call(
                service,
                Method::PUT,
                path,
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await?;
        unwrap_key(service, Method::PUT, path, v, key)
    }

    /// `DELETE path`; an object that is gone already (404) is not an error.
    pub(crate) async fn delete_if_exists(
        &self,
        service: Service,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<()> {
        match self
            .call_empty(
                service,
                Method::DELETE,
                path,
                Req {
                    query,
                    ..Req::default()
                },
            )
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Lists every item of a collection, following `<key>_links` `next` links page by page.
    pub(crate) async fn list_all<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        key: &str,
        query: &[(&str, String)],
    ) -> Result<Vec<T>> {
        let mut items = Vec::new();
        let mut page: Value = self
            .call(
                service,
                Method::GET,
                path,
                Req {
                    query,
                    ..Req::default()
                },
            )
            .await?;
        loop {
            if let Some(list) = page.get_mut(key).map(Value::take) {
                let decoded: Vec<T> = serde_json::from_value(list).map_err(|source| Error::Decode {
                    service: service.service_type().into(),
                    method: Method::GET,
                    path: path.to_owned(),
                    source,
                })?;
                items.extend(decoded);
            }
            let next = page
                .get(format!("{key}_links"))
                .and_then(Value::as_array)
                .and_then(|links| {
                    links
                        .iter()
                        .find(|l| l.get("rel").and_then(Value::as_str) == Some("next"))
                })
                .and_then(|l| l.get("href"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let Some(next) = next else { break };
            page = self.call(service, Method::GET, &next, Req::default()).await?;
        }
        Ok(items)
    }

    async fn send(
        &self,
        service: Service,
        method: Method,
        path: &str,
        req: Req<'_>,
    ) -> Result<(Url, String)> {
        // `path` is relative to the service's base URL, or an absolute `next` link.
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            Url::parse(path).map_err(|e| Error::Invalid {
                what: "pagination link",
                value: path.to_owned(),
                reason: e.to_string(),
            })?
        } else {
            let base = self.endpoint(service).await?;
            base.join(path.trim_start_matches('/'))
                .map_err(|e| Error::Invalid {
                    what: "request path",
                    value: path.to_owned(),
                    reason: e.to_string(),
                })?
        };
        let span = debug_span!("openstack", service = service.service_type(), %method, path = url.path());
        self.send_with_retries(service, method, url, req)
            .instrument(span)
            .await
    }

    async fn send_with_retries(
        &self,
        service: Service,
        method: Method,
        url: Url,
        req: Req<'_>,
    ) -> Result<(Url, String)> {
        let opts = &self.inner.options;
        let idempotent = matches!(method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE);
        let mut reauthenticated = false;
        let mut attempt = 0;
        let mut conflicts = 0;
        let mut refused: Option<Secret> = None;
        loop {
            attempt += 1;
            let token = self.fresh_token(refused.take().as_ref()).await?;
            let mut rb = self
                .inner
                .http
                .request(method.clone(), url.clone())
                .header("x-auth-token", token.value.expose())
                .header("accept", "application/json");
            if let Some((name, value)) = service.microversion() {
                rb = rb.header(name, HeaderValue::from_static(value));
            }
            if !req.query.is_empty() {
                rb = rb.query(req.query);
            }
            if let Some(body) = req.body {
                rb = rb.json(body);
            }
            if let Some(subject) = req.subject_token {
                rb = rb.header("x-subject-token", subject.expose());
            }
            if let Some(m) = &req.if_match {
                rb = rb.header("if-match", m.as_str());
            }
            let started = std::time::Instant::now();
            let outcome = rb.send().await;
            let last_try = attempt >= opts.max_attempts;
            let record = |status: &str| {
                let secs = started.elapsed().as_secs_f64();
                opts.metrics
                    .call(service.service_type(), method.as_str(), status, secs);
            };
            let response = match outcome {
                Ok(r) => r,
                Err(source) => {
                    record(if source.is_connect() {
                        "connect"
                    } else if source.is_timeout() {
                        "timeout"
                    } else {
                        "error"
                    });
                    let safe = source.is_connect() || (idempotent && source.is_timeout());
                    if safe && !last_try {
                        let wait = backoff(attempt, opts.max_backoff, None);
                        warn!(%source, attempt, wait_ms = wait.as_millis() as u64, "request failed, retrying");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    return Err(Error::Transport {
                        service: service.service_type().into(),
                        method,
                        path: url.path().to_owned(),
                        source,
                    });
                }
            };
            let status = response.status();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = response.text().await.map_err(|source| Error::Transport {
                service: service.service_type().into(),
                method: method.clone(),
                path: url.path().to_owned(),
                source,
            })?;
            record(status.as_str());
            debug!(
                status = status.as_u16(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "answered"
            );
            if status.is_success() {
                return Ok((url, text));
            }
            if status == StatusCode::UNAUTHORIZED && !reauthenticated {
                reauthenticated = true;
                refused = Some(token.value.clone());
                attempt -= 1;
                continue;
            }
            // Octavia's "PENDING_*, try later": waited out apart from the retry budget, so a
            // change can be sent without first reading whether the load balancer is busy.
            if status == StatusCode::CONFLICT
                && service == Service::LoadBalancer
                && conflicts < MAX_CONFLICT_WAITS
            {
                conflicts += 1;
                attempt -= 1;
                let wait = backoff(conflicts.min(3), Duration::from_secs(2), retry_after);
                debug!(
                    conflicts,
                    wait_ms = wait.as_millis() as u64,
                    "load balancer busy, waiting"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            let retryable = match status {
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => true,
                // A gateway's 502/504 or a 500 may come after the service acted: a POST
                // repeated then could make a second load balancer or floating IP.
                StatusCode::INTERNAL_SERVER_ERROR | StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => {
                    idempotent
                }
                _ => false,
            };
            if retryable && !last_try {
                let wait = backoff(attempt, opts.max_backoff, retry_after);
                debug!(
                    status = status.as_u16(),
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "retrying"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            return Err(Error::Api {
                service: service.service_type().into(),
                method,
                path: url.path().to_owned(),
                status,
                message: message_from_body(&text),
            });
        }
    }
}

/// How many 409s (load balancer busy) one request waits out: with waits of up to 2 s, about a
/// minute, longer than Octavia's PENDING_UPDATE lasts.
pub const MAX_CONFLICT_WAITS: u32 = 40;

/// The object under `key` of an answer, decoded.
pub(crate) fn unwrap_key<T: DeserializeOwned>(
    service: Service,
    method: Method,
    path: &str,
    mut v: Value,
    key: &str,
) -> Result<T> {
    serde_json::from_value(v.get_mut(key).map(Value::take).unwrap_or(Value::Null)).map_err(|source| {
        Error::Decode {
            service: service.service_type().into(),
            method,
            path: path.to_owned(),
            source,
        }
    })
}

/// Exponential backoff with full jitter: a random wait in `[base/2, base]`, `base = 0.5s·2^n`,
/// capped; a server's `Retry-After` wins when it is longer (still capped).
pub(crate) fn backoff(attempt: u32, cap: Duration, retry_after: Option<Duration>) -> Duration {
    let base = Duration::from_millis(500)
        .saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(cap);
    let jittered = base.mul_f64(0.5 + fastrand::f64() / 2.0);
    match retry_after {
        Some(ra) if ra > jittered => ra.min(cap),
        _ => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_that_cannot_be_used_are_named() {
        let missing = TlsOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let err = missing.apply(reqwest::Client::builder()).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid ca-file \"/nonexistent/ca.pem\""),
            "{err}"
        );
        let half = TlsOptions {
            cert_file: Some("/tmp/c.pem".into()),
            ..TlsOptions::default()
        };
        let err = half.apply(reqwest::Client::builder()).unwrap_err().to_string();
        assert!(err.contains("cert-file and key-file go together"), "{err}");
        let not_pem = std::env::temp_dir().join(format!("berth-not-pem-{}", std::process::id()));
        std::fs::write(&not_pem, "hello").unwrap();
        let bad = TlsOptions {
            ca_file: Some(not_pem.clone()),
            ..TlsOptions::default()
        };
        let result = bad.apply(reqwest::Client::builder());
        std::fs::remove_file(&not_pem).unwrap();
        // An empty bundle is refused either here or when the client is built; never silently accepted.
        if let Ok(builder) = result {
            crate::install_crypto_provider();
            assert!(builder.build().is_ok());
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let cap = Duration::from_secs(8);
        for attempt in 1..20 {
            let w = backoff(attempt, cap, None);
            assert!(w <= cap, "attempt {attempt}: {w:?}");
            let base = Duration::from_millis(500)
                .saturating_mul(1 << (attempt - 1).min(10))
                .min(cap);
            assert!(w >= base / 2, "attempt {attempt}: {w:?} < {:?}", base / 2);
        }
        assert_eq!(
            backoff(1, cap, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(backoff(1, cap, Some(Duration::from_secs(60))), cap);
    }
}
