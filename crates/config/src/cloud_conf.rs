//! `cloud.conf`: the INI file of openstack-cloud-controller-manager, read the berth way.
//!
//! Every section and key upstream reads is known here with upstream's default; the tables in
//! [`SECTIONS`] say what each key accepts. berth is stricter than upstream about mistakes:
//! a misspelt key is reported with the closest known one, and a value of the wrong kind stops
//! start-up with the file, line, key and accepted values (upstream ignores both silently).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use berth_openstack::{
    ClientOptions, Credentials, Interface, Secret,
    auth::{ApplicationCredentialRef, AuthMethod, DomainRef, NamedRef, Scope},
};

use crate::{Error, Warning, clouds_yaml, env, ini};

/// What a key accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Any text.
    Text,
    /// Text that is a secret: never echoed.
    Secret,
    /// An absolute http(s) URL.
    Url,
    /// `true`/`false` (also `yes`/`no`, `on`/`off`, `1`/`0`; a bare key is `true`).
    Bool,
    /// A whole number in a range.
    Int(i64, i64),
    /// A Go duration: `5s`, `1m30s`, `500ms`.
    Duration,
    /// One of these words (compared without case).
    OneOf(&'static [&'static str]),
    /// A comma-separated list of these words.
    ListOf(&'static [&'static str]),
    /// A comma-separated list of CIDRs.
    Cidrs,
    /// Text; the key may be given several times and every value counts.
    Repeated,
}

impl Kind {
    fn accepted(self) -> String {
        match self {
            Kind::Text | Kind::Repeated => "any text".into(),
            Kind::Secret => "a non-empty secret".into(),
            Kind::Url => "an http:// or https:// URL".into(),
            Kind::Bool => "true, false (or yes/no, on/off, 1/0)".into(),
            Kind::Int(min, max) if max == i64::MAX => format!("a whole number ≥ {min}"),
            Kind::Int(min, max) => format!("a whole number from {min} to {max}"),
            Kind::Duration => "a duration such as 5s, 1m30s, 500ms".into(),
            Kind::OneOf(words) => words.join(", "),
            Kind::ListOf(words) => format!("a comma-separated list of {}", words.join(", ")),
            Kind::Cidrs => "a comma-separated list of CIDRs such as 10.0.0.0/8, fd00::/8".into(),
        }
    }

    /// Checks `value`; the error is the reason.
    fn check(self, value: &str) -> Result<(), String> {
        match self {
            Kind::Text | Kind::Repeated => Ok(()),
            Kind::Secret if value.is_empty() => Err("empty".into()),
            Kind::Secret => Ok(()),
            Kind::Url => match url::Url::parse(value) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
                Ok(u) => Err(format!("scheme {} is not http or https", u.scheme())),
                Err(e) => Err(e.to_string()),
            },
            Kind::Bool => parse_bool(value)
                .map(|_| ())
                .ok_or_else(|| "not a boolean".into()),
            Kind::Int(min, max) => match value.parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(()),
                Ok(_) => Err("out of range".into()),
                Err(_) => Err("not a whole number".into()),
            },
            Kind::Duration => parse_duration(value).map(|_| ()),
            Kind::OneOf(words) => {
                if words.iter().any(|w| w.eq_ignore_ascii_case(value)) {
                    Ok(())
                } else {
                    Err("unknown value".into())
                }
            }
            Kind::ListOf(words) => {
                for item in split_list(value) {
                    if !words.iter().any(|w| w.eq_ignore_ascii_case(item)) {
                        return Err(format!("unknown item {item:?}"));
                    }
                }
                Ok(())
            }
            Kind::Cidrs => {
                for item in split_list(value) {
                    parse_cidr(item).ok_or_else(|| format!("{item:?} is not a CIDR"))?;
                }
                Ok(())
            }
        }
    }
}

/// One known key.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    /// The key's name.
    pub name: &'static str,
    /// What it accepts.
    pub kind: Kind,
}

const fn key(name: &'static str, kind: Kind) -> KeySpec {
    KeySpec { name, kind }
}

const INTERFACES: &[&str] = &[
    "public",
    "internal",
    "admin",
    "publicURL",
    "internalURL",
    "adminURL",
];
const LB_METHODS: &[&str] = &["ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"];

