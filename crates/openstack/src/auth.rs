//! Keystone v3 login: the credentials berth accepts and the token it gets back.

use jiff::Timestamp;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::{Catalog, Error, Result, Secret, catalog::CatalogEntry, error::message_from_body};

/// A domain, by id or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRef {
    /// The domain's id, e.g. `default`.
    Id(String),
    /// The domain's name, e.g. `Default`.
    Name(String),
}

/// A user or project: by id, or by name within a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamedRef {
    /// By id (unique across domains).
    Id(String),
    /// By name, which is unique only within its domain.
    Name {
        /// The name.
        name: String,
        /// The domain the name lives in.
        domain: DomainRef,
    },
}

/// How to prove who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    /// A user's password.
    Password {
        /// The user.
        user: NamedRef,
        /// The password.
        password: Secret,
    },
    /// An application credential (already scoped to its project).
    ApplicationCredential {
        /// The credential: by id, or by name for a user.
        credential: ApplicationCredentialRef,
        /// The credential's secret.
        secret: Secret,
    },
    /// An existing token, exchanged for a (re)scoped one.
    Token {
        /// The token.
        token: Secret,
    },
}

/// An application credential, by id or by name and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplicationCredentialRef {
    /// By id.
    Id(String),
    /// By name: names are unique per user only.
    Name {
        /// The credential's name.
        name: String,
        /// The user that owns it.
        user: NamedRef,
    },
}

/// What the token is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A project-scoped token (what services need).
    Project(NamedRef),
    /// No explicit scope: the user's default project, or the credential's own scope.
    Default,
    /// A trust: the trustee acts with the trustor's roles on the trust's project.
    Trust(String),
}

/// Everything needed to log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Keystone's URL, e.g. `https://keystone.example:5000/v3`.
    pub auth_url: Url,
    /// The way to log in.
    pub method: AuthMethod,
    /// The scope asked for.
    pub scope: Scope,
}

/// A Keystone token with what came with it.
#[derive(Debug, Clone)]
pub struct Token {
    /// The token itself (`X-Auth-Token`).
    pub value: Secret,
    /// When Keystone stops accepting it.
    pub expires_at: Timestamp,
    /// The service catalog.
    pub catalog: Catalog,
    /// The user's id.
    pub user_id: String,
    /// The user's name.
    pub user_name: String,
    /// The project's id, for a project-scoped token.
    pub project_id: Option<String>,
    /// The project's name, for a project-scoped token.
    pub project_name: Option<String>,
    /// The role names the token carries.
    pub roles: Vec<String>,
}

fn domain_json(d: &DomainRef) -> Value {
    match d {
        DomainRef::Id(id) => json!({ "id": id }),
        DomainRef::Name(name) => json!({ "name": name }),
    }
}

fn named_json(r: &NamedRef) -> Value {
    match r {
        NamedRef::Id(id) => json!({ "id": id }),
        NamedRef::Name { name, domain } => json!({ "name": name, "domain": domain_json(domain) }),
    }
}

impl Credentials {
    /// The body of `POST /v3/auth/tokens`. It holds the secret: never log it.
    fn request_body(&self) -> Value {
        let identity = match &self.method {
            AuthMethod::Password { user, password } => {
                let mut user = named_json(user);
                user["password"] = json!(password.expose());
                json!({ "methods": ["password"], "password": { "user": user } })
            }
            AuthMethod::ApplicationCredential { credential, secret } => {
                let mut cred = match credential {
                    ApplicationCredentialRef::Id(id) => json!({ "id": id }),
                    ApplicationCredentialRef::Name { name, user } => {
                        json!({ "name": name, "user": named_json(user) })
                    }
                };
                cred["secret"] = json!(secret.expose());
                json!({ "methods": ["application_credential"], "application_credential": cred })
            }
            AuthMethod::Token { token } => {
                json!({ "methods": ["token"], "token": { "id": token.expose() } })
            }
        };
        let mut auth = json!({ "identity": identity });
        // Application credentials carry their own scope; Keystone rejects another one.
        if !matches!(self.method, AuthMethod::ApplicationCredential { .. }) {
            match &self.scope {
                Scope::Project(p) => auth["scope"] = json!({ "project": named_json(p) }),
                Scope::Trust(id) => auth["scope"] = json!({ "OS-TRUST:trust": { "id": id } }),
                Scope::Default => {}
            }
        }
        json!({ "auth": auth })
    }

    /// `…/v3/auth/tokens` under the auth URL, whether or not it ends in `/v3`.
    pub fn tokens_url(&self) -> Result<Url> {
        let base = self.auth_url.as_str().trim_end_matches('/');
        let full = if base.ends_with("/v3") {
            format!("{base}/auth/tokens")
        } else {
            format!("{base}/v3/auth/tokens")
        };
        Url::parse(&full).map_err(|e| Error::Invalid {
            what: "auth URL",
            value: self.auth_url.to_string(),
            reason: e.to_string(),
        })
    }
}

