//! Keystone beyond login: application credentials and token revocation.

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
