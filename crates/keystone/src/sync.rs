//! Keystone → Kubernetes mapping, upstream's `--sync-config-file` format:
//!
//! ```yaml
//! role-mappings:                  # Keystone role → username and extra groups
//!   - keystone-role: k8s-admin
//!     groups: ["system:masters"]
//!   - keystone-role: k8s-viewer
//!     username: viewer            # optional: replaces the Keystone user name
//!     groups: ["viewers"]
//! data-types-to-sync: [projects, role_assignments]
//! namespace-format: "%i"          # %i project id (required), %n project name, %d domain id
//! projects-blacklist: []          # project ids never synced
//! projects-name-blacklist: []     # project names never synced
//! ```
//!
//! Role mappings apply to every authenticated user. With `projects`, a project-scoped token's
//! first validation creates the project's namespace; with `role_assignments`, it also creates a
//! RoleBinding `<user id>_<role>` there from the user to the ClusterRole named like each of the
//! token's roles, and deletes the user's bindings for roles the token no longer carries. Sync
//! runs when Keystone is asked (not on cached reviews); a failure is logged and does not refuse
//! the token.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::Namespace,
        rbac::v1::{RoleBinding, RoleRef, Subject},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde::Deserialize;
use tracing::{info, warn};

use crate::{
    Error, Result,
    policy::{DOMAIN_ID, PROJECT_ID, PROJECT_NAME},
    review::UserInfo,
};

/// One `role-mappings` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RoleMapping {
    /// The Keystone role that triggers the mapping.
    pub keystone_role: String,
    /// The Kubernetes username to use instead of the Keystone one.
    #[serde(default)]
    pub username: Option<String>,
    /// Groups to add.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The sync configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SyncConfig {
    /// Role mappings.
    #[serde(default)]
    pub role_mappings: Vec<RoleMapping>,
    /// `projects` and/or `role_assignments`.
    #[serde(default)]
    pub data_types_to_sync: Vec<String>,
    /// The namespace name pattern.
    #[serde(default = "default_format")]
    pub namespace_format: String,
    /// Project ids never synced (upstream's key; `projects-black-list` is accepted too).
    #[serde(default, rename = "projects-blacklist", alias = "projects-black-list")]
    pub projects_blacklist: Vec<String>,
    /// Project names never synced (upstream's key; `projects-name-black-list` is accepted too).
    #[serde(
        default,
        rename = "projects-name-blacklist",
        alias = "projects-name-black-list"
    )]
    pub projects_name_blacklist: Vec<String>,
}

fn default_format() -> String {
    "%i".into()
}

impl Default for SyncConfig {
    /// Upstream's defaults: nothing synced, no role mappings, namespaces named `%i`.
    fn default() -> Self {
        Self {
            role_mappings: Vec::new(),
            data_types_to_sync: Vec::new(),
            namespace_format: default_format(),
            projects_blacklist: Vec::new(),
            projects_name_blacklist: Vec::new(),
        }
    }
}

impl SyncConfig {
    /// Parses the YAML text, checking what upstream checks.
    pub fn parse(source_name: &str, text: &str) -> Result<Self> {
        let bad = |reason: String| Error::SyncConfig {
            source_name: source_name.to_owned(),
            reason,
        };
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let config: SyncConfig = serde_saphyr::from_str(text).map_err(|e| bad(e.to_string()))?;
        for t in &config.data_types_to_sync {
            if t != "projects" && t != "role_assignments" {
                return Err(bad(format!(
                    "data-types-to-sync: unknown type {t:?} (expected projects, role_assignments)"
                )));
            }
        }
        if !config.namespace_format.contains("%i") {
            return Err(bad(format!(
                "namespace-format {:?} must contain %i (the project id)",
                config.namespace_format
            )));
        }
        if let Some(m) = config.role_mappings.iter().find(|m| m.keystone_role.is_empty()) {
            return Err(bad(format!(
                "role-mappings: an entry without keystone-role: {m:?}"
            )));
        }
        Ok(config)
    }

    fn syncs(&self, what: &str) -> bool {
        self.data_types_to_sync.iter().any(|t| t == what)
    }

    /// The namespace of a project, or `None` when it is blacklisted.
    pub fn namespace_for(&self, project_id: &str, project_name: &str, domain_id: &str) -> Option<String> {
        if self.projects_blacklist.iter().any(|p| p == project_id)
            || self.projects_name_blacklist.iter().any(|p| p == project_name)
        {
            return None;
        }
        let name = self
            .namespace_format
            .replace("%i", project_id)
            .replace("%n", project_name)
            .replace("%d", domain_id)
            .to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        Some(if valid {
            name
        } else {
            project_id.to_ascii_lowercase()
        })
    }
}

/// Applies the role mappings of the roles a token carries to its user.
pub fn apply_role_mappings(mappings: &[RoleMapping], roles: &[String], user: &mut UserInfo) {
    for m in mappings.iter().filter(|m| roles.contains(&m.keystone_role)) {
        if let Some(name) = &m.username {
            user.username.clone_from(name);
        }
        for g in &m.groups {
            if !user.groups.contains(g) {
                user.groups.push(g.clone());
            }
        }
    }
}

/// Creates namespaces and RoleBindings for the users Keystone vouches for.
#[derive(Clone)]
pub struct Syncer {
    kube: kube::Client,
    config: std::sync::Arc<std::sync::RwLock<SyncConfig>>,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncer").finish_non_exhaustive()
    }
}

