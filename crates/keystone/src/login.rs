//! `berth keystone-login`: the kubectl exec credential plugin.
//!
//! Credentials come from the flags, then the `OS_*` variables, then `OS_CLOUD` with
//! clouds.yaml: a password (user and project by name or id), an application credential, or a
//! token. The plugin prints an `ExecCredential` in the `apiVersion` kubectl asks for in
//! `KUBERNETES_EXEC_INFO` (`client.authentication.k8s.io/v1beta1` when it is unset) with the
//! Keystone token and its expiry.
//!
//! Tokens are cached on disk, one file per (auth URL, user, project) under
//! `$XDG_CACHE_HOME/berth/tokens` (or `~/.cache/berth/tokens`), mode 0600 in a 0700 directory,
//! and reused until [`REFRESH_MARGIN`] before they expire, so kubectl does not log in to Keystone
//! on every run. `--no-cache` neither reads nor writes it; `logout` revokes the cached token and
//! deletes the file. A refused login is an error on stderr and a non-zero exit: never a blank
//! credential.

use std::{
    io::Write as _,
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use berth_openstack::{AuthMethod, Credentials, Secret};
use clap::{Args as ClapArgs, Subcommand};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{Error, Result, webhook::config_from_env};

/// A cached token is replaced when it expires within this margin.
pub const REFRESH_MARGIN: SignedDuration = SignedDuration::from_mins(5);

/// `berth keystone-login` flags; each one wins over its `OS_*` variable.
#[derive(Clone, Default, ClapArgs)]
pub struct Args {
    /// Keystone's URL (OS_AUTH_URL).
    #[arg(long)]
    pub keystone_url: Option<String>,
    /// The user's name (OS_USERNAME).
    #[arg(long)]
    pub user_name: Option<String>,
    /// The user's id (OS_USER_ID).
    #[arg(long)]
    pub user_id: Option<String>,
    /// The password (OS_PASSWORD). Prefer the variable: flags show in `ps`.
    #[arg(long)]
    pub password: Option<String>,
    /// The domain of the user and project (OS_DOMAIN_NAME).
    #[arg(long)]
    pub domain_name: Option<String>,
    /// The project's name (OS_PROJECT_NAME).
    #[arg(long)]
    pub project_name: Option<String>,
    /// The project's id (OS_PROJECT_ID).
    #[arg(long)]
    pub project_id: Option<String>,
    /// An application credential's id (OS_APPLICATION_CREDENTIAL_ID).
    #[arg(long)]
    pub application_credential_id: Option<String>,
    /// An application credential's name (OS_APPLICATION_CREDENTIAL_NAME).
    #[arg(long)]
    pub application_credential_name: Option<String>,
    /// The application credential's secret (OS_APPLICATION_CREDENTIAL_SECRET).
    #[arg(long)]
    pub application_credential_secret: Option<String>,
    /// The cloud of clouds.yaml to use (OS_CLOUD).
    #[arg(long)]
    pub os_cloud: Option<String>,
    /// A PEM CA bundle to trust for Keystone (OS_CACERT).
    #[arg(long)]
    pub cacert: Option<String>,
    /// Neither read nor write the token cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Where cached tokens live.
    #[arg(long, env = "BERTH_TOKEN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Revoke and forget the cached token (same as the `logout` subcommand).
    #[arg(long)]
    pub logout: bool,
    /// What to do instead of printing a credential.
    #[command(subcommand)]
    pub action: Option<Action>,
}

/// Debug without the password or the application credential's secret.
impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("Args")
            .field("keystone_url", &self.keystone_url)
            .field("user_name", &self.user_name)
            .field("user_id", &self.user_id)
            .field("password", &redacted(&self.password))
            .field("domain_name", &self.domain_name)
            .field("project_name", &self.project_name)
            .field("project_id", &self.project_id)
            .field("application_credential_id", &self.application_credential_id)
            .field("application_credential_name", &self.application_credential_name)
            .field(
                "application_credential_secret",
                &redacted(&self.application_credential_secret),
            )
            .field("os_cloud", &self.os_cloud)
            .field("no_cache", &self.no_cache)
            .field("logout", &self.logout)
            .finish_non_exhaustive()
    }
}

/// Subcommands of `berth keystone-login`.
#[derive(Debug, Clone, Subcommand)]
pub enum Action {
    /// Revoke the cached token (DELETE /v3/auth/tokens) and delete it from the cache.
    Logout,
}

