//! An HTTP proxy in front of one real OpenStack API that fails requests on demand: the faults
//! the real services cannot be made to show (Octavia answering 500 or 409 for a while, a
//! create whose answer is lost after Octavia acted on it). Everything else passes through.
//!
//! A controller is pointed at it with clouds.yaml's `<service>_endpoint_override`, the way a
//! user puts a proxy in front of an API.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use anyhow::Result;
use axum::{
    Router,
    body::{Body, Bytes, to_bytes},
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;
use tokio::{net::TcpListener, task::JoinHandle};

/// What the proxy does with a request a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers with this status and an Octavia-style error body; the request never reaches
    /// the service.
    Refuse(u16),
    /// Passes the request on, then answers 500 whatever the service said: the service acted,
    /// the client cannot know.
    LoseAnswer,
}

/// Requests of one method whose path contains a string, and how many more to fail (`None`:
/// until [`FaultProxy::clear`]).
#[derive(Debug, Clone)]
struct Rule {
    method: Method,
    path_contains: String,
    fault: Fault,
    remaining: Option<usize>,
}

#[derive(Default)]
struct Shared {
    rules: Vec<Rule>,
    /// `METHOD path -> what happened`, of every failed request, in order.
    injected: Vec<String>,
    /// `METHOD path` of every request, in order.
    seen: Vec<String>,
}

#[derive(Clone)]
struct Proxy {
    target: String,
    http: reqwest::Client,
    shared: Arc<Mutex<Shared>>,
}

/// The running proxy; stops when dropped.
pub struct FaultProxy {
    /// Its base URL (`http://127.0.0.1:<port>`), to use as an endpoint override.
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `target` (a base URL such as `http://127.0.0.1:9876`).
    pub async fn start(target: &str) -> Result<Self> {
        berth_openstack::install_crypto_provider();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let proxy = Proxy {
            target: target.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder().build()?,
            shared: shared.clone(),
        };
        let app = Router::new().fallback(forward).with_state(proxy);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            url: format!("http://{addr}"),
            shared,
            task,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails the next `times` requests (`None`: all, until cleared) of `method` whose path
    /// contains `path_contains`. Earlier rules are matched first.
    pub fn inject(&self, method: &str, path_contains: &str, fault: Fault, times: Option<usize>) {
        let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
        self.lock().rules.push(Rule {
            method,
            path_contains: path_contains.to_owned(),
            fault,
            remaining: times,
        });
    }

    /// Lets every request through from now on.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// Every request failed so far, as `METHOD path -> status`.
    pub fn injected(&self) -> Vec<String> {
        self.lock().injected.clone()
    }

    /// Every request seen so far, as `METHOD path`.
    pub fn seen(&self) -> Vec<String> {
        self.lock().seen.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn octavia_error(status: StatusCode, message: &str) -> Response {
    let body = json!({ "faultcode": if status.is_server_error() { "Server" } else { "Client" },
                       "faultstring": message, "debuginfo": null });
    (status, axum::Json(body)).into_response()
}

async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let path_and_query = request
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), ToString::to_string);
    let headers = request.headers().clone();
    let fault = {
        let mut shared = proxy.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.seen.push(format!("{method} {path}"));
        let hit = shared
            .rules
            .iter_mut()
            .find(|r| r.method == method && path.contains(&r.path_contains) && r.remaining != Some(0));
        let fault = hit.map(|r| {
            if let Some(n) = r.remaining.as_mut() {
                *n -= 1;
            }
            r.fault
        });
        if let Some(f) = fault {
            let what = match f {
                Fault::Refuse(code) => code.to_string(),
                Fault::LoseAnswer => "passed on, answered 500".to_owned(),
            };
            shared.injected.push(format!("{method} {path} -> {what}"));
        }
        fault
    };
    if let Some(Fault::Refuse(code)) = fault {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = if status == StatusCode::CONFLICT {
            "Invalid state PENDING_UPDATE of loadbalancer resource (injected by the e2e fault proxy)"
        } else {
            "injected by the e2e fault proxy"
        };
        return octavia_error(status, message);
    }
    let body = match to_bytes(request.into_body(), 16 << 20).await {
        Ok(b) => b,
        Err(e) => return octavia_error(StatusCode::BAD_REQUEST, &format!("proxy: {e}")),
    };
    let answer = pass_on(&proxy, method, &path_and_query, &headers, body).await;
    if fault == Some(Fault::LoseAnswer) {
        return octavia_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the answer was lost (injected by the e2e fault proxy)",
        );
    }
    answer
}

async fn pass_on(
    proxy: &Proxy,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let mut outbound = proxy
        .http
        .request(method, format!("{}{path_and_query}", proxy.target))
        .body(body);
    for (name, value) in headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            outbound = outbound.header(name, value);
        }
    }
    let answer = match outbound.send().await {
        Ok(a) => a,
        Err(e) => return octavia_error(StatusCode::BAD_GATEWAY, &format!("proxy: {e}")),
    };
    let status = answer.status();
    let mut out_headers = HeaderMap::new();
    for (name, value) in answer.headers() {
        if name != header::TRANSFER_ENCODING && name != header::CONTENT_LENGTH && name != header::CONNECTION {
            out_headers.insert(name.clone(), value.clone());
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = out_headers;
    response
}