const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "berth-keystone");

impl Syncer {
    /// A syncer writing with `kube`.
    pub fn new(kube: kube::Client, config: std::sync::Arc<std::sync::RwLock<SyncConfig>>) -> Self {
        Self { kube, config }
    }

    /// Syncs the namespace and role bindings of a freshly validated user.
    pub async fn sync_user(&self, user: &UserInfo) {
        if let Err(e) = self.try_sync_user(user).await {
            warn!(user = %user.username, error = %e, "Keystone sync failed");
        }
    }

    async fn try_sync_user(&self, user: &UserInfo) -> Result<()> {
        let config = self
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if !config.syncs("projects") && !config.syncs("role_assignments") {
            return Ok(());
        }
        let first = |k: &str| {
            user.extra
                .get(k)
                .and_then(|v| v.first())
                .cloned()
                .unwrap_or_default()
        };
        let project_id = first(PROJECT_ID);
        if project_id.is_empty() {
            return Ok(()); // not project-scoped
        }
        let Some(ns) = config.namespace_for(&project_id, &first(PROJECT_NAME), &first(DOMAIN_ID)) else {
            return Ok(());
        };
        let labels = BTreeMap::from([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())]);
        let namespaces: Api<Namespace> = Api::all(self.kube.clone());
        if namespaces.get_opt(&ns).await?.is_none() {
            let created = namespaces
                .create(
                    &PostParams::default(),
                    &Namespace {
                        metadata: ObjectMeta {
                            name: Some(ns.clone()),
                            labels: Some(labels.clone()),
                            ..ObjectMeta::default()
                        },
                        ..Namespace::default()
                    },
                )
                .await;
            match created {
                Ok(_) => info!(namespace = %ns, "created the namespace of Keystone project {project_id}"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !config.syncs("role_assignments") {
            return Ok(());
        }
        let roles = user.extra.get(crate::policy::ROLES).cloned().unwrap_or_default();
        let bindings: Api<RoleBinding> = Api::namespaced(self.kube.clone(), &ns);
        let prefix = format!("{}_", user.uid);
        let existing = bindings
            .list(&ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)))
            .await?;
        for rb in &existing.items {
            let name = rb.metadata.name.clone().unwrap_or_default();
            if let Some(role) = name.strip_prefix(&prefix)
                && !roles.iter().any(|r| r == role)
            {
                bindings.delete(&name, &DeleteParams::default()).await?;
                info!(namespace = %ns, binding = %name, "deleted a RoleBinding for a role the user lost");
            }
        }
        for role in &roles {
            let name = format!("{prefix}{role}");
            if existing
                .items
                .iter()
                .any(|rb| rb.metadata.name.as_deref() == Some(&name))
            {
                continue;
            }
            let rb = RoleBinding {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: role.clone(),
                },
                subjects: Some(vec![Subject {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "User".into(),
                    name: user.username.clone(),
                    namespace: None,
                }]),
            };
            match bindings.create(&PostParams::default(), &rb).await {
                Ok(_) => info!(namespace = %ns, binding = %name, "created a RoleBinding"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn upstream_config_parses() {
        let c = SyncConfig::parse(
            "test",
            r#"
role-mappings:
  - keystone-role: admin
    username: root
    groups: ["system:masters"]
data-types-to-sync: [projects, role_assignments]
namespace-format: "%n-%i"
projects-blacklist: ["p0"]
projects-name-blacklist: ["admin"]
"#,
        )
        .unwrap();
        assert_eq!(c.namespace_for("p1", "Demo", "default").unwrap(), "demo-p1");
        assert_eq!(c.namespace_for("p0", "x", "default"), None);
        assert_eq!(c.namespace_for("p3", "admin", "default"), None);
        assert_eq!(c.namespace_for("p2", "bad_name!", "d").unwrap(), "p2");
        let mut user = UserInfo {
            username: "alice".into(),
            groups: vec!["p1".into()],
            ..UserInfo::default()
        };
        apply_role_mappings(&c.role_mappings, &["member".into()], &mut user);
        assert_eq!(user.username, "alice");
        apply_role_mappings(&c.role_mappings, &["admin".into()], &mut user);
        assert_eq!(user.username, "root");
        assert_eq!(user.groups, ["p1", "system:masters"]);
    }

    #[test]
    fn the_hyphenated_blacklist_spelling_is_accepted_too() {
        let c = SyncConfig::parse(
            "t",
            "projects-black-list: [p0]\nprojects-name-black-list: [admin]\n",
        )
        .unwrap();
        assert_eq!(c.projects_blacklist, ["p0"]);
        assert_eq!(c.projects_name_blacklist, ["admin"]);
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(SyncConfig::parse("t", "data-types-to-sync: [users]").is_err());
        assert!(SyncConfig::parse("t", "namespace-format: \"%n\"").is_err());
        assert!(SyncConfig::parse("t", "role-mapings: []").is_err());
        assert!(SyncConfig::parse("t", "[not, a, map]").is_err());
        // Upstream's docs spell these with underscores (and upstream silently ignores them):
        // refused, naming the key meant.
        let e = SyncConfig::parse("t", "data_types_to_sync: [projects]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`data_types_to_sync`") && e.contains("data-types-to-sync"),
            "{e}"
        );
        assert_eq!(SyncConfig::parse("t", "\n").unwrap(), SyncConfig::default());
    }
}
