//! TokenReview and SubjectAccessReview, in `v1` and `v1beta1`.
//!
//! kube-apiserver 1.20 sends `v1beta1` unless told otherwise (`--authentication-token-webhook-version`,
//! `--authorization-webhook-version`); newer ones send `v1`. The shapes differ in one field that
//! matters here (a SubjectAccessReview's groups are `spec.group` in `v1beta1` and `spec.groups`
//! in `v1`), so both are decoded by hand into [`Review`], and every answer echoes the request's
//! `apiVersion` and `kind`. Decoding never panics: anything unexpected is a [`DecodeError`]
//! that becomes a refusal with a reason.

use std::collections::BTreeMap;

use berth_openstack::Secret;
use serde_json::{Value, json};

/// `authentication.k8s.io/v1`.
pub const AUTHN_V1: &str = "authentication.k8s.io/v1";
/// `authentication.k8s.io/v1beta1`.
pub const AUTHN_V1BETA1: &str = "authentication.k8s.io/v1beta1";
/// `authorization.k8s.io/v1`.
pub const AUTHZ_V1: &str = "authorization.k8s.io/v1";
/// `authorization.k8s.io/v1beta1`.
pub const AUTHZ_V1BETA1: &str = "authorization.k8s.io/v1beta1";

/// A decoded review request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// "Who holds this token?"
    Token {
        /// The request's `apiVersion`, echoed in the answer.
        api_version: String,
        /// The bearer token.
        token: Secret,
    },
    /// "May this user do this?"
    Access {
        /// The request's `apiVersion`, echoed in the answer.
        api_version: String,
        /// What is asked.
        request: Box<AccessRequest>,
    },
}

/// The subject and the action of a SubjectAccessReview.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessRequest {
    /// `spec.user`.
    pub user: String,
    /// `spec.uid`.
    pub uid: String,
    /// `spec.groups` (`v1`) or `spec.group` (`v1beta1`).
    pub groups: Vec<String>,
    /// `spec.extra`.
    pub extra: BTreeMap<String, Vec<String>>,
    /// `spec.resourceAttributes`, for a request about an API object.
    pub resource: Option<ResourceAttributes>,
    /// `spec.nonResourceAttributes`, for a request about a path like `/healthz`.
    pub non_resource: Option<NonResourceAttributes>,
}

/// `spec.resourceAttributes`; absent fields are empty strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// The namespace; empty for cluster-scoped objects and requests across all namespaces.
    pub namespace: String,
    /// The verb, e.g. `get`, `list`, `create`.
    pub verb: String,
    /// The API group; empty for the core group.
    pub group: String,
    /// The API version.
    pub version: String,
    /// The resource, e.g. `pods`.
    pub resource: String,
    /// The subresource, e.g. `exec`.
    pub subresource: String,
    /// The object's name.
    pub name: String,
}

/// `spec.nonResourceAttributes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NonResourceAttributes {
    /// The path, e.g. `/healthz`.
    pub path: String,
    /// The verb (the lower-cased HTTP method).
    pub verb: String,
}

/// Why a request body is not a review this webhook answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct DecodeError {
    /// Which review the body seems to be, so the refusal has the right shape.
    pub kind: Kind,
    /// The `apiVersion` to answer with.
    pub api_version: String,
    /// What is wrong.
    pub reason: String,
}

/// The two kinds of review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TokenReview.
    Token,
    /// SubjectAccessReview.
    Access,
}