impl Args {
    fn flag(&self, var: &str) -> Option<String> {
        let v = match var {
            "OS_AUTH_URL" => &self.keystone_url,
            "OS_USERNAME" => &self.user_name,
            "OS_USER_ID" => &self.user_id,
            "OS_PASSWORD" => &self.password,
            "OS_DOMAIN_NAME" => &self.domain_name,
            "OS_PROJECT_NAME" => &self.project_name,
            "OS_PROJECT_ID" => &self.project_id,
            "OS_APPLICATION_CREDENTIAL_ID" => &self.application_credential_id,
            "OS_APPLICATION_CREDENTIAL_NAME" => &self.application_credential_name,
            "OS_APPLICATION_CREDENTIAL_SECRET" => &self.application_credential_secret,
            "OS_CLOUD" => &self.os_cloud,
            "OS_CACERT" => &self.cacert,
            _ => return None,
        };
        v.clone()
    }
}

/// A token as cached on disk.
#[derive(Serialize, Deserialize)]
struct Cached {
    auth_url: String,
    token: String,
    expires_at: Timestamp,
}

/// The ExecCredential `apiVersion` kubectl asked for.
pub fn exec_api_version(exec_info: Option<&str>) -> String {
    const DEFAULT: &str = "client.authentication.k8s.io/v1beta1";
    exec_info
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.get("apiVersion").and_then(|a| a.as_str()).map(str::to_owned))
        .filter(|v| v.starts_with("client.authentication.k8s.io/"))
        .unwrap_or_else(|| DEFAULT.to_owned())
}

/// The ExecCredential kubectl reads.
pub fn exec_credential(api_version: &str, token: &Secret, expires_at: Timestamp) -> serde_json::Value {
    let expiry = Timestamp::from_second(expires_at.as_second()).unwrap_or(expires_at);
    json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {},
        "status": {
            "token": token.expose(),
            "expirationTimestamp": expiry.to_string(),
        }
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(text: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref())
}

/// The cache file name for `creds`: a hash of the auth URL, the identity and the scope.
pub fn cache_key(creds: &Credentials) -> String {
    let identity = match &creds.method {
        AuthMethod::Password { user, .. } => format!("password:{user:?}"),
        AuthMethod::ApplicationCredential { credential, .. } => format!("appcred:{credential:?}"),
        AuthMethod::Token { token } => format!("token:{}", sha256(token.expose())),
    };
    sha256(&format!(
        "{}\n{identity}\n{:?}",
        creds.auth_url.as_str().trim_end_matches('/'),
        creds.scope
    ))
}

