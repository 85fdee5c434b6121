//! `berth keystone-webhook` on the real testbed: a kube-apiserver 1.20 of the test's own that
//! asks the webhook for authentication and authorization, kubectl with `berth keystone-login`
//! as the demo user, and the refusals kube-apiserver relies on.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_e2e::{
    Testbed, eventually,
    keystone::{TcpProxy, TempDir, Webhook, WebhookCluster, WebhookOptions, os_env},
};
use berth_openstack::Secret;
use serde_json::json;

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A fresh Keystone token of `user`, straight from Keystone.
async fn token_of(tb: &Testbed, user: &berth_e2e::CloudUser) -> Secret {
    tb.openstack(user)
        .await
        .unwrap()
        .token()
        .await
        .unwrap()
        .value
        .clone()
}

#[tokio::test]
async fn demo_gets_rights_from_rbac_on_its_project_group_v1() {
    let tb = Testbed::load().unwrap();
    let cluster = WebhookCluster::start(&tb, "v1", WebhookOptions::default())
        .await
        .unwrap();
    let cache = TempDir::new("kcache").unwrap();
    let kc = cluster.keystone_kubeconfig().unwrap();
    let demo = os_env(&tb, &tb.demo, cache.path());
    let admin = cluster.admin_kubeconfig();

    // Seed 000: authenticated by Keystone, but not allowed to do anything yet.
    let out = cluster
        .kubectl(&kc, &demo, &["get", "pods", "-n", "default"])
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(r#"User "demo" cannot list resource "pods""#),
        "{}\n{}",
        text(&out),
        cluster.webhook.log()
    );

    // The cluster's own admin still works next to the webhook.
    let out = cluster.kubectl(&admin, &[], &["get", "namespaces"]).unwrap();
    assert!(out.status.success(), "{}", text(&out));

    // The project is a group: one RoleBinding lets every member of the project in. (A Role of
    // our own: the aggregated ClusterRoles like `view` get their rules from
    // kube-controller-manager, which this cluster does not run.)
    let out = cluster
        .kubectl(
            &admin,
            &[],
            &[
                "create",
                "role",
                "pod-reader",
                "--verb",
                "get,list",
                "--resource",
                "pods",
                "-n",
                "default",
            ],
        )
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = cluster
        .kubectl(
            &admin,
            &[],
            &[
                "create",
                "rolebinding",
                "demo-project-pods",
                "--role",
                "pod-reader",
                "--group",
                &tb.tenant.project_id,
                "-n",
                "default",
            ],
        )
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // (RBAC sees the new binding once its informer has it: a moment.)
    let out = eventually("demo may list pods", Duration::from_secs(30), || async {
        let out = cluster.kubectl(&kc, &demo, &["get", "pods", "-n", "default"])?;
        Ok(out.status.success().then_some(out))
    })
    .await
    .unwrap();
    assert!(text(&out).contains("No resources found"), "{}", text(&out));
    // view in default only
    let out = cluster
        .kubectl(&kc, &demo, &["get", "pods", "-n", "kube-system"])
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));

    // The token was cached on disk (0600) and reused: one login for all these kubectl runs.
    let files: Vec<_> = std::fs::read_dir(cache.path().join("berth/tokens"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");

    // Keystone's admin is a Keystone user like any other here: authenticated, not a cluster admin.
    let cache_admin = TempDir::new("kcache").unwrap();
    let out = cluster
        .kubectl(
            &kc,
            &os_env(&tb, &tb.admin, cache_admin.path()),
            &["get", "secrets"],
        )
        .unwrap();
    assert!(
        text(&out).contains(r#"User "admin" cannot list resource "secrets""#),
        "{}",
        text(&out)
    );

    // Garbage, revoked and ServiceAccount-looking tokens are refused (401), not forbidden.
    let revoked = token_of(&tb, &tb.demo).await;
    tb.openstack(&tb.admin)
        .await
        .unwrap()
        .identity()
        .revoke_token(&revoked)
        .await
        .unwrap();
    for token in [
        "not-a-keystone-token",
        revoked.expose(),
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJl",
    ] {
        let out = cluster
            .kubectl(&admin, &[], &["--token", token, "get", "pods"])
            .unwrap();
        assert!(text(&out).contains("Unauthorized"), "{}", text(&out));
    }
}

#[tokio::test]
async fn a_policy_file_grants_and_denies_as_written_v1beta1() {
    let tb = Testbed::load().unwrap();
    let policy = json!([
        {
            "users": { "projects": [tb.demo.project_name], "roles": ["member"] },
            "resource_permissions": { "default/pods": ["get", "list"] }
        },
        {
            "nonresource": { "verbs": ["get"], "path": "/version" },
            "match": [{ "type": "project", "values": [tb.tenant.project_id] }]
        }
    ]);
    let cluster = WebhookCluster::start(
        &tb,
        "v1beta1",
        WebhookOptions {
            policy: Some(policy.to_string()),
            ..WebhookOptions::default()
        },
    )
    .await
    .unwrap();
    let cache = TempDir::new("kcache").unwrap();
    let kc = cluster.keystone_kubeconfig().unwrap();
    let demo = os_env(&tb, &tb.demo, cache.path());
    let ok = |args: &[&str]| cluster.kubectl(&kc, &demo, args).unwrap();

    let out = ok(&["get", "pods", "-n", "default"]);
    assert!(out.status.success(), "{}\n{}", text(&out), cluster.webhook.log());
    let out = ok(&["get", "secrets", "-n", "default"]);
    assert!(text(&out).contains("forbidden"), "{}", text(&out));
    let out = ok(&["get", "pods", "-n", "kube-system"]);
    assert!(text(&out).contains("forbidden"), "{}", text(&out));
    let out = ok(&["delete", "pod", "x", "-n", "default"]);
    assert!(text(&out).contains("forbidden"), "{}", text(&out));
    let out = ok(&["get", "--raw", "/version"]);
    assert!(out.status.success(), "{}", text(&out));

    // A new policy applies without a restart.
    let wider = json!([{
        "users": { "projects": [tb.tenant.project_id], "roles": ["member"] },
        "resource_permissions": { "['default','kube-system']/pods": ["get", "list"] }
    }]);
    std::fs::write(cluster.webhook.policy_file(), wider.to_string()).unwrap();
    eventually("kube-system pods allowed", Duration::from_secs(40), || async {
        Ok(ok(&["get", "pods", "-n", "kube-system"])
            .status
            .success()
            .then_some(()))
    })
    .await
    .unwrap();

    // A malformed policy is reported and changes nothing.
    std::fs::write(
        cluster.webhook.policy_file(),
        r#"[{"resource_permissions": {"kube-system/secrets": ["get"]}, "users": {"roles": ["member"]}}]"#,
    )
    .unwrap();
    eventually("the refusal is counted", Duration::from_secs(10), || async {
        let valid = cluster.webhook.metric("berth_keystone_policy_valid", "").await?;
        Ok((valid == 0.0).then_some(()))
    })
    .await
    .unwrap();
    assert!(cluster.webhook.log().contains("authorization policy refused"));
    let sar = |ns: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1beta1", "kind": "SubjectAccessReview", "spec": {
            "user": "demo", "group": [tb.tenant.project_id],
            "extra": {
                "alpha.kubernetes.io/identity/roles": ["member"],
                "alpha.kubernetes.io/identity/project/id": [tb.tenant.project_id],
            },
            "resourceAttributes": {"namespace": ns, "verb": "get", "resource": resource}}})
        .to_string()
    };
    let (_, a) = cluster.webhook.post(sar("kube-system", "pods")).await.unwrap();
    assert_eq!(a["status"]["allowed"], true, "{a}");
    let (_, a) = cluster.webhook.post(sar("kube-system", "secrets")).await.unwrap();
    assert_eq!(a["status"]["allowed"], false, "{a}");
    assert_eq!(a["apiVersion"], "authorization.k8s.io/v1beta1");
}