/// The longest token looked at; longer ones are refused without decoding (Keystone's are ~200
/// bytes; JWS tokens well under 2 KiB).
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// Decodes a request body.
pub fn decode(body: &[u8]) -> Result<Review, DecodeError> {
    let fail = |kind, api_version: &str, reason: String| DecodeError {
        kind,
        api_version: api_version.to_owned(),
        reason,
    };
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| fail(Kind::Token, AUTHN_V1, format!("the body is not JSON: {e}")))?;
    let kind_name = v.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let spec = v.get("spec");
    match kind_name {
        "TokenReview" => {
            let answer_version = if api_version == AUTHN_V1BETA1 {
                AUTHN_V1BETA1
            } else {
                AUTHN_V1
            };
            if api_version != AUTHN_V1 && api_version != AUTHN_V1BETA1 {
                return Err(fail(
                    Kind::Token,
                    answer_version,
                    format!(
                        "unsupported TokenReview apiVersion {api_version:?} (supported: {AUTHN_V1}, {AUTHN_V1BETA1})"
                    ),
                ));
            }
            let token = spec
                .and_then(|s| s.get("token"))
                .and_then(Value::as_str)
                .ok_or_else(|| fail(Kind::Token, answer_version, "spec.token is missing".into()))?;
            if token.len() > MAX_TOKEN_LEN {
                return Err(fail(
                    Kind::Token,
                    answer_version,
                    format!("the token is longer than {MAX_TOKEN_LEN} bytes"),
                ));
            }
            Ok(Review::Token {
                api_version: answer_version.to_owned(),
                token: Secret::new(token),
            })
        }
        "SubjectAccessReview" => {
            let answer_version = if api_version == AUTHZ_V1BETA1 {
                AUTHZ_V1BETA1
            } else {
                AUTHZ_V1
            };
            if api_version != AUTHZ_V1 && api_version != AUTHZ_V1BETA1 {
                return Err(fail(
                    Kind::Access,
                    answer_version,
                    format!(
                        "unsupported SubjectAccessReview apiVersion {api_version:?} (supported: {AUTHZ_V1}, {AUTHZ_V1BETA1})"
                    ),
                ));
            }
            let spec = spec.ok_or_else(|| fail(Kind::Access, answer_version, "spec is missing".into()))?;
            let request =
                access_request(spec).map_err(|reason| fail(Kind::Access, answer_version, reason))?;
            Ok(Review::Access {
                api_version: answer_version.to_owned(),
                request: Box::new(request),
            })
        }
        other => {
            let kind = if api_version.starts_with("authorization.") {
                Kind::Access
            } else {
                Kind::Token
            };
            let answer_version = match kind {
                Kind::Access if api_version == AUTHZ_V1BETA1 => AUTHZ_V1BETA1,
                Kind::Access => AUTHZ_V1,
                Kind::Token if api_version == AUTHN_V1BETA1 => AUTHN_V1BETA1,
                Kind::Token => AUTHN_V1,
            };
            Err(fail(
                kind,
                answer_version,
                format!("unsupported kind {other:?} (expected TokenReview or SubjectAccessReview)"),
            ))
        }
    }
}

fn string_field(obj: &Value, key: &str) -> Result<String, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{key} is not a string")),
    }
}

fn string_list(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{what} holds a value that is not a string"))
            })
            .collect(),
        Some(_) => Err(format!("{what} is not a list")),
    }
}

fn access_request(spec: &Value) -> Result<AccessRequest, String> {
    if !spec.is_object() {
        return Err("spec is not an object".into());
    }
    let mut groups = string_list(spec.get("groups"), "spec.groups")?;
    groups.extend(string_list(spec.get("group"), "spec.group")?);
    let mut extra = BTreeMap::new();
    match spec.get("extra") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                extra.insert(k.clone(), string_list(Some(v), "spec.extra")?);
            }
        }
        Some(_) => return Err("spec.extra is not an object".into()),
    }
    let resource = match spec.get("resourceAttributes") {
        None | Some(Value::Null) => None,
        Some(r) if r.is_object() => Some(ResourceAttributes {
            namespace: string_field(r, "namespace")?,
            verb: string_field(r, "verb")?,
            group: string_field(r, "group")?,
            version: string_field(r, "version")?,
            resource: string_field(r, "resource")?,
            subresource: string_field(r, "subresource")?,
            name: string_field(r, "name")?,
        }),
        Some(_) => return Err("spec.resourceAttributes is not an object".into()),
    };
    let non_resource = match spec.get("nonResourceAttributes") {
        None | Some(Value::Null) => None,
        Some(r) if r.is_object() => Some(NonResourceAttributes {
            path: string_field(r, "path")?,
            verb: string_field(r, "verb")?,
        }),
        Some(_) => return Err("spec.nonResourceAttributes is not an object".into()),
    };
    if resource.is_none() && non_resource.is_none() {
        return Err("spec has neither resourceAttributes nor nonResourceAttributes".into());
    }
    Ok(AccessRequest {
        user: string_field(spec, "user")?,
        uid: string_field(spec, "uid")?,
        groups,
        extra,
        resource,
        non_resource,
    })
}

/// A user as a TokenReview reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// `username`.
    pub username: String,
    /// `uid`.
    pub uid: String,
    /// `groups`.
    pub groups: Vec<String>,
    /// `extra`.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The answer to a TokenReview that authenticated `user`.
