//! Things that change under a running `berth keystone-webhook`: its serving certificate
//! replaced on disk, and a Keystone token that expires (a token of an application credential
//! that expires within seconds: Keystone caps the token's `expires_at` to the credential's,
//! CVE-2022-2447, so the shared Keystone's 4-hour tokens need not be waited for).

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{path::Path, process::Command, time::Duration};

use berth_e2e::{
    Testbed, eventually,
    keystone::{TempDir, Webhook, WebhookOptions, make_certificates},
    unique_name,
};
use berth_openstack::{
    Client, ClientOptions, Credentials, Secret,
    auth::{ApplicationCredentialRef, AuthMethod, Scope},
};
use futures::FutureExt as _;
use serde_json::{Value, json};

/// The DER of the PEM certificate in `pem`.
fn der(pem: &Path) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(pem)
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// A new TLS connection to `url` trusting only the CA in `ca`: the certificate it was served,
/// or the error.
async fn served_certificate(url: &str, ca: &Path) -> Result<Vec<u8>, String> {
    // A new client per call: a new connection, so a new handshake.
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap())
        .tls_info(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = client.get(url).send().await.map_err(|e| format!("{e:?}"))?;
    assert_eq!(response.status(), 200);
    Ok(response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|t| t.peer_certificate())
        .unwrap()
        .to_vec())
}

/// Writes `content` to `path` by a rename, as a Secret volume update or `mv` does.
fn replace(path: &Path, content: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_replaced_serving_certificate_is_served_to_new_connections_without_a_restart() {
    let tb = Testbed::load().unwrap();
    let mut webhook = Webhook::start(&tb, WebhookOptions::default()).await.unwrap();
    let health = webhook.url.replace("/webhook", "/healthz");
    let old_ca = webhook.ca_file();
    let old_cert = der(&webhook.dir().join("tls.crt"));
    let next = TempDir::new("kwh-next").unwrap();
    make_certificates(next.path()).unwrap();
    let new_ca = next.path().join("ca.crt");
    let new_cert = der(&next.path().join("tls.crt"));
    assert_ne!(old_cert, new_cert);

    assert_eq!(served_certificate(&health, &old_ca).await.unwrap(), old_cert);
    let refused = served_certificate(&health, &new_ca).await.unwrap_err();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");

    // The key first, then the certificate: for a moment the files do not match, which must not
    // take the webhook down or make it serve a broken pair.
    replace(
        &webhook.dir().join("tls.key"),
        &std::fs::read(next.path().join("tls.key")).unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        served_certificate(&health, &old_ca).await.unwrap(),
        old_cert,
        "a key without its certificate is not used"
    );
    replace(
        &webhook.dir().join("tls.crt"),
        &std::fs::read(next.path().join("tls.crt")).unwrap(),
    );
    let served = eventually("the new certificate", Duration::from_secs(10), || async {
        Ok(served_certificate(&health, &new_ca).await.ok())
    })
    .await
    .unwrap();
    assert_eq!(served, new_cert);
    let refused = served_certificate(&health, &old_ca).await.unwrap_err();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");
    assert!(webhook.running(), "no restart: {}", webhook.log());
    assert!(
        webhook.log().contains("serving certificate reloaded"),
        "{}",
        webhook.log()
    );

    // A half-written certificate keeps the current pair in use.
    let refusals = || {
        webhook
            .log()
            .matches("serving certificate changed but cannot be used yet")
            .count()
    };
    let before = refusals();
    replace(
        &webhook.dir().join("tls.crt"),
        b"-----BEGIN CERTIFICATE-----\nMIIB",
    );
    eventually("the refusal is logged", Duration::from_secs(10), || async {
        Ok((refusals() > before).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(served_certificate(&health, &new_ca).await.unwrap(), new_cert);
    assert!(webhook.running());
}

/// An application credential of `client`'s user for its project, expiring at `expires_at`
/// (Keystone's API: berth's client does not set expiry), and its secret.
async fn expiring_application_credential(
    tb: &Testbed,
    client: &Client,
    name: &str,
    expires_at: jiff::Timestamp,
) -> (String, Secret) {
    let token = client.token().await.unwrap();
    let url = format!(
        "{}/users/{}/application_credentials",
        tb.auth_url.trim_end_matches('/'),
        token.user_id
    );
    let response = reqwest::Client::new()
        .post(url)
        .header("X-Auth-Token", token.value.expose())
        .json(&json!({ "application_credential": {
            "name": name,
            "description": "berth e2e: a token that expires within seconds",
            "expires_at": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    let cred = &body["application_credential"];
    (
        cred["id"].as_str().unwrap().to_owned(),
        Secret::new(cred["secret"].as_str().unwrap().to_owned()),
    )
}

#[tokio::test]
async fn an_expired_token_is_refused_even_within_the_cache_ttl() {
    let tb = Testbed::load().unwrap();
    // A cache TTL far longer than the token lives: the token's expiry must bound it.
    let webhook = Webhook::start(
        &tb,
        WebhookOptions {
            args: vec!["--token-cache-ttl".into(), "10m".into()],
            ..WebhookOptions::default()
        },
    )
    .await
    .unwrap();
    let demo = tb.openstack_demo().await.unwrap();
    let expires_at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 20).unwrap();
    let (id, secret) =
        expiring_application_credential(&tb, &demo, &unique_name("expiring"), expires_at).await;

    let outcome = async {
        let client = Client::connect(
            Credentials {
                auth_url: tb.auth_url.parse().unwrap(),
                method: AuthMethod::ApplicationCredential {
                    credential: ApplicationCredentialRef::Id(id.clone()),
                    secret,
                },
                scope: Scope::Default,
            },
            ClientOptions::default(),
        )
        .await
        .unwrap();
        let token = client.token().await.unwrap();
        // Keystone capped the token's life to the credential's.
        assert!(
            token.expires_at <= expires_at,
            "{} > {expires_at}",
            token.expires_at
        );
        let token_expiry = token.expires_at;
        let token = token.value.clone();

        let review = webhook.token_review("v1", token.expose()).await.unwrap();
        assert_eq!(review["authenticated"], true, "{review}");
        assert_eq!(review["user"]["username"], tb.demo.username.as_str());
        // Served from the cache while valid.
        let calls = webhook.keystone_validations().await.unwrap();
        let review = webhook.token_review("v1beta1", token.expose()).await.unwrap();
        assert_eq!(review["authenticated"], true, "{review}");
        assert_eq!(webhook.keystone_validations().await.unwrap(), calls);

        // Past its expiry: refused, and Keystone was asked (the cache entry ended with the token).
        let wait = token_expiry.duration_since(jiff::Timestamp::now()) + jiff::SignedDuration::from_secs(2);
        tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
        let review = webhook.token_review("v1", token.expose()).await.unwrap();
        assert_eq!(review["authenticated"], false, "{review}");
        assert!(
            review["error"]
                .as_str()
                .unwrap()
                .contains("Keystone does not accept the token"),
            "{review}"
        );
        assert_eq!(webhook.keystone_validations().await.unwrap(), calls + 1.0);
    };
    // Clean up whatever the assertions say.
    let outcome = std::panic::AssertUnwindSafe(outcome).catch_unwind().await;
    demo.identity().delete_application_credential(&id).await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