#[derive(Deserialize)]
struct TokenBody {
    token: TokenData,
}

#[derive(Deserialize)]
struct TokenData {
    expires_at: Timestamp,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
    user: IdName,
    #[serde(default)]
    project: Option<IdName>,
    #[serde(default)]
    roles: Vec<IdName>,
}

#[derive(Deserialize)]
struct IdName {
    id: String,
    #[serde(default)]
    name: String,
}

/// Logs in and returns a fresh token.
pub(crate) async fn login(http: &reqwest::Client, creds: &Credentials) -> Result<Token> {
    let url = creds.tokens_url()?;
    let response = http
        .post(url.clone())
        .json(&creds.request_body())
        .send()
        .await
        .map_err(|source| Error::Transport {
            service: "identity".into(),
            method: reqwest::Method::POST,
            path: url.path().to_owned(),
            source,
        })?;
    let status = response.status();
    let subject = response
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(Secret::new);
    let text = response.text().await.map_err(|source| Error::Transport {
        service: "identity".into(),
        method: reqwest::Method::POST,
        path: url.path().to_owned(),
        source,
    })?;
    if !status.is_success() {
        return Err(Error::Auth {
            auth_url: creds.auth_url.to_string(),
            status,
            message: message_from_body(&text),
        });
    }
    let Some(value) = subject else {
        return Err(Error::Auth {
            auth_url: creds.auth_url.to_string(),
            status: StatusCode::BAD_GATEWAY,
            message: "Keystone answered without an X-Subject-Token header".into(),
        });
    };
    let body: TokenBody = serde_json::from_str(&text).map_err(|source| Error::Decode {
        service: "identity".into(),
        method: reqwest::Method::POST,
        path: url.path().to_owned(),
        source,
    })?;
    let t = body.token;
    Ok(Token {
        value,
        expires_at: t.expires_at,
        catalog: Catalog::new(t.catalog),
        user_id: t.user.id,
        user_name: t.user.name,
        project_id: t.project.as_ref().map(|p| p.id.clone()),
        project_name: t.project.map(|p| p.name),
        roles: t.roles.into_iter().map(|r| r.name).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(method: AuthMethod, scope: Scope) -> Credentials {
        Credentials {
            auth_url: Url::parse("http://k:5000/v3/").unwrap(),
            method,
            scope,
        }
    }

    #[test]
    fn password_by_names_with_project_scope() {
        let c = creds(
            AuthMethod::Password {
                user: NamedRef::Name {
                    name: "demo".into(),
                    domain: DomainRef::Name("Default".into()),
                },
                password: Secret::new("pw"),
            },
            Scope::Project(NamedRef::Name {
                name: "demo".into(),
                domain: DomainRef::Id("default".into()),
            }),
        );
        assert_eq!(
            c.request_body(),
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": {"name": "demo", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"name": "demo", "domain": {"id": "default"}}}
            }})
        );
        assert_eq!(c.tokens_url().unwrap().as_str(), "http://k:5000/v3/auth/tokens");
    }

    #[test]
    fn application_credential_never_sends_a_scope() {
        let c = creds(
            AuthMethod::ApplicationCredential {
                credential: ApplicationCredentialRef::Name {
                    name: "ccm".into(),
                    user: NamedRef::Id("u1".into()),
                },
                secret: Secret::new("s3"),
            },
            Scope::Project(NamedRef::Id("p1".into())),
        );
        assert_eq!(
            c.request_body(),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"name": "ccm", "user": {"id": "u1"}, "secret": "s3"}}}})
        );
    }

    #[test]
    fn trust_scope() {
        let c = creds(
            AuthMethod::Password {
                user: NamedRef::Id("trustee".into()),
                password: Secret::new("pw"),
            },
            Scope::Trust("t1".into()),
        );
        assert_eq!(
            c.request_body()["auth"]["scope"],
            json!({"OS-TRUST:trust": {"id": "t1"}})
        );
    }

    #[test]
    fn auth_url_without_version_gets_v3() {
        let mut c = creds(
            AuthMethod::Token {
                token: Secret::new("t"),
            },
            Scope::Default,
        );
        c.auth_url = Url::parse("https://k.example/identity").unwrap();
        assert_eq!(
            c.tokens_url().unwrap().as_str(),
            "https://k.example/identity/v3/auth/tokens"
        );
    }

    #[test]
    fn debug_of_credentials_hides_secrets() {
        let c = creds(
            AuthMethod::Password {
                user: NamedRef::Id("u".into()),
                password: Secret::new("hunter2"),
            },
            Scope::Default,
        );
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
