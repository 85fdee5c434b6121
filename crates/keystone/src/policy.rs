//! The authorization policy: upstream k8s-keystone-auth's two formats, parsed strictly and
//! evaluated as an allow-list (no rule that allows means "not allowed").
//!
//! A policy is a JSON list of rules. Each rule is one of (or, like upstream, both of):
//!
//! - **v1**: `{"resource": {"verbs": [..], "resources": [..], "version": "<group>|*",
//!   "namespace": "<ns>|*"}, "match": [{"type": "user|group|project|role", "values": [..]}]}`,
//!   or `{"nonresource": {"verbs": [..], "path": "/healthz" | "/apis/*" | "*"}, "match": [..]}`.
//!   Every `match` entry must hold; `"*"` among the values holds for anyone.
//! - **v2**: `{"users": {"projects": [..], "roles": [..]}, "resource_permissions":
//!   {"<ns>/<resource>": [verbs]}, "nonresource_permissions": {"<path>": [verbs]}}`. The user
//!   must hold **all** listed roles and **any** listed project (by id or name). Either side of a
//!   `resource_permissions` key is `*`, a name, `!name`, `['a','b']` or `!['a','b']`.
//!   v2 permissions win over v1 specs in the same rule.
//!
//! Differences from upstream, each on the safe side: a policy with an unknown field, an unknown
//! match type, a malformed key or an empty list is refused as a whole (upstream skips the rule
//! silently or panics), and a request without a namespace (cluster-scoped, or across all
//! namespaces) matches only a namespace of `*` (upstream lets `!kube-system/pods` list pods in
//! every namespace, kube-system included).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;

use crate::review::{AccessRequest, NonResourceAttributes, ResourceAttributes};

/// The `extra` key holding the token's role names.
pub const ROLES: &str = "alpha.kubernetes.io/identity/roles";
/// The `extra` key holding the project id.
pub const PROJECT_ID: &str = "alpha.kubernetes.io/identity/project/id";
/// The `extra` key holding the project name.
pub const PROJECT_NAME: &str = "alpha.kubernetes.io/identity/project/name";
/// The `extra` key holding the user's domain id.
pub const DOMAIN_ID: &str = "alpha.kubernetes.io/identity/user/domain/id";
/// The `extra` key holding the user's domain name.
pub const DOMAIN_NAME: &str = "alpha.kubernetes.io/identity/user/domain/name";