pub fn authenticated(api_version: &str, user: &UserInfo) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "TokenReview",
        "status": {
            "authenticated": true,
            "user": {
                "username": user.username,
                "uid": user.uid,
                "groups": user.groups,
                "extra": user.extra,
            }
        }
    })
}

/// The answer to a TokenReview that did not authenticate anyone, with the reason.
pub fn unauthenticated(api_version: &str, reason: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "TokenReview",
        "status": { "authenticated": false, "error": reason }
    })
}

/// The answer to a SubjectAccessReview.
pub fn access(api_version: &str, allowed: bool, reason: &str, evaluation_error: Option<&str>) -> Value {
    let mut status = json!({ "allowed": allowed, "reason": reason });
    if let Some(e) = evaluation_error {
        status["evaluationError"] = json!(e);
    }
    json!({
        "apiVersion": api_version,
        "kind": "SubjectAccessReview",
        "status": status
    })
}

/// The refusal for a body that could not be decoded, in the shape of the review it seemed to be.
pub fn refusal(e: &DecodeError) -> Value {
    match e.kind {
        Kind::Token => unauthenticated(&e.api_version, &e.reason),
        Kind::Access => access(&e.api_version, false, &e.reason, Some(&e.reason)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn token_reviews_of_both_versions() {
        for v in [AUTHN_V1, AUTHN_V1BETA1] {
            let body = json!({"apiVersion": v, "kind": "TokenReview", "spec": {"token": "gAAAAB", "audiences": ["x"]}});
            let r = decode(body.to_string().as_bytes()).unwrap();
            assert_eq!(
                r,
                Review::Token {
                    api_version: v.into(),
                    token: Secret::new("gAAAAB")
                }
            );
        }
    }

    #[test]
    fn v1beta1_access_reviews_use_group_and_v1_groups() {
        let beta = json!({"apiVersion": AUTHZ_V1BETA1, "kind": "SubjectAccessReview", "spec": {
            "user": "demo", "group": ["p1", "system:authenticated"],
            "extra": {"alpha.kubernetes.io/identity/roles": ["member"]},
            "resourceAttributes": {"namespace": "default", "verb": "list", "version": "v1", "resource": "pods"}}});
        let Review::Access { api_version, request } = decode(beta.to_string().as_bytes()).unwrap() else {
            panic!("not an access review")
        };
        assert_eq!(api_version, AUTHZ_V1BETA1);
        assert_eq!(request.groups, ["p1", "system:authenticated"]);
        assert_eq!(request.resource.unwrap().resource, "pods");
        let v1 = json!({"apiVersion": AUTHZ_V1, "kind": "SubjectAccessReview", "spec": {
            "user": "demo", "groups": ["p1"], "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}});
        let Review::Access { request, .. } = decode(v1.to_string().as_bytes()).unwrap() else {
            panic!("not an access review")
        };
        assert_eq!(request.groups, ["p1"]);
        assert_eq!(request.non_resource.unwrap().path, "/healthz");
    }

    #[test]
    fn refusals_echo_the_version_and_kind() {
        let e = decode(
            br#"{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{}}"#,
        )
        .unwrap_err();
        let answer = refusal(&e);
        assert_eq!(answer["apiVersion"], AUTHZ_V1BETA1);
        assert_eq!(answer["kind"], "SubjectAccessReview");
        assert_eq!(answer["status"]["allowed"], false);
        let e = decode(b"{not json").unwrap_err();
        assert_eq!(refusal(&e)["status"]["authenticated"], false);
        let e =
            decode(br#"{"apiVersion":"authentication.k8s.io/v2","kind":"TokenReview","spec":{"token":"x"}}"#)
                .unwrap_err();
        assert!(e.reason.contains("unsupported TokenReview apiVersion"), "{e}");
    }

    #[test]
    fn answers_have_the_upstream_shape() {
        let user = UserInfo {
            username: "demo".into(),
            uid: "u1".into(),
            groups: vec!["p1".into()],
            extra: BTreeMap::from([(
                "alpha.kubernetes.io/identity/project/id".into(),
                vec!["p1".into()],
            )]),
        };
        let a = authenticated(AUTHN_V1BETA1, &user);
        assert_eq!(
            a["status"]["user"]["extra"]["alpha.kubernetes.io/identity/project/id"][0],
            "p1"
        );
        assert_eq!(a["apiVersion"], AUTHN_V1BETA1);
    }
}