/// `[Global]`: where and how to log in (shared with cinder-csi and others upstream).
pub const GLOBAL: &[KeySpec] = &[
    key("auth-url", Kind::Url),
    key("user-id", Kind::Text),
    key("username", Kind::Text),
    key("password", Kind::Secret),
    key("region", Kind::Text),
    key("os-endpoint-type", Kind::OneOf(INTERFACES)),
    key("tenant-id", Kind::Text),
    key("tenant-name", Kind::Text),
    key("tenant-domain-id", Kind::Text),
    key("tenant-domain-name", Kind::Text),
    key("domain-id", Kind::Text),
    key("domain-name", Kind::Text),
    key("user-domain-id", Kind::Text),
    key("user-domain-name", Kind::Text),
    key("trust-id", Kind::Text),
    key("trustee-id", Kind::Text),
    key("trustee-password", Kind::Secret),
    key("application-credential-id", Kind::Text),
    key("application-credential-name", Kind::Text),
    key("application-credential-secret", Kind::Secret),
    key("token", Kind::Secret),
    key("ca-file", Kind::Text),
    key("cert-file", Kind::Text),
    key("key-file", Kind::Text),
    key("tls-insecure", Kind::Bool),
    key("use-clouds", Kind::Bool),
    key("clouds-file", Kind::Text),
    key("cloud", Kind::Text),
];

/// `[LoadBalancer]`: Services of type LoadBalancer on Octavia.
pub const LOAD_BALANCER: &[KeySpec] = &[
    key("enabled", Kind::Bool),
    key("lb-version", Kind::OneOf(&["v2"])),
    // The in-tree provider's switch; berth always uses Octavia.
    key("use-octavia", Kind::Bool),
    key("subnet-id", Kind::Text),
    key("member-subnet-id", Kind::Text),
    key("network-id", Kind::Text),
    key("floating-network-id", Kind::Text),
    key("floating-subnet-id", Kind::Text),
    key("floating-subnet", Kind::Text),
    key("floating-subnet-tags", Kind::Text),
    key("lb-method", Kind::OneOf(LB_METHODS)),
    key("lb-provider", Kind::Text),
    key("create-monitor", Kind::Bool),
    key("monitor-delay", Kind::Duration),
    key("monitor-timeout", Kind::Duration),
    key("monitor-max-retries", Kind::Int(1, 10)),
    key("monitor-max-retries-down", Kind::Int(1, 10)),
    key("manage-security-groups", Kind::Bool),
    key("internal-lb", Kind::Bool),
    key("node-selector", Kind::Text),
    key("cascade-delete", Kind::Bool),
    key("flavor-id", Kind::Text),
    key("availability-zone", Kind::Text),
    key("enable-ingress-hostname", Kind::Bool),
    key("ingress-hostname-suffix", Kind::Text),
    key("default-tls-container-ref", Kind::Text),
    key("container-store", Kind::OneOf(&["barbican", "external"])),
    key("max-shared-lb", Kind::Int(1, i64::MAX)),
    key("provider-requires-serial-api-calls", Kind::Bool),
];

/// `[LoadBalancerClass "name"]`: network choices a Service picks with the `class` annotation.
pub const LOAD_BALANCER_CLASS: &[KeySpec] = &[
    key("floating-network-id", Kind::Text),
    key("floating-subnet-id", Kind::Text),
    key("floating-subnet", Kind::Text),
    key("floating-subnet-tags", Kind::Text),
    key("network-id", Kind::Text),
    key("subnet-id", Kind::Text),
    key("member-subnet-id", Kind::Text),
];

/// `[Networking]`: which server addresses become which Node addresses.
pub const NETWORKING: &[KeySpec] = &[
    key("ipv6-support-disabled", Kind::Bool),
    key("public-network-name", Kind::Repeated),
    key("internal-network-name", Kind::Repeated),
    key("address-sort-order", Kind::Cidrs),
];

/// `[Route]`: pod-network routes on a Neutron router.
pub const ROUTE: &[KeySpec] = &[key("router-id", Kind::Text)];

/// `[Metadata]`: where a node finds its own instance.
pub const METADATA: &[KeySpec] = &[
    key("search-order", Kind::ListOf(&["configDrive", "metadataService"])),
    key("request-timeout", Kind::Duration),
];

/// `[BlockStorage]`: Cinder CSI.
pub const BLOCK_STORAGE: &[KeySpec] = &[
    key("node-volume-attach-limit", Kind::Int(1, 256)),
    key("rescan-on-resize", Kind::Bool),
    key("ignore-volume-az", Kind::Bool),
    key("ignore-volume-microversion", Kind::Bool),
];

