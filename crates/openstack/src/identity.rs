//! Keystone beyond login: application credentials, token validation and revocation.

use jiff::Timestamp;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::{
    Client, Result, Secret,
    client::{Req, Service},
};

/// A new application credential; the secret is shown once, at creation.
#[derive(Debug, Clone)]
pub struct ApplicationCredential {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its secret.
    pub secret: Secret,
}

/// What Keystone says about a valid token (`GET /v3/auth/tokens`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// When Keystone stops accepting the token.
    pub expires_at: Timestamp,
    /// The user's id.
    pub user_id: String,
    /// The user's name.
    pub user_name: String,
    /// The id of the user's domain.
    pub user_domain_id: String,
    /// The name of the user's domain.
    pub user_domain_name: String,
    /// The project's id, for a project-scoped token.
    pub project_id: Option<String>,
    /// The project's name, for a project-scoped token.
    pub project_name: Option<String>,
    /// The role names the token carries.
    pub roles: Vec<String>,
}

#[derive(Deserialize)]
struct ValidatedBody {
    token: Validated,
}

#[derive(Deserialize)]
struct Validated {
    expires_at: Timestamp,
    user: ValidatedUser,
    #[serde(default)]
    project: Option<IdName>,
    #[serde(default)]
    roles: Vec<IdName>,
}

#[derive(Deserialize)]
struct ValidatedUser {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    domain: Option<IdName>,
}

#[derive(Deserialize)]
struct IdName {
    id: String,
    #[serde(default)]
    name: String,
}

/// Keystone's API, borrowed from a [`Client`].
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    client: &'a Client,
}

impl Client {
    /// Keystone.
    pub fn identity(&self) -> Identity<'_> {
        Identity { client: self }
    }
}

impl Identity<'_> {
    /// Creates an application credential of the logged-in user, for the token's project.
    pub async fn create_application_credential(
        &self,
        name: &str,
        description: &str,
    ) -> Result<ApplicationCredential> {
        #[derive(Deserialize)]
        struct Body {
            application_credential: Created,
        }
        #[derive(Deserialize)]
        struct Created {
            id: String,
            name: String,
            secret: String,
        }
        let user_id = self.client.token().await?.user_id.clone();
        let body = json!({ "application_credential": { "name": name, "description": description } });
        let b: Body = self
            .client
            .call(
                Service::Identity,
                Method::POST,
                &format!("users/{user_id}/application_credentials"),
                Req {
                    body: Some(&body),
                    ..Req::default()
                },
            )
            .await?;
        let c = b.application_credential;
        Ok(ApplicationCredential {
            id: c.id,
            name: c.name,
            secret: Secret::new(c.secret),
        })
    }

    /// Deletes an application credential of the logged-in user. One that is gone is no error.
    pub async fn delete_application_credential(&self, id: &str) -> Result<()> {
        let user_id = self.client.token().await?.user_id.clone();
        let path = format!("users/{user_id}/application_credentials/{id}");
        match self
            .client
            .call_empty(Service::Identity, Method::DELETE, &path, Req::default())
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Validates someone's token (`GET /v3/auth/tokens` with `X-Subject-Token`) with this
    /// client's own token. Keystone answers 404 for a token that is unknown, expired or revoked
    /// ([`crate::Error::is_not_found`]); validating another user's token needs a role that
    /// Keystone's `identity:validate_token` policy allows (admin or service, usually).
    pub async fn validate_token(&self, token: &Secret) -> Result<TokenInfo> {
        let b: ValidatedBody = self
            .client
            .call(
                Service::Identity,
                Method::GET,
                "auth/tokens?nocatalog",
                Req {
                    subject_token: Some(token),
                    ..Req::default()
                },
            )
            .await?;
        let t = b.token;
        let domain = t.user.domain.unwrap_or(IdName {
            id: String::new(),
            name: String::new(),
        });
        Ok(TokenInfo {
            expires_at: t.expires_at,
            user_id: t.user.id,
            user_name: t.user.name,
            user_domain_id: domain.id,
            user_domain_name: domain.name,
            project_id: t.project.as_ref().map(|p| p.id.clone()),
            project_name: t.project.map(|p| p.name),
            roles: t.roles.into_iter().map(|r| r.name).collect(),
        })
    }

    /// The names of the groups a user belongs to (`GET /v3/users/{id}/groups`).
    pub async fn user_groups(&self, user_id: &str) -> Result<Vec<String>> {
        #[derive(Deserialize)]
        struct Group {
            name: String,
        }
        let groups: Vec<Group> = self
            .client
            .list_all(
                Service::Identity,
                &format!("users/{user_id}/groups"),
                "groups",
                &[],
            )
            .await?;
        Ok(groups.into_iter().map(|g| g.name).collect())
    }

    /// Revokes a token (`DELETE /v3/auth/tokens`): Keystone refuses it from then on.
    pub async fn revoke_token(&self, token: &Secret) -> Result<()> {
        self.client
            .call_empty(
                Service::Identity,
                Method::DELETE,
                "auth/tokens",
                Req {
                    subject_token: Some(token),
                    ..Req::default()
                },
            )
            .await
    }
}
