//! HTTPS serving with a certificate that is reloaded when its files change.
//!
//! [`ReloadingCert`] is a rustls certificate resolver holding the current certificate and key;
//! [`ReloadingCert::watch`] checks the files' modification times every few seconds and swaps in
//! the new pair once both parse (a half-written pair is retried, the old one stays in use).
//! [`serve_tls`] is a small accept loop: TLS handshake (bounded in time), then HTTP/1.1 or
//! HTTP/2 through hyper to an axum [`Router`].

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, SystemTime},
};

use axum::Router;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto::Builder,
    service::TowerToHyperService,
};
use rustls::{
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use crate::{Error, Result};

/// The "stop now" signal of the servers.
pub use tokio_util::sync::CancellationToken as Shutdown;

/// A certificate and key read from PEM files, reloaded when they change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    stamp: RwLock<(Option<SystemTime>, Option<SystemTime>)>,
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Reads a certificate chain and its key.
pub fn load_pair(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey> {
    let tls = |path: &Path, reason: String| Error::Tls {
        path: path.to_owned(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| tls(cert_file, e.to_string()))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| tls(cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(tls(cert_file, "holds no PEM certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| tls(key_file, e.to_string()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| tls(key_file, format!("unusable private key: {e}")))?;
    let pair = CertifiedKey::new(certs, signing);
    pair.keys_match().map_err(|e| {
        tls(
            cert_file,
            format!("does not match the key in {}: {e}", key_file.display()),
        )
    })?;
    Ok(pair)
}

impl ReloadingCert {
    /// Loads the pair; fails if it is unusable.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<Self>> {
        let stamp = (mtime(cert_file), mtime(key_file));
        let pair = load_pair(cert_file, key_file)?;
        Ok(Arc::new(Self {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            current: RwLock::new(Arc::new(pair)),
            stamp: RwLock::new(stamp),
        }))
    }

    /// Reloads the pair if a file changed; `Ok(true)` when a new pair is in use.
    pub fn reload_if_changed(&self) -> Result<bool> {
        let now = (mtime(&self.cert_file), mtime(&self.key_file));
        if *self.stamp.read().unwrap_or_else(PoisonError::into_inner) == now {
            return Ok(false);
        }
        let pair = load_pair(&self.cert_file, &self.key_file)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(pair);
        *self.stamp.write().unwrap_or_else(PoisonError::into_inner) = now;
        Ok(true)
    }

    /// Checks the files every `period` until `shutdown`.
    pub async fn watch(self: Arc<Self>, period: Duration, shutdown: Shutdown) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            match self.reload_if_changed() {
                Ok(true) => info!(cert = %self.cert_file.display(), "serving certificate reloaded"),
                Ok(false) => {}
                Err(e) => {
                    warn!(error = %e, "serving certificate changed but cannot be used yet; keeping the previous one")
                }
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The rustls server configuration for `cert` (HTTP/2 and HTTP/1.1 offered by ALPN).
pub fn tls_config(cert: Arc<ReloadingCert>) -> Arc<rustls::ServerConfig> {
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map(|b| b.with_no_client_auth().with_cert_resolver(cert.clone()))
            .unwrap_or_else(|_| {
                // The ring provider supports the default versions; this branch is unreachable in practice.
                rustls::ServerConfig::builder()
                    .with_no_client_auth()
                    .with_cert_resolver(cert)
            });
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// Serves `app` over TLS on `listener` until `shutdown`.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: Shutdown,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(app);
            if let Err(e) = Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

/// Serves `app` over plain HTTP (for `/metrics` on a separate port) until `shutdown`.
pub async fn serve_plain(listener: TcpListener, app: Router, shutdown: Shutdown) {
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
    {
        warn!(error = %e, "metrics server failed");
    }
}