/// Every section: its name as written upstream, whether it takes a `"subsection"`, its keys.
pub const SECTIONS: &[(&str, bool, &[KeySpec])] = &[
    ("Global", false, GLOBAL),
    ("LoadBalancer", false, LOAD_BALANCER),
    ("LoadBalancerClass", true, LOAD_BALANCER_CLASS),
    ("Networking", false, NETWORKING),
    ("Route", false, ROUTE),
    ("Metadata", false, METADATA),
    ("BlockStorage", false, BLOCK_STORAGE),
];

/// The validated values of one section, by key.
#[derive(Debug, Clone, Default)]
struct Values(BTreeMap<&'static str, Vec<(String, usize)>>);

impl Values {
    fn text(&self, key: &str) -> Option<String> {
        self.0
            .get(key)
            .and_then(|v| v.last())
            .map(|(s, _)| s.clone())
            .filter(|s| !s.is_empty())
    }
    fn all(&self, key: &str) -> Vec<String> {
        self.0
            .get(key)
            .map(|v| v.iter().map(|(s, _)| s.clone()).collect())
            .unwrap_or_default()
    }
    fn secret(&self, key: &str) -> Option<Secret> {
        self.text(key).map(Secret::new)
    }
    fn bool(&self, key: &str, default: bool) -> bool {
        self.text(key).and_then(|s| parse_bool(&s)).unwrap_or(default)
    }
    fn int(&self, key: &str, default: i64) -> i64 {
        self.text(key).and_then(|s| s.parse().ok()).unwrap_or(default)
    }
    fn duration(&self, key: &str, default: Duration) -> Duration {
        self.text(key)
            .and_then(|s| parse_duration(&s).ok())
            .unwrap_or(default)
    }
    /// The canonical spelling of a `OneOf` value.
    fn word(&self, key: &str, words: &[&'static str], default: &'static str) -> String {
        self.text(key)
            .and_then(|s| {
                words
                    .iter()
                    .find(|w| w.eq_ignore_ascii_case(&s))
                    .map(|w| (*w).to_owned())
            })
            .unwrap_or_else(|| default.to_owned())
    }
    fn line(&self, key: &str) -> Option<usize> {
        self.0.get(key).and_then(|v| v.last()).map(|(_, l)| *l)
    }
}

/// `[Global]`.
#[derive(Debug, Clone, Default)]
#[allow(missing_docs)] // the fields are the keys of GLOBAL, documented there and upstream
pub struct Global {
    pub auth_url: Option<String>,
    pub user_id: Option<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    pub region: Option<String>,
    pub endpoint_type: Option<String>,
    pub tenant_id: Option<String>,
    pub tenant_name: Option<String>,
    pub tenant_domain_id: Option<String>,
    pub tenant_domain_name: Option<String>,
    pub domain_id: Option<String>,
    pub domain_name: Option<String>,
    pub user_domain_id: Option<String>,
    pub user_domain_name: Option<String>,
    pub trust_id: Option<String>,
    pub trustee_id: Option<String>,
    pub trustee_password: Option<Secret>,
    pub application_credential_id: Option<String>,
    pub application_credential_name: Option<String>,
    pub application_credential_secret: Option<Secret>,
    pub token: Option<Secret>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub tls_insecure: bool,
    pub use_clouds: bool,
    pub clouds_file: Option<PathBuf>,
    pub cloud: Option<String>,
    /// Not a cloud.conf key: clouds.yaml's `<service>_endpoint_override`s, by service type.
    pub endpoint_overrides: BTreeMap<String, String>,
}

/// `[LoadBalancer]`, with upstream's defaults.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // the fields are the keys of LOAD_BALANCER
pub struct LoadBalancer {
    pub enabled: bool,
    pub subnet_id: Option<String>,
    pub member_subnet_id: Option<String>,
    pub network_id: Option<String>,
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    pub floating_subnet: Option<String>,
    pub floating_subnet_tags: Option<String>,
    pub lb_method: String,
    pub lb_provider: String,
    pub create_monitor: bool,
    pub monitor_delay: Duration,
    pub monitor_timeout: Duration,
    pub monitor_max_retries: i64,
    pub monitor_max_retries_down: i64,
    pub manage_security_groups: bool,
    pub internal_lb: bool,
    pub node_selector: Option<String>,
    pub cascade_delete: bool,
    pub flavor_id: Option<String>,
    pub availability_zone: Option<String>,
    pub enable_ingress_hostname: bool,
    pub ingress_hostname_suffix: String,
    pub default_tls_container_ref: Option<String>,
    pub container_store: String,
    pub max_shared_lb: i64,
    pub provider_requires_serial_api_calls: bool,
}

/// `[LoadBalancerClass "name"]`.
#[derive(Debug, Clone, Default)]
#[allow(missing_docs)] // the fields are the keys of LOAD_BALANCER_CLASS
pub struct LoadBalancerClass {
    pub floating_network_id: Option<String>,
    pub floating_subnet_id: Option<String>,
    pub floating_subnet: Option<String>,
    pub floating_subnet_tags: Option<String>,
    pub network_id: Option<String>,
    pub subnet_id: Option<String>,
    pub member_subnet_id: Option<String>,
}

/// `[Networking]`.
#[derive(Debug, Clone, Default)]
#[allow(missing_docs)] // the fields are the keys of NETWORKING
pub struct Networking {
    pub ipv6_support_disabled: bool,
    pub public_network_names: Vec<String>,
    pub internal_network_names: Vec<String>,
    pub address_sort_order: Vec<String>,
}

/// `[Route]`.
#[derive(Debug, Clone, Default)]
pub struct Route {
    /// The router that carries the pod-network routes; routes are off without it.
    pub router_id: Option<String>,
}

/// `[Metadata]`.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// Where to look, in order.
    pub search_order: Vec<String>,
    /// Upstream also uses this as every OpenStack call's timeout.
    pub request_timeout: Duration,
}

/// `[BlockStorage]`.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // the fields are the keys of BLOCK_STORAGE
pub struct BlockStorage {
    pub node_volume_attach_limit: i64,
    pub rescan_on_resize: bool,
    pub ignore_volume_az: bool,
    pub ignore_volume_microversion: bool,
}

/// A whole `cloud.conf`.
#[derive(Debug, Clone)]
pub struct CloudConfig {
    /// The file it came from.
    pub path: PathBuf,
    /// `[Global]`.
    pub global: Global,
    /// `[LoadBalancer]`.
    pub load_balancer: LoadBalancer,
    /// `[LoadBalancerClass "name"]` sections by name.
    pub load_balancer_classes: BTreeMap<String, LoadBalancerClass>,
    /// `[Networking]`.
    pub networking: Networking,
    /// `[Route]`.
    pub route: Route,
    /// `[Metadata]`.
    pub metadata: Metadata,
    /// `[BlockStorage]`.
    pub block_storage: BlockStorage,
    /// What was ignored, and why.
    pub warnings: Vec<Warning>,
}

impl CloudConfig {
    /// Reads `path`, with the `OS_*` variables as defaults under it and, when `use-clouds`
    /// is on, the cloud from clouds.yaml.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Self::parse(path, &text, &|k| std::env::var(k).ok())?;
        if config.global.use_clouds {
            config.merge_clouds_yaml(&|k| std::env::var(k).ok())?;
        }
        Ok(config)
    }

    /// Parses `text` (read from `path`, named in messages); `var` looks up `OS_*` variables.
    pub fn parse(path: &Path, text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let sections = ini::parse(text).map_err(|(line, reason)| Error::Syntax {
            path: path.to_owned(),
            line,
            reason,
        })?;
        let mut warnings = Vec::new();
        let mut plain: BTreeMap<&'static str, Values> = BTreeMap::new();
        let mut classes: BTreeMap<String, Values> = BTreeMap::new();
        for section in &sections {
            let Some((name, takes_sub, keys)) = SECTIONS
                .iter()
                .find(|(n, _, _)| n.eq_ignore_ascii_case(&section.name))
            else {
                let known: Vec<&str> = SECTIONS.iter().map(|(n, _, _)| *n).collect();
                warnings.push(Warning {
                    path: path.to_owned(),
                    line: section.line,
                    message: format!(
                        "unknown section [{}]{}; it is ignored (known sections: {})",
                        section.written_name,
                        suggestion(&section.name, &known),
                        known.join(", ")
                    ),
                });
                continue;
            };
            let values = match (takes_sub, &section.subsection) {
                (true, Some(sub)) => classes.entry(sub.clone()).or_default(),
                (true, None) => {
                    return Err(Error::Syntax {
                        path: path.to_owned(),
                        line: section.line,
                        reason: format!("[{name}] needs a name, like [{name} \"internal\"]"),
                    });
                }
                (false, Some(sub)) => {
                    return Err(Error::Syntax {
                        path: path.to_owned(),
                        line: section.line,
                        reason: format!("[{name}] takes no name, but [{name} \"{sub}\"] was written"),
                    });
                }
                (false, None) => plain.entry(name).or_default(),
            };
            for entry in &section.entries {
                let Some(spec) = keys.iter().find(|k| k.name == entry.key) else {
                    let names: Vec<&str> = keys.iter().map(|k| k.name).collect();
                    warnings.push(Warning {
                        path: path.to_owned(),
                        line: entry.line,
                        message: format!(
                            "unknown key {:?} in [{name}]{}; it is ignored",
                            entry.written_key,
                            suggestion(&entry.key, &names)
                        ),
                    });
                    continue;
                };
                if let Err(reason) = spec.kind.check(&entry.value) {
                    return Err(Error::InvalidValue(Box::new(crate::error::InvalidValue {
                        path: path.to_owned(),
                        line: entry.line,
                        section: (*name).to_owned(),
                        key: spec.name.to_owned(),
                        value: match spec.kind {
                            Kind::Secret => "<redacted>".to_owned(),
                            _ => format!("{:?}", entry.value),
                        },
                        reason,
                        accepted: spec.kind.accepted(),
                    })));
                }
                let slot = values.0.entry(spec.name).or_default();
                if let (Some((_, first)), false) = (slot.last(), matches!(spec.kind, Kind::Repeated)) {
                    warnings.push(Warning {
                        path: path.to_owned(),
                        line: entry.line,
                        message: format!(
                            "[{name}] {} is set again (first on line {first}); the last value counts",
                            spec.name
                        ),
                    });
                }
                slot.push((entry.value.clone(), entry.line));
            }
        }
        let empty = Values::default();
        let section = |n: &str| plain.get(n).unwrap_or(&empty);
        let mut config = CloudConfig {
            path: path.to_owned(),
            global: global(section("Global"), var),
            load_balancer: load_balancer(section("LoadBalancer")),
            load_balancer_classes: classes.iter().map(|(k, v)| (k.clone(), class(v))).collect(),
            networking: networking(section("Networking")),
            route: Route {
                router_id: section("Route").text("router-id"),
            },
            metadata: Metadata {
                search_order: {
                    let v = section("Metadata").text("search-order");
                    v.map(|s| split_list(&s).map(str::to_owned).collect())
                        .unwrap_or_else(|| vec!["configDrive".into(), "metadataService".into()])
                },
                request_timeout: section("Metadata").duration("request-timeout", Duration::from_secs(60)),
            },
            block_storage: BlockStorage {
                node_volume_attach_limit: section("BlockStorage").int("node-volume-attach-limit", 256),
                rescan_on_resize: section("BlockStorage").bool("rescan-on-resize", false),
                ignore_volume_az: section("BlockStorage").bool("ignore-volume-az", false),
                ignore_volume_microversion: section("BlockStorage").bool("ignore-volume-microversion", false),
            },
            warnings,
        };
        let lb = section("LoadBalancer");
        if let Some(provider) = lb.text("lb-provider") {
            const KNOWN: &[&str] = &["amphora", "octavia", "ovn", "f5", "amphorav2"];
            if !KNOWN.contains(&provider.as_str()) {
                config.warnings.push(Warning {
                    path: path.to_owned(),
                    line: lb.line("lb-provider").unwrap_or(0),
                    message: format!(
                        "[LoadBalancer] lb-provider {provider:?} is not one berth knows ({}); it is passed to Octavia as it is",
                        KNOWN.join(", ")
                    ),
                });
            }
        }
        // Upstream options berth reads but does not act on yet: said once, where they are.
        for (key, what) in [(
            "default-tls-container-ref",
            "berth makes no TLS-terminating listeners yet: the Services' ports stay TCP",
        )] {
            if lb.text(key).is_some() {
                config.warnings.push(Warning {
                    path: path.to_owned(),
                    line: lb.line(key).unwrap_or(0),
                    message: format!("[LoadBalancer] {key} is not supported yet: {what}"),
                });
            }
        }
        if lb.text("use-octavia").is_some() {
            config.warnings.push(Warning {
                path: path.to_owned(),
                line: lb.line("use-octavia").unwrap_or(0),
                message: "[LoadBalancer] use-octavia has no effect: berth always uses Octavia".into(),
            });
        }
        Ok(config)
    }

    /// Fills `[Global]` keys that the file left empty from the `clouds.yaml` cloud.
    pub fn merge_clouds_yaml(&mut self, var: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
        let (file, cloud) = clouds_yaml::find(
            self.global.clouds_file.as_deref(),
            self.global.cloud.as_deref(),
            var,
        )?;
        let g = &mut self.global;
        let a = &cloud.auth;
        fill(&mut g.auth_url, &a.auth_url);
        fill(&mut g.user_id, &a.user_id);
        fill(&mut g.username, &a.username);
        fill(&mut g.tenant_id, &a.project_id.clone().or(a.tenant_id.clone()));
        fill(
            &mut g.tenant_name,
            &a.project_name.clone().or(a.tenant_name.clone()),
        );
        fill(&mut g.tenant_domain_id, &a.project_domain_id);
        fill(&mut g.tenant_domain_name, &a.project_domain_name);
        fill(&mut g.user_domain_id, &a.user_domain_id);
        fill(&mut g.user_domain_name, &a.user_domain_name);
        fill(&mut g.domain_id, &a.domain_id);
        fill(&mut g.domain_name, &a.domain_name);
        fill(&mut g.application_credential_id, &a.application_credential_id);
        fill(&mut g.application_credential_name, &a.application_credential_name);
        fill(&mut g.trust_id, &a.trust_id);
        fill(&mut g.region, &cloud.region_name);
        fill(&mut g.endpoint_type, &cloud.interface);
        fill(&mut g.ca_file, &cloud.cacert.clone().map(PathBuf::from));
        if g.password.is_none() {
            g.password = a.password.clone().map(Secret::new);
        }
        if g.application_credential_secret.is_none() {
            g.application_credential_secret = a.application_credential_secret.clone().map(Secret::new);
        }
        if g.token.is_none() {
            g.token = a.token.clone().map(Secret::new);
        }
        if cloud.verify == Some(false) {
            g.tls_insecure = true;
        }
        g.endpoint_overrides = cloud.endpoint_overrides();
        let _ = file;
        Ok(())
    }

    /// The OpenStack client's credentials and options from `[Global]`.
    pub fn credentials(&self) -> Result<(Credentials, ClientOptions), Error> {
        let g = &self.global;
        let bad = |reason: String| Error::Inconsistent {
            path: self.path.clone(),
            reason,
        };
        let auth_url = g.auth_url.as_deref().ok_or_else(|| {
            bad("[Global] auth-url is not set (nor OS_AUTH_URL, nor in clouds.yaml)".into())
        })?;
        let auth_url = url::Url::parse(auth_url).map_err(|e| bad(format!("[Global] auth-url: {e}")))?;
        let user_domain = g
            .user_domain_id
            .clone()
            .map(DomainRef::Id)
            .or_else(|| g.user_domain_name.clone().map(DomainRef::Name))
            .or_else(|| g.domain_id.clone().map(DomainRef::Id))
            .or_else(|| g.domain_name.clone().map(DomainRef::Name));
        let user = |id: &Option<String>, name: &Option<String>| -> Result<NamedRef, Error> {
            match (id, name) {
                (Some(id), _) => Ok(NamedRef::Id(id.clone())),
                (None, Some(name)) => Ok(NamedRef::Name {
                    name: name.clone(),
                    domain: user_domain.clone().ok_or_else(|| {
                        bad(format!(
                            "[Global] username {name:?} needs its domain: set user-domain-name, user-domain-id, domain-name or domain-id"
                        ))
                    })?,
                }),
                (None, None) => Err(bad("[Global] sets neither user-id nor username".into())),
            }
        };
        let project_domain = g
            .tenant_domain_id
            .clone()
            .map(DomainRef::Id)
            .or_else(|| g.tenant_domain_name.clone().map(DomainRef::Name))
            .or_else(|| g.domain_id.clone().map(DomainRef::Id))
            .or_else(|| g.domain_name.clone().map(DomainRef::Name))
            .or_else(|| user_domain.clone());
        let project_scope = || -> Result<Scope, Error> {
            match (&g.tenant_id, &g.tenant_name) {
                (Some(id), _) => Ok(Scope::Project(NamedRef::Id(id.clone()))),
                (None, Some(name)) => Ok(Scope::Project(NamedRef::Name {
                    name: name.clone(),
                    domain: project_domain.clone().ok_or_else(|| {
                        bad(format!("[Global] tenant-name {name:?} needs tenant-domain-name, tenant-domain-id, domain-name or domain-id"))
                    })?,
                })),
                (None, None) => Ok(Scope::Default),
            }
        };
        let (method, scope) = if let Some(secret) = &g.application_credential_secret {
            let credential = match (&g.application_credential_id, &g.application_credential_name) {
                (Some(id), _) => ApplicationCredentialRef::Id(id.clone()),
                (None, Some(name)) => ApplicationCredentialRef::Name {
                    name: name.clone(),
                    user: user(&g.user_id, &g.username)?,
                },
                (None, None) => {
                    return Err(bad(
                        "[Global] application-credential-secret needs application-credential-id or application-credential-name".into(),
                    ));
                }
            };
            (
                AuthMethod::ApplicationCredential {
                    credential,
                    secret: secret.clone(),
                },
                Scope::Default,
            )
        } else if let Some(trust_id) = &g.trust_id {
            let password = g
                .trustee_password
                .clone()
                .or_else(|| g.password.clone())
                .ok_or_else(|| bad("[Global] trust-id needs trustee-password (or password)".into()))?;
            let trustee = match &g.trustee_id {
                Some(id) => NamedRef::Id(id.clone()),
                None => user(&g.user_id, &g.username)?,
            };
            (
                AuthMethod::Password {
                    user: trustee,
                    password,
                },
                Scope::Trust(trust_id.clone()),
            )
        } else if let Some(token) = &g.token {
            (AuthMethod::Token { token: token.clone() }, project_scope()?)
        } else {
            let password = g.password.clone().ok_or_else(|| {
                bad("[Global] sets no password, application-credential-secret, token or trust-id".into())
            })?;
            (
                AuthMethod::Password {
                    user: user(&g.user_id, &g.username)?,
                    password,
                },
                project_scope()?,
            )
        };
        let interface = match g.endpoint_type.as_deref() {
            None => Interface::Public,
            Some(s) => s
                .parse()
                .map_err(|e: berth_openstack::Error| bad(format!("[Global] os-endpoint-type: {e}")))?,
        };
        let options = ClientOptions {
            interface,
            region: g.region.clone(),
            // Upstream uses [Metadata] request-timeout as every call's timeout too.
            request_timeout: self.metadata.request_timeout,
            tls: berth_openstack::TlsOptions {
                ca_file: g.ca_file.clone(),
                cert_file: g.cert_file.clone(),
                key_file: g.key_file.clone(),
                insecure: g.tls_insecure,
            },
            endpoint_overrides: g.endpoint_overrides.clone().into_iter().collect(),
            ..ClientOptions::default()
        };
        Ok((
            Credentials {
                auth_url,
                method,
                scope,
            },
            options,
        ))
    }
}