#[tokio::test]
async fn refusals_single_flight_and_keystone_outage() {
    let tb = Testbed::load().unwrap();
    let keystone: url::Url = tb.auth_url.parse().unwrap();
    let target = format!(
        "{}:{}",
        keystone.host_str().unwrap(),
        keystone.port_or_known_default().unwrap()
    );
    let proxy = TcpProxy::start(target.parse().unwrap()).await.unwrap();
    let mut via_proxy = keystone.clone();
    via_proxy.set_port(Some(proxy.addr.port())).unwrap();
    let webhook = Webhook::start(
        &tb,
        WebhookOptions {
            keystone_url: Some(via_proxy.to_string()),
            ..WebhookOptions::default()
        },
    )
    .await
    .unwrap();

    // A valid token, in both versions.
    let demo = token_of(&tb, &tb.demo).await;
    for v in ["v1", "v1beta1"] {
        let s = webhook.token_review(v, demo.expose()).await.unwrap();
        assert_eq!(s["authenticated"], true, "{s}");
        assert_eq!(s["user"]["username"], "demo");
        assert_eq!(s["user"]["groups"][0], tb.tenant.project_id.as_str());
        assert_eq!(
            s["user"]["extra"]["alpha.kubernetes.io/identity/project/name"][0],
            "demo"
        );
    }

    // Tokens that cannot be Keystone's are refused without asking Keystone.
    let before = webhook.keystone_validations().await.unwrap();
    for token in [
        "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50Iiwic3ViIjoic3lzdGVtOnNlcnZpY2VhY2NvdW50OmRlZmF1bHQ6ZGVmYXVsdCJ9.c2lnbmF0dXJl",
        "abcdef.0123456789abcdef",
        "spaces are not base64",
    ] {
        let s = webhook.token_review("v1", token).await.unwrap();
        assert_eq!(s["authenticated"], false, "{s}");
        assert!(
            s["error"].as_str().unwrap().contains("not a Keystone token"),
            "{s}"
        );
    }
    assert_eq!(webhook.keystone_validations().await.unwrap(), before);

    // Malformed and huge bodies: HTTP 200 and a refusal with a reason.
    let (status, a) = webhook.post("{not json").await.unwrap();
    assert_eq!(
        (status, a["status"]["authenticated"].clone()),
        (200, json!(false))
    );
    let (status, a) = webhook.post(vec![b'x'; 2 << 20]).await.unwrap();
    assert_eq!(status, 200);
    assert!(a["status"]["error"].as_str().unwrap().contains("1 MiB"), "{a}");

    // A revoked token is refused.
    let revoked = token_of(&tb, &tb.demo).await;
    tb.openstack(&tb.admin)
        .await
        .unwrap()
        .identity()
        .revoke_token(&revoked)
        .await
        .unwrap();
    let s = webhook.token_review("v1", revoked.expose()).await.unwrap();
    assert_eq!(s["authenticated"], false, "{s}");
    assert!(s["error"].as_str().unwrap().contains("revoked"), "{s}");

    // Twenty concurrent reviews of one new token: one Keystone call.
    let fresh = token_of(&tb, &tb.demo).await;
    let before = webhook.keystone_validations().await.unwrap();
    let reviews = (0..20).map(|_| webhook.token_review("v1", fresh.expose()));
    for s in futures::future::join_all(reviews).await {
        assert_eq!(s.unwrap()["authenticated"], true);
    }
    assert_eq!(webhook.keystone_validations().await.unwrap(), before + 1.0);

    // Keystone unreachable: refusals with a reason, then recovery.
    let during = token_of(&tb, &tb.demo).await;
    proxy.set_on(false);
    let s = webhook.token_review("v1beta1", during.expose()).await.unwrap();
    assert_eq!(s["authenticated"], false, "{s}");
    assert!(s["error"].as_str().unwrap().contains("cannot validate"), "{s}");
    // A token validated before the outage is still served from the cache.
    let s = webhook.token_review("v1", fresh.expose()).await.unwrap();
    assert_eq!(s["authenticated"], true, "{s}");
    proxy.set_on(true);
    eventually("recovery", Duration::from_secs(30), || async {
        let s = webhook.token_review("v1", during.expose()).await?;
        Ok((s["authenticated"] == true).then_some(()))
    })
    .await
    .unwrap();
}