/// A parsed policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    users: Option<Users>,
    resource: Option<ResourceSpec>,
    nonresource: Option<NonResourceSpec>,
    matches: Vec<Match>,
    resource_permissions: Option<Vec<ResourcePermission>>,
    nonresource_permissions: Option<Vec<(String, Verbs)>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Users {
    projects: BTreeSet<String>,
    roles: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourceSpec {
    verbs: Verbs,
    resources: Vec<String>,
    group: String,
    namespace: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NonResourceSpec {
    verbs: Verbs,
    path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MatchType {
    User,
    Group,
    Project,
    Role,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Match {
    kind: MatchType,
    values: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Verbs(BTreeSet<String>);

impl Verbs {
    fn allows(&self, verb: &str) -> bool {
        self.0.contains("*") || self.0.contains(&verb.to_ascii_lowercase())
    }
}

/// One side of a `resource_permissions` key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selector {
    Any,
    Is(String),
    Not(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
}

impl Selector {
    fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        let list = |s: &str| -> Result<BTreeSet<String>, String> {
            let items: Vec<String> = serde_json::from_str(&s.replace('\'', "\""))
                .map_err(|_| format!("{text:?} is not a list like ['a','b']"))?;
            if items.is_empty() {
                return Err(format!("{text:?} is an empty list"));
            }
            Ok(items.into_iter().map(|i| i.trim().to_owned()).collect())
        };
        if t.is_empty() {
            return Err("an empty name (write * for any)".into());
        }
        Ok(if t == "*" {
            Selector::Any
        } else if let Some(rest) = t.strip_prefix("![") {
            Selector::NotIn(list(&format!("[{rest}"))?)
        } else if t.starts_with('[') {
            Selector::In(list(&t)?)
        } else if let Some(rest) = t.strip_prefix('!') {
            if rest.is_empty() || rest == "*" {
                return Err(format!("{text:?} excludes everything"));
            }
            Selector::Not(rest.to_owned())
        } else {
            Selector::Is(t)
        })
    }

    /// Whether `value` is selected. An empty value (no namespace) is selected only by "any".
    fn selects(&self, value: &str) -> bool {
        match self {
            Selector::Any => true,
            _ if value.is_empty() => false,
            Selector::Is(n) => n == value,
            Selector::Not(n) => n != value,
            Selector::In(set) => set.contains("*") || set.contains(value),
            Selector::NotIn(set) => !set.contains("*") && !set.contains(value),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ResourcePermission {
    namespace: Selector,
    resource: Selector,
    verbs: Verbs,
}

// ---- the JSON as written ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    resource: Option<RawResource>,
    #[serde(default)]
    nonresource: Option<RawNonResource>,
    #[serde(default)]
    r#match: Option<Vec<RawMatch>>,
    #[serde(default)]
    resource_permissions: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    nonresource_permissions: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default)]
    users: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResource {
    verbs: Vec<String>,
    resources: Vec<String>,
    version: String,
    namespace: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNonResource {
    verbs: Vec<String>,
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    r#type: String,
    values: Vec<String>,
}

fn verbs(list: &[String], what: &str) -> Result<Verbs, String> {
    if list.is_empty() || list.iter().any(|v| v.trim().is_empty()) {
        return Err(format!(
            "{what}: verbs must be a non-empty list of non-empty verbs"
        ));
    }
    Ok(Verbs(
        list.iter().map(|v| v.trim().to_ascii_lowercase()).collect(),
    ))
}

impl Policy {
    /// Parses a policy (a JSON list of rules). An empty list is a valid policy that allows nothing.
    pub fn parse(text: &str) -> Result<Self, String> {
        let values: Vec<Value> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON list of rules: {e}"))?;
        let rules = values
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let raw: RawRule = serde_json::from_value(v).map_err(|e| format!("rule {i}: {e}"))?;
                Rule::from_raw(raw).map_err(|e| format!("rule {i}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy { rules })
    }

    /// How many rules it has.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether it has no rule (and so allows nothing).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a rule allows the request; `Some(index)` of the first rule that does.
    pub fn allows(&self, request: &AccessRequest) -> Option<usize> {
        self.rules.iter().position(|r| r.allows(request))
    }
}

impl Rule {
    fn from_raw(raw: RawRule) -> Result<Self, String> {
        let users = raw
            .users
            .map(|u| -> Result<Users, String> {
                if let Some(k) = u.keys().find(|k| *k != "projects" && *k != "roles") {
                    return Err(format!("users: unknown key {k:?} (expected projects, roles)"));
                }
                let projects: BTreeSet<String> = u.get("projects").into_iter().flatten().cloned().collect();
                if projects.is_empty() {
                    return Err("users: projects must list at least one project id or name".into());
                }
                Ok(Users {
                    projects,
                    roles: u.get("roles").into_iter().flatten().cloned().collect(),
                })
            })
            .transpose()?;
        let resource = raw
            .resource
            .map(|r| -> Result<ResourceSpec, String> {
                if r.resources.is_empty() {
                    return Err("resource: resources must not be empty".into());
                }
                if r.version.is_empty() && r.namespace.is_empty() {
                    // Allowed by the type, but almost surely a mistake; upstream matches
                    // only the core group and cluster-wide requests then.
                }
                Ok(ResourceSpec {
                    verbs: verbs(&r.verbs, "resource")?,
                    resources: r.resources,
                    group: r.version,
                    namespace: r.namespace,
                })
            })
            .transpose()?;
        let nonresource = raw
            .nonresource
            .map(|n| -> Result<NonResourceSpec, String> {
                if n.path.is_empty() {
                    return Err("nonresource: path must not be empty".into());
                }
                Ok(NonResourceSpec {
                    verbs: verbs(&n.verbs, "nonresource")?,
                    path: n.path,
                })
            })
            .transpose()?;
        let matches = raw
            .r#match
            .unwrap_or_default()
            .into_iter()
            .map(|m| -> Result<Match, String> {
                let kind = match m.r#type.as_str() {
                    "user" => MatchType::User,
                    "group" => MatchType::Group,
                    "project" => MatchType::Project,
                    "role" => MatchType::Role,
                    other => {
                        return Err(format!(
                            "match: unknown type {other:?} (expected user, group, project or role)"
                        ));
                    }
                };
                if m.values.is_empty() {
                    return Err(format!("match: type {:?} has no values", m.r#type));
                }
                Ok(Match {
                    kind,
                    values: m.values.into_iter().collect(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let resource_permissions = raw
            .resource_permissions
            .map(|perms| {
                perms
                    .iter()
                    .map(|(key, vs)| -> Result<ResourcePermission, String> {
                        let (ns, res) = key.split_once('/').ok_or_else(|| {
                            format!("resource_permissions: key {key:?} is not <namespace>/<resource>")
                        })?;
                        if res.contains('/') && !res.trim_start().starts_with(['[', '!']) {
                            return Err(format!("resource_permissions: key {key:?} has more than one '/'"));
                        }
                        Ok(ResourcePermission {
                            namespace: Selector::parse(ns)
                                .map_err(|e| format!("resource_permissions {key:?}: namespace {e}"))?,
                            resource: Selector::parse(res)
                                .map_err(|e| format!("resource_permissions {key:?}: resource {e}"))?,
                            verbs: verbs(vs, &format!("resource_permissions {key:?}"))?,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let nonresource_permissions = raw
            .nonresource_permissions
            .map(|perms| {
                perms
                    .iter()
                    .map(|(path, vs)| -> Result<(String, Verbs), String> {
                        if path.is_empty() {
                            return Err("nonresource_permissions: empty path".into());
                        }
                        Ok((
                            path.clone(),
                            verbs(vs, &format!("nonresource_permissions {path:?}"))?,
                        ))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        if resource.is_none()
            && nonresource.is_none()
            && resource_permissions.is_none()
            && nonresource_permissions.is_none()
        {
            return Err(
                "grants nothing: give resource, nonresource, resource_permissions or nonresource_permissions"
                    .into(),
            );
        }
        Ok(Rule {
            users,
            resource,
            nonresource,
            matches,
            resource_permissions,
            nonresource_permissions,
        })
    }

    fn allows(&self, req: &AccessRequest) -> bool {
        let extra = |key: &str| req.extra.get(key).map(Vec::as_slice).unwrap_or_default();
        if let Some(users) = &self.users {
            let roles: BTreeSet<&str> = extra(ROLES).iter().map(String::as_str).collect();
            if !users.roles.iter().all(|r| roles.contains(r.as_str())) {
                return false;
            }
            let in_project = extra(PROJECT_ID)
                .iter()
                .chain(extra(PROJECT_NAME))
                .any(|p| users.projects.contains(p));
            if !in_project {
                return false;
            }
        }
        if let Some(attrs) = &req.resource {
            if let Some(perms) = &self.resource_permissions {
                perms.iter().any(|p| {
                    p.namespace.selects(&attrs.namespace)
                        && p.resource.selects(&attrs.resource)
                        && p.verbs.allows(&attrs.verb)
                })
            } else if let Some(spec) = &self.resource {
                spec.allows(attrs) && self.matches_hold(req)
            } else {
                false
            }
        } else if let Some(attrs) = &req.non_resource {
            if let Some(perms) = &self.nonresource_permissions {
                perms
                    .iter()
                    .any(|(path, verbs)| *path == attrs.path && verbs.allows(&attrs.verb))
            } else if let Some(spec) = &self.nonresource {
                spec.allows(attrs) && self.matches_hold(req)
            } else {
                false
            }
        } else {
            false
        }
    }

    fn matches_hold(&self, req: &AccessRequest) -> bool {
        let extra = |key: &str| req.extra.get(key).map(Vec::as_slice).unwrap_or_default();
        self.matches.iter().all(|m| {
            if m.values.contains("*") {
                return true;
            }
            match m.kind {
                MatchType::User => m.values.contains(&req.user) || m.values.contains(&req.uid),
                MatchType::Group => req.groups.iter().any(|g| m.values.contains(g)),
                MatchType::Project => extra(PROJECT_ID)
                    .iter()
                    .chain(extra(PROJECT_NAME))
                    .any(|p| m.values.contains(p)),
                MatchType::Role => extra(ROLES).iter().any(|r| m.values.contains(r)),
            }
        })
    }
}

impl ResourceSpec {
    fn allows(&self, a: &ResourceAttributes) -> bool {
        if self.group != "*" && self.group != a.group {
            return false;
        }
        if self.namespace != "*" && self.namespace != a.namespace {
            return false;
        }
        let has = |s: &str| self.resources.iter().any(|r| r == s);
        let resource_ok = if a.subresource.is_empty() {
            has("*") || has(&a.resource)
        } else {
            has("*") || has(&format!("{}/*", a.resource)) || has(&format!("{}/{}", a.resource, a.subresource))
        };
        resource_ok && self.verbs.allows(&a.verb)
    }
}

impl NonResourceSpec {
    fn allows(&self, a: &NonResourceAttributes) -> bool {
        let path_ok = self.path == "*"
            || self.path == a.path
            || self
                .path
                .strip_suffix('*')
                .is_some_and(|prefix| a.path.starts_with(prefix));
        path_ok && self.verbs.allows(&a.verb)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn user(project: &str, roles: &[&str]) -> AccessRequest {
        AccessRequest {
            user: "demo".into(),
            uid: "u1".into(),
            groups: vec![format!("{project}-id"), "system:authenticated".into()],
            extra: BTreeMap::from([
                (ROLES.into(), roles.iter().map(|r| (*r).to_owned()).collect()),
                (PROJECT_ID.into(), vec![format!("{project}-id")]),
                (PROJECT_NAME.into(), vec![project.to_owned()]),
            ]),
            ..AccessRequest::default()
        }
    }

    fn on(mut r: AccessRequest, verb: &str, ns: &str, resource: &str) -> AccessRequest {
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        r.resource = Some(ResourceAttributes {
            namespace: ns.into(),
            verb: verb.into(),
            resource: resource.into(),
            subresource: sub.into(),
            ..ResourceAttributes::default()
        });
        r
    }

    fn path(mut r: AccessRequest, verb: &str, p: &str) -> AccessRequest {
        r.non_resource = Some(NonResourceAttributes {
            path: p.into(),
            verb: verb.into(),
        });
        r
    }

    #[test]
    fn v1_rules_with_matches() {
        let p = Policy::parse(
            r#"[
              {"resource": {"verbs": ["get", "list"], "resources": ["pods", "deployments/scale"],
                            "version": "*", "namespace": "default"},
               "match": [{"type": "project", "values": ["demo"]}, {"type": "role", "values": ["member"]}]},
              {"nonresource": {"verbs": ["get"], "path": "/apis/*"},
               "match": [{"type": "group", "values": ["*"]}]}
            ]"#,
        )
        .unwrap();
        let demo = user("demo", &["member"]);
        assert_eq!(p.allows(&on(demo.clone(), "list", "default", "pods")), Some(0));
        assert_eq!(p.allows(&on(demo.clone(), "LIST", "default", "pods")), Some(0));
        assert_eq!(p.allows(&on(demo.clone(), "delete", "default", "pods")), None);
        assert_eq!(p.allows(&on(demo.clone(), "list", "kube-system", "pods")), None);
        assert_eq!(p.allows(&on(demo.clone(), "list", "", "pods")), None);
        assert_eq!(p.allows(&on(demo.clone(), "get", "default", "pods/exec")), None);
        assert_eq!(
            p.allows(&on(demo.clone(), "get", "default", "deployments/scale")),
            Some(0)
        );
        assert_eq!(
            p.allows(&on(user("demo", &["reader"]), "list", "default", "pods")),
            None
        );
        assert_eq!(
            p.allows(&on(user("alt", &["member"]), "list", "default", "pods")),
            None
        );
        assert_eq!(p.allows(&path(demo.clone(), "get", "/apis/apps")), Some(1));
        assert_eq!(p.allows(&path(demo, "get", "/api")), None);
    }

    #[test]
    fn v2_rules_with_selectors() {
        let p = Policy::parse(
            r#"[{"users": {"projects": ["demo"], "roles": ["member"]},
                 "resource_permissions": {
                   "!kube-system/['pods', 'services']": ["get", "list"],
                   "['ns1','ns2']/!['secrets']": ["*"],
                   "ns3/*": ["get"]
                 },
                 "nonresource_permissions": {"/healthz": ["get"]}}]"#,
        )
        .unwrap();
        let demo = user("demo", &["member", "reader"]);
        assert!(p.allows(&on(demo.clone(), "list", "default", "pods")).is_some());
        assert!(
            p.allows(&on(demo.clone(), "list", "kube-system", "pods"))
                .is_none()
        );
        assert!(p.allows(&on(demo.clone(), "list", "", "pods")).is_none());
        assert!(
            p.allows(&on(demo.clone(), "delete", "ns1", "configmaps"))
                .is_some()
        );
        assert!(p.allows(&on(demo.clone(), "get", "ns1", "secrets")).is_none());
        assert!(p.allows(&on(demo.clone(), "get", "ns3", "secrets")).is_some());
        assert!(p.allows(&on(demo.clone(), "list", "ns3", "secrets")).is_none());
        assert!(p.allows(&path(demo.clone(), "get", "/healthz")).is_some());
        assert!(p.allows(&path(demo, "get", "/metrics")).is_none());
        // all roles and any project
        assert!(
            p.allows(&on(user("demo", &["reader"]), "list", "default", "pods"))
                .is_none()
        );
        assert!(
            p.allows(&on(user("other", &["member"]), "list", "default", "pods"))
                .is_none()
        );
        // by project id too
        let mut by_id = user("x", &["member"]);
        by_id.extra.insert(PROJECT_ID.into(), vec!["demo".into()]);
        assert!(p.allows(&on(by_id, "list", "default", "pods")).is_some());
    }

    #[test]
    fn empty_policy_denies() {
        let p = Policy::parse("[]").unwrap();
        assert!(p.is_empty());
        assert_eq!(
            p.allows(&on(user("demo", &["admin"]), "get", "default", "pods")),
            None
        );
    }

    #[test]
    fn malformed_policies_are_refused_with_the_rule_index() {
        for (text, want) in [
            ("{}", "not a JSON list"),
            (
                r#"[{"resource": {"verbs": ["get"], "resources": ["pods"], "version": "*"}}]"#,
                "rule 0",
            ),
            (
                r#"[{"nonresource": {"verbs": [], "path": "/x"}}]"#,
                "verbs must be",
            ),
            (
                r#"[{"resource_permissions": {"pods": ["get"]}}]"#,
                "not <namespace>/<resource>",
            ),
            (
                r#"[{"resource_permissions": {"['a'/pods": ["get"]}}]"#,
                "not a list",
            ),
            (
                r#"[{"resource_permissions": {"!*/pods": ["get"]}}]"#,
                "excludes everything",
            ),
            (
                r#"[{"users": {"roles": ["x"]}, "resource_permissions": {"*/*": ["get"]}}]"#,
                "projects",
            ),
            (
                r#"[{"match": [{"type": "user", "values": ["a"]}]}]"#,
                "grants nothing",
            ),
            (
                r#"[{"nonresource": {"verbs": ["get"], "path": "/x"}, "match": [{"type": "tenant", "values": ["a"]}]}]"#,
                "unknown type",
            ),
            (r#"[{"resource_permision": {"*/*": ["get"]}}]"#, "unknown field"),
        ] {
            let err = Policy::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