fn fill<T: Clone>(slot: &mut Option<T>, value: &Option<T>) {
    if slot.is_none() {
        slot.clone_from(value);
    }
}

fn global(v: &Values, var: &dyn Fn(&str) -> Option<String>) -> Global {
    let from_env = env::global_defaults(var);
    let text = |key: &str| v.text(key).or_else(|| from_env.get(key).cloned());
    let secret = |key: &str| {
        v.secret(key)
            .or_else(|| from_env.get(key).cloned().map(Secret::new))
    };
    Global {
        auth_url: text("auth-url"),
        user_id: text("user-id"),
        username: text("username"),
        password: secret("password"),
        region: text("region"),
        endpoint_type: text("os-endpoint-type"),
        tenant_id: text("tenant-id"),
        tenant_name: text("tenant-name"),
        tenant_domain_id: text("tenant-domain-id"),
        tenant_domain_name: text("tenant-domain-name"),
        domain_id: text("domain-id"),
        domain_name: text("domain-name"),
        user_domain_id: text("user-domain-id"),
        user_domain_name: text("user-domain-name"),
        trust_id: text("trust-id"),
        trustee_id: text("trustee-id"),
        trustee_password: secret("trustee-password"),
        application_credential_id: text("application-credential-id"),
        application_credential_name: text("application-credential-name"),
        application_credential_secret: secret("application-credential-secret"),
        token: secret("token"),
        ca_file: text("ca-file").map(PathBuf::from),
        cert_file: text("cert-file").map(PathBuf::from),
        key_file: text("key-file").map(PathBuf::from),
        tls_insecure: v.bool("tls-insecure", false),
        use_clouds: v.bool("use-clouds", false),
        clouds_file: text("clouds-file").map(PathBuf::from),
        cloud: text("cloud"),
        endpoint_overrides: BTreeMap::new(),
    }
}

