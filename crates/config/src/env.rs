//! The `OS_*` environment variables.
//!
//! Upstream reads them as defaults for `[Global]` (the file wins); the same names are what
//! `openstack` users `source` from an openrc file.

use std::collections::BTreeMap;

/// `[Global]` key ← the variables that set it, first found wins.
pub const GLOBAL_VARIABLES: &[(&str, &[&str])] = &[
    ("auth-url", &["OS_AUTH_URL"]),
    ("user-id", &["OS_USER_ID"]),
    ("username", &["OS_USERNAME"]),
    ("password", &["OS_PASSWORD"]),
    ("region", &["OS_REGION_NAME"]),
    ("os-endpoint-type", &["OS_INTERFACE", "OS_ENDPOINT_TYPE"]),
    ("tenant-id", &["OS_PROJECT_ID", "OS_TENANT_ID"]),
    ("tenant-name", &["OS_PROJECT_NAME", "OS_TENANT_NAME"]),
    ("tenant-domain-id", &["OS_PROJECT_DOMAIN_ID"]),
    ("tenant-domain-name", &["OS_PROJECT_DOMAIN_NAME"]),
    ("domain-id", &["OS_DOMAIN_ID"]),
    ("domain-name", &["OS_DOMAIN_NAME"]),
    ("user-domain-id", &["OS_USER_DOMAIN_ID"]),
    ("user-domain-name", &["OS_USER_DOMAIN_NAME"]),
    ("trust-id", &["OS_TRUST_ID"]),
    ("application-credential-id", &["OS_APPLICATION_CREDENTIAL_ID"]),
    ("application-credential-name", &["OS_APPLICATION_CREDENTIAL_NAME"]),
    (
        "application-credential-secret",
        &["OS_APPLICATION_CREDENTIAL_SECRET"],
    ),
    ("token", &["OS_TOKEN", "OS_AUTH_TOKEN"]),
    ("ca-file", &["OS_CACERT"]),
    ("cert-file", &["OS_CERT"]),
    ("key-file", &["OS_KEY"]),
];

/// The `[Global]` defaults that the environment gives, by key.
pub fn global_defaults(var: &dyn Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
    GLOBAL_VARIABLES
        .iter()
        .filter_map(|(key, names)| {
            names
                .iter()
                .find_map(|n| var(n).filter(|v| !v.is_empty()))
                .map(|v| ((*key).to_owned(), v))
        })
        .collect()
}
