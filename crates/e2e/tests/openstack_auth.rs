//! The OpenStack client's logins and catalog against the testbed's real Keystone.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::HashMap, sync::Arc};

use berth_e2e::{Testbed, unique_name};
use berth_openstack::{
    Client, ClientOptions, Credentials, Interface,
    auth::{ApplicationCredentialRef, AuthMethod, NamedRef, Scope},
    metrics::ApiMetrics,
};

fn options() -> ClientOptions {
    ClientOptions {
        region: Some("RegionOne".into()),
        ..ClientOptions::default()
    }
}

#[tokio::test]
async fn password_login_by_ids_reaches_the_same_project_as_by_names() {
    let tb = Testbed::load().unwrap();
    let by_names = tb.openstack_demo().await.unwrap().token().await.unwrap();
    let creds = Credentials {
        auth_url: tb.auth_url.parse().unwrap(),
        method: AuthMethod::Password {
            user: NamedRef::Id(by_names.user_id.clone()),
            password: tb.demo.password.clone(),
        },
        scope: Scope::Project(NamedRef::Id(tb.tenant.project_id.clone())),
    };
    let by_ids = Client::connect(creds, options()).await.unwrap();
    let token = by_ids.token().await.unwrap();
    assert_eq!(token.user_id, by_names.user_id);
    assert_eq!(token.project_id.as_deref(), Some(tb.tenant.project_id.as_str()));
    by_ids.network().networks(&[]).await.unwrap();
}

#[tokio::test]
async fn application_credentials_by_id_and_by_name_and_gone_once_deleted() {
    let tb = Testbed::load().unwrap();
    let demo = tb.openstack_demo().await.unwrap();
    let user_id = demo.token().await.unwrap().user_id.clone();
    let name = unique_name("appcred");
    let cred = demo
        .identity()
        .create_application_credential(&name, "berth e2e")
        .await
        .unwrap();
    assert!(
        !format!("{cred:?}").contains(cred.secret.expose()),
        "the secret never shows in Debug"
    );

    let login = |credential: ApplicationCredentialRef| Credentials {
        auth_url: tb.auth_url.parse().unwrap(),
        method: AuthMethod::ApplicationCredential {
            credential,
            secret: cred.secret.clone(),
        },
        scope: Scope::Default,
    };
    for credential in [
        ApplicationCredentialRef::Id(cred.id.clone()),
        ApplicationCredentialRef::Name {
            name: name.clone(),
            user: NamedRef::Id(user_id.clone()),
        },
    ] {
        let c = Client::connect(login(credential), options()).await.unwrap();
        let t = c.token().await.unwrap();
        assert_eq!(
            t.project_id.as_deref(),
            Some(tb.tenant.project_id.as_str()),
            "scoped to the credential's project"
        );
        c.load_balancer().list(&[]).await.unwrap();
    }

    demo.identity()
        .delete_application_credential(&cred.id)
        .await
        .unwrap();
    let err = Client::connect(login(ApplicationCredentialRef::Id(cred.id.clone())), options())
        .await
        .unwrap_err();
    // Keystone answers 404 for a credential that no longer exists.
    assert_eq!(err.status().map(|s| s.as_u16()), Some(404), "{err}");
    assert!(
        err.to_string().contains("Could not find Application Credential"),
        "{err}"
    );
}

#[tokio::test]
async fn a_token_can_be_exchanged_for_a_project_scoped_one() {
    let tb = Testbed::load().unwrap();
    let demo = tb.openstack_demo().await.unwrap();
    let original = demo.token().await.unwrap();
    let creds = Credentials {
        auth_url: tb.auth_url.parse().unwrap(),
        method: AuthMethod::Token {
            token: original.value.clone(),
        },
        scope: Scope::Project(NamedRef::Id(tb.tenant.project_id.clone())),
    };
    let c = Client::connect(creds, options()).await.unwrap();
    let t = c.token().await.unwrap();
    assert_eq!(t.user_id, original.user_id);
    assert_ne!(t.value, original.value, "a new token");
    c.compute().flavors().await.unwrap();
}

#[tokio::test]
async fn a_revoked_token_is_replaced_by_one_new_login() {
    let tb = Testbed::load().unwrap();
    let metrics = Arc::new(ApiMetrics::default());
    let c = Client::connect(
        tb.credentials(&tb.demo).unwrap(),
        ClientOptions {
            metrics: metrics.clone(),
            ..options()
        },
    )
    .await
    .unwrap();
    let first = c.token().await.unwrap();
    c.identity().revoke_token(&first.value).await.unwrap();
    assert_eq!(metrics.logins(), 1);
    // Keystone now refuses the cached token: the client logs in again once and retries.
    c.network().networks(&[]).await.unwrap();
    assert_eq!(metrics.logins(), 2);
    assert_eq!(metrics.calls("network", "GET", "401"), 1);
    assert_ne!(c.token().await.unwrap().value, first.value);
}

#[tokio::test]
async fn catalog_selection_by_interface_region_and_override() {
    let tb = Testbed::load().unwrap();
    let creds = tb.credentials(&tb.demo).unwrap();
    use berth_openstack::client::Service;

    let internal = Client::connect(
        creds.clone(),
        ClientOptions {
            interface: Interface::Internal,
            ..options()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        internal.endpoint(Service::Compute).await.unwrap().as_str(),
        "http://127.0.0.1:8774/v2.1/"
    );
    internal.compute().flavors().await.unwrap();

    let elsewhere = Client::connect(
        creds.clone(),
        ClientOptions {
            region: Some("RegionX".into()),
            ..options()
        },
    )
    .await
    .unwrap();
    let err = elsewhere.network().networks(&[]).await.unwrap_err().to_string();
    assert!(
        err.contains("no public endpoint of type network in region RegionX"),
        "{err}"
    );
    assert!(err.contains("network/public/RegionOne"), "{err}");

    let overridden = Client::connect(
        creds,
        ClientOptions {
            endpoint_overrides: HashMap::from([("network".into(), "http://127.0.0.1:9696".into())]),
            region: Some("RegionX".into()),
            ..options()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        overridden.endpoint(Service::Network).await.unwrap().as_str(),
        "http://127.0.0.1:9696/v2.0/"
    );
    overridden.network().networks(&[]).await.unwrap();
}