fn load_balancer(v: &Values) -> LoadBalancer {
    LoadBalancer {
        enabled: v.bool("enabled", true),
        subnet_id: v.text("subnet-id"),
        member_subnet_id: v.text("member-subnet-id"),
        network_id: v.text("network-id"),
        floating_network_id: v.text("floating-network-id"),
        floating_subnet_id: v.text("floating-subnet-id"),
        floating_subnet: v.text("floating-subnet"),
        floating_subnet_tags: v.text("floating-subnet-tags"),
        lb_method: v.word("lb-method", LB_METHODS, "ROUND_ROBIN"),
        lb_provider: v.text("lb-provider").unwrap_or_else(|| "amphora".into()),
        create_monitor: v.bool("create-monitor", false),
        monitor_delay: v.duration("monitor-delay", Duration::from_secs(5)),
        monitor_timeout: v.duration("monitor-timeout", Duration::from_secs(3)),
        monitor_max_retries: v.int("monitor-max-retries", 1),
        monitor_max_retries_down: v.int("monitor-max-retries-down", 3),
        manage_security_groups: v.bool("manage-security-groups", false),
        internal_lb: v.bool("internal-lb", false),
        node_selector: v.text("node-selector"),
        cascade_delete: v.bool("cascade-delete", true),
        flavor_id: v.text("flavor-id"),
        availability_zone: v.text("availability-zone"),
        enable_ingress_hostname: v.bool("enable-ingress-hostname", false),
        ingress_hostname_suffix: v
            .text("ingress-hostname-suffix")
            .unwrap_or_else(|| "nip.io".into()),
        default_tls_container_ref: v.text("default-tls-container-ref"),
        container_store: v.word("container-store", &["barbican", "external"], "barbican"),
        max_shared_lb: v.int("max-shared-lb", 2),
        provider_requires_serial_api_calls: v.bool("provider-requires-serial-api-calls", false),
    }
}

