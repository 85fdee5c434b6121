//! `berth keystone-login` as kubectl runs it, against the testbed's Keystone.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{
    os::unix::fs::PermissionsExt as _,
    process::{Command, Output, Stdio},
};

use berth_e2e::{Testbed, berth_binary, keystone::TempDir, keystone::os_env, unique_name};
use berth_openstack::Secret;
use serde_json::Value;

fn login(env: &[(String, String)], args: &[&str]) -> Output {
    Command::new(berth_binary().unwrap())
        .arg("keystone-login")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn credential(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn token(c: &Value) -> String {
    c["status"]["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn password_login_is_cached_versioned_and_revoked_on_logout() {
    let tb = Testbed::load().unwrap();
    let cache = TempDir::new("kcache").unwrap();
    let env = os_env(&tb, &tb.demo, cache.path());

    let first = credential(&login(&env, &[]));
    assert_eq!(first["apiVersion"], "client.authentication.k8s.io/v1beta1");
    assert_eq!(first["kind"], "ExecCredential");
    let expiry: jiff::Timestamp = first["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(expiry > jiff::Timestamp::now());

    // The cache file is private and reused.
    let dir = cache.path().join("berth/tokens");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut v1_env = env.clone();
    v1_env.push((
        "KUBERNETES_EXEC_INFO".into(),
        r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}"#
            .into(),
    ));
    let again = credential(&login(&v1_env, &[]));
    assert_eq!(again["apiVersion"], "client.authentication.k8s.io/v1");
    assert_eq!(token(&again), token(&first), "the cached token is reused");

    // --no-cache logs in again.
    let fresh = credential(&login(&env, &["--no-cache"]));
    assert_ne!(token(&fresh), token(&first));

    // logout revokes the cached token and forgets it.
    let out = login(&env, &["logout"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let admin = tb.openstack(&tb.admin).await.unwrap();
    let err = admin
        .identity()
        .validate_token(&Secret::new(token(&first)))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    // the --no-cache one is untouched; revoke it too so nothing is left behind
    admin
        .identity()
        .revoke_token(&Secret::new(token(&fresh)))
        .await
        .unwrap();
    let after = credential(&login(&env, &[]));
    assert_ne!(token(&after), token(&first));
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_and_no_credential() {
    let tb = Testbed::load().unwrap();
    let cache = TempDir::new("kcache").unwrap();
    let mut env = os_env(&tb, &tb.demo, cache.path());
    for (k, v) in &mut env {
        if k == "OS_PASSWORD" {
            *v = "certainly-not-the-password".into();
        }
    }
    let out = login(&env, &[]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused the credentials (401)"), "{err}");
    assert!(!err.contains("certainly-not-the-password"), "{err}");
}

#[tokio::test]
async fn application_credentials_and_clouds_yaml() {
    let tb = Testbed::load().unwrap();
    let demo = tb.openstack_demo().await.unwrap();
    let name = unique_name("appcred");
    let ac = demo
        .identity()
        .create_application_credential(&name, "berth e2e keystone-login")
        .await
        .unwrap();
    let cache = TempDir::new("kcache").unwrap();
    let env = vec![
        ("OS_AUTH_URL".to_owned(), tb.auth_url.clone()),
        ("OS_APPLICATION_CREDENTIAL_ID".to_owned(), ac.id.clone()),
        (
            "OS_APPLICATION_CREDENTIAL_SECRET".to_owned(),
            ac.secret.expose().to_owned(),
        ),
        ("XDG_CACHE_HOME".to_owned(), cache.path().display().to_string()),
    ];
    let out = login(&env, &[]);
    // Delete the credential before any assertion can fail.
    demo.identity()
        .delete_application_credential(&ac.id)
        .await
        .unwrap();
    assert!(!token(&credential(&out)).is_empty());

    // OS_CLOUD and a clouds.yaml.
    let dir = TempDir::new("clouds").unwrap();
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!(
            "clouds:\n  testbed:\n    auth:\n      auth_url: {}\n      username: {}\n      password: {}\n      project_name: {}\n      user_domain_name: {}\n      project_domain_name: {}\n  other:\n    auth:\n      auth_url: http://127.0.0.1:9/v3\n",
            tb.auth_url,
            tb.demo.username,
            tb.demo.password.expose(),
            tb.demo.project_name,
            tb.demo.domain_name,
            tb.demo.domain_name
        ),
    )
    .unwrap();
    let env = vec![
        ("OS_CLOUD".to_owned(), "testbed".to_owned()),
        ("OS_CLIENT_CONFIG_FILE".to_owned(), clouds.display().to_string()),
        ("XDG_CACHE_HOME".to_owned(), cache.path().display().to_string()),
    ];
    let c = credential(&login(&env, &["--no-cache"]));
    let t = Secret::new(token(&c));
    let info = tb
        .openstack(&tb.admin)
        .await
        .unwrap()
        .identity()
        .validate_token(&t)
        .await
        .unwrap();
    assert_eq!(info.user_name, "demo");
    tb.openstack(&tb.admin)
        .await
        .unwrap()
        .identity()
        .revoke_token(&t)
        .await
        .unwrap();
}
