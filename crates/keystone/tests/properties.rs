//! Properties of the review decoder and the policy parser: no input makes them panic, and
//! nothing is allowed unless a rule says so.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use berth_keystone::{
    authn::looks_like_keystone,
    policy::{PROJECT_ID, PROJECT_NAME, Policy, ROLES},
    review::{AccessRequest, ResourceAttributes, Review, decode},
};
use proptest::prelude::*;

/// JSON-ish text built from review fragments, so the decoder gets deep into its branches.
fn reviewish() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just(r#""apiVersion":"authentication.k8s.io/v1""#.to_owned()),
        Just(r#""apiVersion":"authorization.k8s.io/v1beta1""#.to_owned()),
        Just(r#""kind":"TokenReview""#.to_owned()),
        Just(r#""kind":"SubjectAccessReview""#.to_owned()),
        Just(r#""spec":{"token":"x"}"#.to_owned()),
        Just(r#""spec":{"group":["a"],"resourceAttributes":{"verb":1}}"#.to_owned()),
        Just(r#""spec":{"groups":null,"extra":{"k":["v",2]},"nonResourceAttributes":{}}"#.to_owned()),
        Just(r#""spec":[]"#.to_owned()),
        "\"[a-z]{0,5}\":[0-9a-z\"{}\\[\\],:]{0,12}".prop_map(|s| s),
    ];
    prop::collection::vec(fragment, 0..6).prop_map(|parts| format!("{{{}}}", parts.join(",")))
}

fn selector() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        "[a-z]{1,6}",
        "![a-z]{0,6}",
        Just("['a','b']".to_owned()),
        Just("!['a', '*']".to_owned()),
        "[\\[\\]'!*a-z,/ ]{0,10}",
    ]
}

fn policy_text() -> impl Strategy<Value = String> {
    let rule = (
        selector(),
        selector(),
        prop::collection::vec("[a-z*]{0,6}", 0..3),
        any::<bool>(),
    )
        .prop_map(|(ns, res, verbs, with_users)| {
            let users = if with_users {
                r#""users":{"projects":["p1"],"roles":["member"]},"#
            } else {
                ""
            };
            serde_json::to_string(&serde_json::json!({ format!("{ns}/{res}"): verbs }))
                .map(|perms| format!(r#"{{{users}"resource_permissions":{perms}}}"#))
                .unwrap()
        });
    prop::collection::vec(rule, 0..4).prop_map(|rules| format!("[{}]", rules.join(",")))
}

fn request(project: &str, ns: &str, resource: &str, verb: &str) -> AccessRequest {
    AccessRequest {
        user: "u".into(),
        uid: "uid".into(),
        groups: vec![project.to_owned()],
        extra: BTreeMap::from([
            (ROLES.to_owned(), vec!["member".to_owned()]),
            (PROJECT_ID.to_owned(), vec![project.to_owned()]),
            (PROJECT_NAME.to_owned(), vec![project.to_owned()]),
        ]),
        resource: Some(ResourceAttributes {
            namespace: ns.into(),
            verb: verb.into(),
            resource: resource.into(),
            ..ResourceAttributes::default()
        }),
        non_resource: None,
    }
}

proptest! {
    #[test]
    fn decoding_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn decoding_never_panics_on_reviewish_json(text in reviewish()) {
        if let Ok(Review::Access { request, .. }) = decode(text.as_bytes()) {
            prop_assert!(request.resource.is_some() || request.non_resource.is_some());
        }
    }

    #[test]
    fn token_shape_check_never_panics(token in "[ -~]{0,300}") {
        let _ = looks_like_keystone(&token);
    }

    #[test]
    fn policy_parsing_never_panics(text in "[\\[\\]{}\":,a-z_*!/' ]{0,200}") {
        let _ = Policy::parse(&text);
    }

    #[test]
    fn policies_never_allow_other_projects(text in policy_text(), ns in "[a-z]{0,4}", res in "[a-z]{1,4}", verb in "[a-z]{1,4}") {
        if let Ok(policy) = Policy::parse(&text) {
            // Rules scoped to project p1 never let p2 in; rules without users may.
            if text.matches("\"users\"").count() == text.matches("resource_permissions").count() {
                prop_assert_eq!(policy.allows(&request("p2", &ns, &res, &verb)), None);
            }
            // No rule grants anything cluster-wide unless its namespace side is "*".
            let rules: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
            let star_namespace = rules.iter().any(|r| {
                r["resource_permissions"]
                    .as_object()
                    .is_some_and(|m| m.keys().any(|k| k.split('/').next().unwrap_or_default().contains('*')))
            });
            if !star_namespace {
                prop_assert_eq!(policy.allows(&request("p1", "", &res, &verb)), None);
            }
        }
    }

    #[test]
    fn the_empty_policy_denies_everything(ns in "[a-z]{0,4}", res in "[a-z]{1,4}", verb in "[a-z*]{1,4}") {
        let policy = Policy::parse("[]").unwrap();
        prop_assert_eq!(policy.allows(&request("p1", &ns, &res, &verb)), None);
    }
}