fn default_cache_dir(var: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf> {
    if let Some(x) = var("XDG_CACHE_HOME").filter(|s| !s.is_empty()) {
        return Ok(PathBuf::from(x).join("berth/tokens"));
    }
    var("HOME")
        .filter(|s| !s.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/berth/tokens"))
        .ok_or_else(|| Error::Usage("neither XDG_CACHE_HOME nor HOME is set: give --cache-dir".into()))
}

fn read_cache(path: &Path, auth_url: &str) -> Option<Cached> {
    let text = std::fs::read_to_string(path).ok()?;
    let c: Cached = serde_json::from_str(&text).ok()?;
    (c.auth_url == auth_url).then_some(c)
}

fn write_cache(dir: &Path, path: &Path, cached: &Cached) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| Error::Io { path: p, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    let text = serde_json::to_string(cached).map_err(|e| Error::Usage(e.to_string()))?;
    f.write_all(text.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(())
}

fn refused(creds: &Credentials, e: berth_openstack::Error) -> Error {
    match e {
        berth_openstack::Error::Auth { status, message, .. } if status.is_client_error() => Error::Refused {
            auth_url: creds.auth_url.to_string(),
            status: status.as_u16(),
            message,
        },
        other => Error::OpenStack(other),
    }
}

/// Runs the plugin: prints the ExecCredential on stdout (or logs out).
pub async fn run(args: Args) -> Result<()> {
    let env = |k: &str| args.flag(k).or_else(|| std::env::var(k).ok());
    let config = config_from_env(&env)?;
    let (creds, mut options) = config.credentials()?;
    options.user_agent = concat!("berth-keystone-login/", env!("CARGO_PKG_VERSION")).into();
    let dir = match &args.cache_dir {
        Some(d) => d.clone(),
        None => default_cache_dir(&|k| std::env::var(k).ok())?,
    };
    let path = dir.join(format!("{}.json", cache_key(&creds)));
    let auth_url = creds.auth_url.to_string();
    if args.logout || matches!(args.action, Some(Action::Logout)) {
        return logout(&creds, &options, &path).await;
    }
    let api_version = exec_api_version(std::env::var("KUBERNETES_EXEC_INFO").ok().as_deref());
    if !args.no_cache
        && let Some(c) = read_cache(&path, &auth_url)
        && c.expires_at > Timestamp::now() + REFRESH_MARGIN
    {
        let out = exec_credential(&api_version, &Secret::new(c.token), c.expires_at);
        println!("{out}");
        return Ok(());
    }
    let client = berth_openstack::Client::new(creds.clone(), options)?;
    let token = client.token().await.map_err(|e| refused(&creds, e))?;
    if token.value.is_empty() {
        return Err(Error::Usage("Keystone answered with an empty token".into()));
    }
    if !args.no_cache {
        let cached = Cached {
            auth_url,
            token: token.value.expose().to_owned(),
            expires_at: token.expires_at,
        };
        if let Err(e) = write_cache(&dir, &path, &cached) {
            tracing::warn!(error = %e, "cannot cache the token; continuing without the cache");
        }
    }
    println!(
        "{}",
        exec_credential(&api_version, &token.value, token.expires_at)
    );
    Ok(())
}

async fn logout(creds: &Credentials, options: &berth_openstack::ClientOptions, path: &Path) -> Result<()> {
    let Some(cached) = read_cache(path, creds.auth_url.as_str()) else {
        eprintln!("berth keystone-login: no cached token for these credentials; nothing to revoke");
        return Ok(());
    };
    let mut builder = reqwest::Client::builder().timeout(options.request_timeout);
    if let Some(ca) = &options.tls.ca_file {
        let pem = std::fs::read(ca).map_err(|source| Error::Io {
            path: ca.clone(),
            source,
        })?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| Error::Usage(format!("{}: {e}", ca.display())))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    let http = builder
        .build()
        .map_err(|e| Error::Usage(format!("HTTP client: {e}")))?;
    let url = creds.tokens_url()?;
    let revoked = http
        .delete(url)
        .header("x-auth-token", &cached.token)
        .header("x-subject-token", &cached.token)
        .send()
        .await;
    match revoked {
        Ok(r) if r.status().is_success() || r.status().as_u16() == 404 || r.status().as_u16() == 401 => {
            eprintln!("berth keystone-login: token revoked");
        }
        Ok(r) => eprintln!(
            "berth keystone-login: Keystone answered {} to the revocation; the token is forgotten anyway",
            r.status()
        ),
        Err(e) => {
            eprintln!("berth keystone-login: cannot reach Keystone ({e}); the token is forgotten anyway")
        }
    }
    std::fs::remove_file(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn debug_output_never_shows_secrets() {
        let args = Args {
            password: Some("hunter2-password".into()),
            application_credential_secret: Some("appcred-secret".into()),
            ..Args::default()
        };
        let text = format!("{args:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("appcred-secret"),
            "{text}"
        );
        assert!(text.contains("<redacted>"));
    }

    #[test]
    fn exec_info_picks_the_version() {
        assert_eq!(exec_api_version(None), "client.authentication.k8s.io/v1beta1");
        assert_eq!(
            exec_api_version(Some(
                r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}"#
            )),
            "client.authentication.k8s.io/v1"
        );
        assert_eq!(
            exec_api_version(Some("garbage")),
            "client.authentication.k8s.io/v1beta1"
        );
    }

    #[test]
    fn credential_shape() {
        let at: Timestamp = "2030-01-02T03:04:05.678Z".parse().unwrap();
        let c = exec_credential("client.authentication.k8s.io/v1", &Secret::new("tok"), at);
        assert_eq!(c["status"]["expirationTimestamp"], "2030-01-02T03:04:05Z");
        assert_eq!(c["status"]["token"], "tok");
        assert_eq!(c["kind"], "ExecCredential");
    }

    #[test]
    fn cache_keys_differ_by_user_and_project_but_not_by_password() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
        };
        let base: &[(&str, &str)] = &[
            ("OS_AUTH_URL", "http://k:5000/v3"),
            ("OS_USERNAME", "demo"),
            ("OS_PASSWORD", "pw1"),
            ("OS_PROJECT_NAME", "demo"),
            ("OS_DOMAIN_NAME", "Default"),
        ];
        let key = |pairs| cache_key(&config_from_env(&env(pairs)).unwrap().credentials().unwrap().0);
        let k = key(base);
        let other_pw: &[(&str, &str)] = &[
            ("OS_AUTH_URL", "http://k:5000/v3"),
            ("OS_USERNAME", "demo"),
            ("OS_PASSWORD", "pw2"),
            ("OS_PROJECT_NAME", "demo"),
            ("OS_DOMAIN_NAME", "Default"),
        ];
        assert_eq!(k, key(other_pw));
        let other_project: &[(&str, &str)] = &[
            ("OS_AUTH_URL", "http://k:5000/v3"),
            ("OS_USERNAME", "demo"),
            ("OS_PASSWORD", "pw1"),
            ("OS_PROJECT_NAME", "alt"),
            ("OS_DOMAIN_NAME", "Default"),
        ];
        assert_ne!(k, key(other_project));
        assert!(!k.contains("pw1"));
    }

    #[test]
    fn cache_files_are_private() {
        let dir = std::env::temp_dir().join(format!("berth-login-test-{}", std::process::id()));
        let path = dir.join("x.json");
        write_cache(
            &dir,
            &path,
            &Cached {
                auth_url: "u".into(),
                token: "t".into(),
                expires_at: Timestamp::now(),
            },
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(read_cache(&path, "u").is_some());
        assert!(read_cache(&path, "other").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
