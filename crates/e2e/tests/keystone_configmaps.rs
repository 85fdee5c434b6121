//! `berth keystone-webhook` configured from ConfigMaps of its own kube-apiserver 1.20: the
//! authorization policy (`--policy-configmap-name`) and the Keystone → Kubernetes sync
//! (`--sync-configmap-name`), both changed while it runs, with the demo user of the testbed's
//! real Keystone logging in through kubectl and `berth keystone-login`.
//!
//! Each test runs its own kube-apiserver (purged at the end), so nothing is left on the shared
//! testbed.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeMap, time::Duration};

use berth_e2e::{
    Testbed, eventually,
    keystone::{TempDir, WebhookCluster, WebhookOptions, os_env},
    unique_name,
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Event, Namespace},
    rbac::v1::{ClusterRole, PolicyRule, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn configmap(name: &str, key: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        ..ConfigMap::default()
    }
}

async fn set_data(api: &Api<ConfigMap>, name: &str, key: &str, value: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { key: value } })),
    )
    .await
    .unwrap();
}

/// The reasons and messages of the Events about the ConfigMap `name` in kube-system.
async fn events_about(kube: &kube::Client, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(kube.clone(), "kube-system")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("ConfigMap")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn the_policy_configmap_grants_reloads_and_a_broken_one_keeps_the_last_good_policy() {
    let tb = Testbed::load().unwrap();
    let name = unique_name("policy");
    let cluster = WebhookCluster::start_with(
        &tb,
        "v1",
        WebhookOptions {
            args: vec!["--policy-configmap-name".into(), name.clone()],
            ..WebhookOptions::default()
        },
        true,
    )
    .await
    .unwrap();
    let kube = cluster.kube().await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-system");
    let cache = TempDir::new("kcache").unwrap();
    let kc = cluster.keystone_kubeconfig().unwrap();
    let demo = os_env(&tb, &tb.demo, cache.path());
    let kubectl = |args: &[&str]| cluster.kubectl(&kc, &demo, args).unwrap();
    // What kube-apiserver asks the webhook when demo lists `resource` in `ns`.
    let sar = |ns: &str, resource: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": "demo", "groups": [tb.tenant.project_id],
            "extra": {
                "alpha.kubernetes.io/identity/roles": ["member"],
                "alpha.kubernetes.io/identity/project/id": [tb.tenant.project_id],
                "alpha.kubernetes.io/identity/project/name": [tb.demo.project_name],
            },
            "resourceAttributes": {"namespace": ns, "verb": "list", "resource": resource}}})
        .to_string()
    };
    let allowed = |ns: &'static str, resource: &'static str| {
        let body = sar(ns, resource);
        let webhook = &cluster.webhook;
        async move {
            let (_, a) = webhook.post(body).await.unwrap();
            a["status"]["allowed"] == true
        }
    };

    // No ConfigMap yet: no policy, so demo (authenticated by Keystone) may do nothing.
    let out = kubectl(&["get", "pods", "-n", "default"]);
    assert!(
        text(&out).contains(r#"User "demo" cannot list resource "pods""#),
        "{}\n{}",
        text(&out),
        cluster.webhook.log()
    );
    assert!(!allowed("default", "pods").await);

    // The ConfigMap grants pods in default to the demo project's members.
    let pods = json!([{
        "users": { "projects": [tb.demo.project_name], "roles": ["member"] },
        "resource_permissions": { "default/pods": ["get", "list"] }
    }]);
    configmaps
        .create(
            &PostParams::default(),
            &configmap(&name, "policies", &pods.to_string()),
        )
        .await
        .unwrap();
    // (kube-apiserver caches the webhook's "no" for 10 s.)
    let out = eventually(
        "demo may list pods in default",
        Duration::from_secs(40),
        || async {
            let out = kubectl(&["get", "pods", "-n", "default"]);
            Ok(out.status.success().then_some(out))
        },
    )
    .await
    .unwrap();
    assert!(text(&out).contains("No resources found"), "{}", text(&out));
    let out = kubectl(&["get", "services", "-n", "default"]);
    assert!(text(&out).contains("forbidden"), "{}", text(&out));

    // Changed to grant services instead of pods: the webhook decides by the new policy within
    // seconds, kube-apiserver once its cached decision expires.
    let services = json!([{
        "users": { "projects": [tb.tenant.project_id], "roles": ["member"] },
        "resource_permissions": { "default/services": ["list"] }
    }]);
    set_data(&configmaps, &name, "policies", &services.to_string()).await;
    eventually("the webhook denies pods", Duration::from_secs(5), || async {
        Ok((!allowed("default", "pods").await).then_some(()))
    })
    .await
    .unwrap();
    assert!(allowed("default", "services").await);
    eventually("kubectl is denied pods", Duration::from_secs(40), || async {
        let out = kubectl(&["get", "pods", "-n", "default"]);
        Ok(text(&out).contains("forbidden").then_some(()))
    })
    .await
    .unwrap();
    // Its denial of services was cached after its grant of pods: it may expire a moment later.
    eventually("kubectl is allowed services", Duration::from_secs(40), || async {
        let out = kubectl(&["get", "services", "-n", "default"]);
        Ok(out.status.success().then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(
        cluster
            .webhook
            .metric("berth_keystone_policy_valid", "")
            .await
            .unwrap(),
        1.0
    );

    // Garbage: refused, reported (metric, log, Event on the ConfigMap), and the last good
    // policy stays in force.
    set_data(&configmaps, &name, "policies", "[{\"users\": not json").await;
    eventually("the refusal is counted", Duration::from_secs(10), || async {
        let valid = cluster.webhook.metric("berth_keystone_policy_valid", "").await?;
        Ok((valid == 0.0).then_some(()))
    })
    .await
    .unwrap();
    assert!(
        cluster
            .webhook
            .metric("berth_keystone_policy_reloads_total", r#"result="error""#)
            .await
            .unwrap()
            >= 1.0
    );
    let events = eventually("an InvalidPolicy Event", Duration::from_secs(10), || async {
        let events = events_about(&kube, &name).await;
        Ok(events
            .iter()
            .any(|(reason, _)| reason == "InvalidPolicy")
            .then_some(events))
    })
    .await
    .unwrap();
    let (_, message) = events.iter().find(|(r, _)| r == "InvalidPolicy").unwrap();
    assert!(
        message.contains(&format!("configmap kube-system/{name}")) && message.contains("stays in force"),
        "{message}"
    );
    assert!(cluster.webhook.log().contains("authorization policy refused"));
    assert!(allowed("default", "services").await);
    assert!(!allowed("default", "pods").await);
    let out = kubectl(&["get", "services", "-n", "default"]);
    assert!(out.status.success(), "{}", text(&out));

    // Deleted: nothing is allowed any more (RBAC may still allow).
    configmaps.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("the webhook denies services", Duration::from_secs(5), || async {
        Ok((!allowed("default", "services").await).then_some(()))
    })
    .await
    .unwrap();
}

/// The RoleBindings in `ns` named `<uid>_...`, as (name, ClusterRole, subject user).
async fn bindings_of(kube: &kube::Client, ns: &str, uid: &str) -> Vec<(String, String, String)> {
    let mut found: Vec<_> = Api::<RoleBinding>::namespaced(kube.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|rb| {
            rb.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{uid}_")))
        })
        .map(|rb| {
            let subject = rb
                .subjects
                .unwrap_or_default()
                .into_iter()
                .map(|s| format!("{}:{}", s.kind, s.name))
                .collect::<Vec<_>>()
                .join(",");
            (
                rb.metadata.name.unwrap_or_default(),
                format!("{}:{}", rb.role_ref.kind, rb.role_ref.name),
                subject,
            )
        })
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn sync_makes_the_project_namespace_and_role_bindings_from_a_configmap() {
    let tb = Testbed::load().unwrap();
    let name = unique_name("sync");
    let cluster = WebhookCluster::start_with(
        &tb,
        "v1",
        WebhookOptions {
            args: vec!["--sync-configmap-name".into(), name.clone()],
            ..WebhookOptions::default()
        },
        true,
    )
    .await
    .unwrap();
    let kube = cluster.kube().await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-system");
    let cache = TempDir::new("kcache").unwrap();
    let kc = cluster.keystone_kubeconfig().unwrap();
    let demo = os_env(&tb, &tb.demo, cache.path());
    let kubectl = |args: &[&str]| cluster.kubectl(&kc, &demo, args).unwrap();
    let namespace = format!("{}-{}", tb.demo.project_name, tb.tenant.project_id);
    let loads = || {
        cluster
            .webhook
            .metric("berth_keystone_sync_config_reloads_total", r#"result="ok""#)
    };

    // The ClusterRole the Keystone role `member` maps to, as upstream's docs ask the admin to
    // create (RoleBindings name a ClusterRole after each Keystone role).
    Api::<ClusterRole>::all(kube.clone())
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: ObjectMeta {
                    name: Some("member".into()),
                    ..ObjectMeta::default()
                },
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["pods".into()]),
                    verbs: vec!["get".into(), "list".into()],
                    ..PolicyRule::default()
                }]),
                ..ClusterRole::default()
            },
        )
        .await
        .unwrap();

    // Upstream's format and key, created while the webhook runs (it starts without one: no
    // mappings, nothing synced).
    let before = loads().await.unwrap();
    let config = r#"role-mappings:
  - keystone-role: member
    groups: ["e2e-keystone-members"]
data-types-to-sync: [projects, role_assignments]
namespace-format: "%n-%i"
projects-blacklist: ["0123456789abcdef0123456789abcdef"]
"#;
    configmaps
        .create(&PostParams::default(), &configmap(&name, "syncConfig", config))
        .await
        .unwrap();
    eventually(
        "the sync ConfigMap is loaded",
        Duration::from_secs(10),
        || async { Ok((loads().await? > before).then_some(())) },
    )
    .await
    .unwrap();
    assert!(
        Api::<Namespace>::all(kube.clone())
            .get_opt(&namespace)
            .await
            .unwrap()
            .is_none()
    );

    // Demo's first kubectl run: the webhook creates the project's namespace and a RoleBinding
    // per Keystone role, to the ClusterRole of that name; RBAC then lets demo list pods there.
    let out = eventually(
        "demo may list pods in its namespace",
        Duration::from_secs(40),
        || async {
            let out = kubectl(&["get", "pods", "-n", &namespace]);
            Ok(out.status.success().then_some(out))
        },
    )
    .await
    .unwrap();
    assert!(text(&out).contains("No resources found"), "{}", text(&out));
    let out = kubectl(&["get", "pods", "-n", "default"]);
    assert!(text(&out).contains("forbidden"), "{}", text(&out));

    let ns = Api::<Namespace>::all(kube.clone()).get(&namespace).await.unwrap();
    assert_eq!(
        ns.metadata.labels.unwrap_or_default()["app.kubernetes.io/managed-by"],
        "berth-keystone"
    );
    // What the webhook tells kube-apiserver about demo's token: the roles, the role mapping.
    let token = tb
        .openstack(&tb.demo)
        .await
        .unwrap()
        .token()
        .await
        .unwrap()
        .value
        .clone();
    let review = cluster.webhook.token_review("v1", token.expose()).await.unwrap();
    assert_eq!(review["authenticated"], true, "{review}");
    let uid = review["user"]["uid"].as_str().unwrap().to_owned();
    let groups: Vec<Value> = review["user"]["groups"].as_array().unwrap().clone();
    assert!(groups.contains(&json!("e2e-keystone-members")), "{review}");
    assert!(groups.contains(&json!(tb.tenant.project_id)), "{review}");
    let mut roles: Vec<String> = review["user"]["extra"]["alpha.kubernetes.io/identity/roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    roles.sort();
    assert!(roles.contains(&"member".to_owned()), "{roles:?}");
    let expected: Vec<_> = roles
        .iter()
        .map(|r| {
            (
                format!("{uid}_{r}"),
                format!("ClusterRole:{r}"),
                "User:demo".to_owned(),
            )
        })
        .collect();
    assert_eq!(bindings_of(&kube, &namespace, &uid).await, expected);

    // A berth-made binding for a role demo does not hold is deleted on the next validation;
    // an admin's binding of the same shape (not labelled as berth's) is left alone.
    let rbs: Api<RoleBinding> = Api::namespaced(kube.clone(), &namespace);
    let binding = |suffix: &str, ours: bool| RoleBinding {
        metadata: ObjectMeta {
            name: Some(format!("{uid}_{suffix}")),
            labels: ours.then(|| {
                BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "berth-keystone".to_owned(),
                )])
            }),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: suffix.to_owned(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: "demo".into(),
            namespace: None,
        }]),
    };
    rbs.create(&PostParams::default(), &binding("e2e-lost-role", true))
        .await
        .unwrap();
    rbs.create(&PostParams::default(), &binding("e2e-admins-own", false))
        .await
        .unwrap();
    let fresh = tb
        .openstack(&tb.demo)
        .await
        .unwrap()
        .token()
        .await
        .unwrap()
        .value
        .clone();
    assert_ne!(fresh.expose(), token.expose());
    let review = cluster.webhook.token_review("v1", fresh.expose()).await.unwrap();
    assert_eq!(review["authenticated"], true, "{review}");
    let names: Vec<String> = bindings_of(&kube, &namespace, &uid)
        .await
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert!(!names.contains(&format!("{uid}_e2e-lost-role")), "{names:?}");
    assert!(names.contains(&format!("{uid}_e2e-admins-own")), "{names:?}");
    assert!(names.contains(&format!("{uid}_member")), "{names:?}");

    // Blacklisted by name (upstream's key): a removed binding is not made again.
    let before = loads().await.unwrap();
    set_data(
        &configmaps,
        &name,
        "syncConfig",
        &config.replace(
            "projects-blacklist: [\"0123456789abcdef0123456789abcdef\"]",
            &format!("projects-name-blacklist: [\"{}\"]", tb.demo.project_name),
        ),
    )
    .await;
    eventually(
        "the new sync configuration is loaded",
        Duration::from_secs(10),
        || async { Ok((loads().await? > before).then_some(())) },
    )
    .await
    .unwrap();
    rbs.delete(&format!("{uid}_member"), &DeleteParams::default())
        .await
        .unwrap();
    let third = tb
        .openstack(&tb.demo)
        .await
        .unwrap()
        .token()
        .await
        .unwrap()
        .value
        .clone();
    let review = cluster.webhook.token_review("v1", third.expose()).await.unwrap();
    assert_eq!(review["authenticated"], true, "{review}");
    let names: Vec<String> = bindings_of(&kube, &namespace, &uid)
        .await
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert!(!names.contains(&format!("{uid}_member")), "{names:?}");

    // A broken sync configuration is refused, reported, and changes nothing.
    set_data(&configmaps, &name, "syncConfig", "data-types-to-sync: [users]\n").await;
    eventually("the refusal is counted", Duration::from_secs(10), || async {
        let valid = cluster
            .webhook
            .metric("berth_keystone_sync_config_valid", "")
            .await?;
        Ok((valid == 0.0).then_some(()))
    })
    .await
    .unwrap();
    eventually("an InvalidSyncConfig Event", Duration::from_secs(10), || async {
        Ok(events_about(&kube, &name)
            .await
            .iter()
            .any(|(reason, m)| reason == "InvalidSyncConfig" && m.contains("users"))
            .then_some(()))
    })
    .await
    .unwrap();
    let fourth = tb
        .openstack(&tb.demo)
        .await
        .unwrap()
        .token()
        .await
        .unwrap()
        .value
        .clone();
    let review = cluster.webhook.token_review("v1", fourth.expose()).await.unwrap();
    let groups: Vec<Value> = review["user"]["groups"].as_array().unwrap().clone();
    assert!(
        groups.contains(&json!("e2e-keystone-members")),
        "the last good role mappings stay: {review}"
    );
}