fn class(v: &Values) -> LoadBalancerClass {
    LoadBalancerClass {
        floating_network_id: v.text("floating-network-id"),
        floating_subnet_id: v.text("floating-subnet-id"),
        floating_subnet: v.text("floating-subnet"),
        floating_subnet_tags: v.text("floating-subnet-tags"),
        network_id: v.text("network-id"),
        subnet_id: v.text("subnet-id"),
        member_subnet_id: v.text("member-subnet-id"),
    }
}

fn networking(v: &Values) -> Networking {
    Networking {
        ipv6_support_disabled: v.bool("ipv6-support-disabled", false),
        public_network_names: v.all("public-network-name"),
        internal_network_names: v.all("internal-network-name"),
        address_sort_order: v
            .text("address-sort-order")
            .map(|s| split_list(&s).map(str::to_owned).collect())
            .unwrap_or_default(),
    }
}

/// ` (did you mean "x"?)` when a known name is close to `name`.
fn suggestion(name: &str, known: &[&str]) -> String {
    known
        .iter()
        .map(|k| {
            (
                strsim::levenshtein(&name.to_ascii_lowercase(), &k.to_ascii_lowercase()),
                k,
            )
        })
        .filter(|(d, k)| *d <= 3.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
}

fn split_list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|i| !i.is_empty())
}

/// gcfg's booleans.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Go's `time.ParseDuration` for what configs use: `5s`, `1m30s`, `1.5h`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err("empty".into());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("{s:?} has no number before {rest:?}"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("{:?} is not a number", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("{s:?} has no unit (s, m, h, ms…)")),
            other => return Err(format!("unknown unit {other:?}")),
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Ok(Duration::from_secs_f64(total))
}

fn parse_cidr(s: &str) -> Option<()> {
    let (addr, len) = s.split_once('/')?;
    let max = match addr.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(_) => 32,
        std::net::IpAddr::V6(_) => 128,
    };
    (len.parse::<u8>().ok()? <= max).then_some(())
}

#[cfg(test)]
mod tests;
