//! cloud.conf parsing: upstream's keys and defaults, berth's errors and warnings.

use std::path::Path;

use berth_openstack::{
    Interface,
    auth::{ApplicationCredentialRef, AuthMethod, DomainRef, NamedRef, Scope},
};

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<CloudConfig, Error> {
    CloudConfig::parse(Path::new("/etc/kubernetes/cloud.conf"), text, &no_env)
}

const UPSTREAM_EXAMPLE: &str = r#"
[Global]
auth-url = "https://keystone.example:5000/v3"
username = "ccm"
password = "pa;ss#word"
user-domain-name = Default
tenant-name = k8s
tenant-domain-name = Default
region = RegionTwo
os-endpoint-type = internalURL

[LoadBalancer]
subnet-id = 6b2b5e2c-sub
floating-network-id = 2d1b-ext
lb-method = least_connections
create-monitor = yes
monitor-delay = 1m30s
monitor-max-retries = 2
manage-security-groups = true

[LoadBalancerClass "internal"]
subnet-id = 9c9c-int
member-subnet-id = 9c9c-mem

[Networking]
public-network-name = public
public-network-name = public2
internal-network-name = private
address-sort-order = 10.0.0.0/8, fd00::/8
ipv6-support-disabled = true

[Route]
router-id = r-1

[BlockStorage]
node-volume-attach-limit = 64
"#;

#[test]
fn upstream_keys_and_defaults() {
    let c = parse(UPSTREAM_EXAMPLE).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(
        c.global.auth_url.as_deref(),
        Some("https://keystone.example:5000/v3")
    );
    assert_eq!(
        c.global
            .password
            .as_ref()
            .map(|s| s.expose().to_owned())
            .as_deref(),
        Some("pa;ss#word")
    );
    let lb = &c.load_balancer;
    assert!(lb.enabled && lb.cascade_delete && lb.create_monitor && lb.manage_security_groups);
    assert_eq!(lb.lb_method, "LEAST_CONNECTIONS");
    assert_eq!(lb.monitor_delay, Duration::from_secs(90));
    assert_eq!(lb.monitor_timeout, Duration::from_secs(3), "upstream default");
    assert_eq!(lb.monitor_max_retries, 2);
    assert_eq!(lb.monitor_max_retries_down, 3, "upstream default");
    assert_eq!(lb.max_shared_lb, 2);
    assert_eq!(lb.lb_provider, "amphora");
    assert_eq!(lb.ingress_hostname_suffix, "nip.io");
    assert_eq!(
        c.load_balancer_classes["internal"].member_subnet_id.as_deref(),
        Some("9c9c-mem")
    );
    assert_eq!(c.networking.public_network_names, ["public", "public2"]);
    assert_eq!(c.networking.address_sort_order, ["10.0.0.0/8", "fd00::/8"]);
    assert_eq!(c.route.router_id.as_deref(), Some("r-1"));
    assert_eq!(c.metadata.search_order, ["configDrive", "metadataService"]);
    assert_eq!(c.metadata.request_timeout, Duration::from_secs(60));
    assert_eq!(c.block_storage.node_volume_attach_limit, 64);

    let (creds, options) = c.credentials().unwrap();
    assert_eq!(
        creds.method,
        AuthMethod::Password {
            user: NamedRef::Name {
                name: "ccm".into(),
                domain: DomainRef::Name("Default".into())
            },
            password: Secret::new("pa;ss#word"),
        }
    );
    assert_eq!(
        creds.scope,
        Scope::Project(NamedRef::Name {
            name: "k8s".into(),
            domain: DomainRef::Name("Default".into())
        })
    );
    assert_eq!(options.interface, Interface::Internal);
    assert_eq!(options.region.as_deref(), Some("RegionTwo"));
}

#[test]
fn unknown_keys_and_sections_are_warnings_with_suggestions() {
    let c = parse("[Global]\nauth-url = http://k/v3\nusername = u\nuser-domian-name = Default\n[Loadbalancer]\nsubnetid = x\n[Extra]\na = b\n").unwrap();
    let messages: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(messages[0].starts_with("/etc/kubernetes/cloud.conf:4: unknown key \"user-domian-name\" in [Global] (did you mean \"user-domain-name\"?)"), "{}", messages[0]);
    assert!(messages[1].starts_with("/etc/kubernetes/cloud.conf:6: unknown key \"subnetid\" in [LoadBalancer] (did you mean \"subnet-id\"?)"), "{}", messages[1]);
    assert!(
        messages[2].contains(":7: unknown section [Extra]"),
        "{}",
        messages[2]
    );
    // section names are case-insensitive, as in gcfg: [Loadbalancer] is [LoadBalancer]
    assert!(c.warnings.iter().all(|w| !w.message.contains("[Loadbalancer]")));
}

#[test]
fn invalid_values_name_file_line_key_and_accepted_values() {
    let err = parse("[Global]\nauth-url = http://k/v3\n\n[LoadBalancer]\nlb-method = FASTEST\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/kubernetes/cloud.conf:5: [LoadBalancer] lb-method = \"FASTEST\": unknown value; accepted: ROUND_ROBIN, LEAST_CONNECTIONS, SOURCE_IP, SOURCE_IP_PORT"
    );
    let err = parse("[LoadBalancer]\ncreate-monitor = maybe\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(":2: [LoadBalancer] create-monitor = \"maybe\""),
        "{err}"
    );
    assert!(err.contains("true, false"), "{err}");
    let err = parse("[LoadBalancer]\nmonitor-delay = 5\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no unit") && err.contains("such as 5s"), "{err}");
    let err = parse("[BlockStorage]\nnode-volume-attach-limit = 300\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("from 1 to 256"), "{err}");
    let err = parse("[Global]\nauth-url = keystone:5000\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("http:// or https://"), "{err}");
    let err = parse("[Networking]\naddress-sort-order = 10.0.0.0/33\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a CIDR"), "{err}");
}

#[test]
fn secrets_never_appear_in_errors_or_debug() {
    let err = parse("[Global]\npassword = \"\"\n").unwrap_err().to_string();
    assert!(err.contains("password = <redacted>"), "{err}");
    let c = parse(
        "[Global]\nauth-url=http://k/v3\nuser-id=u\npassword=hunter2\napplication-credential-secret=s3cr3t\n",
    )
    .unwrap();
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter2") && !debug.contains("s3cr3t"), "{debug}");
}

#[test]
fn syntax_errors_name_the_line() {
    let err = parse("[Global]\nauth-url = http://k/v3\n[LoadBalancer\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("/etc/kubernetes/cloud.conf:3: "), "{err}");
    let err = parse("[LoadBalancerClass]\nsubnet-id = x\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs a name"), "{err}");
}

#[test]
fn repeated_single_keys_warn_and_the_last_wins() {
    let c = parse("[Route]\nrouter-id = a\nrouter-id = b\n").unwrap();
    assert_eq!(c.route.router_id.as_deref(), Some("b"));
    assert!(
        c.warnings[0]
            .to_string()
            .contains(":3: [Route] router-id is set again (first on line 2)")
    );
}

#[test]
fn application_credentials_by_id_and_by_name() {
    let c = parse("[Global]\nauth-url=http://k/v3\napplication-credential-id=ac1\napplication-credential-secret=s\ntenant-name=ignored\n").unwrap();
    let (creds, _) = c.credentials().unwrap();
    assert!(
        matches!(creds.method, AuthMethod::ApplicationCredential { credential: ApplicationCredentialRef::Id(ref id), .. } if id == "ac1")
    );
    assert_eq!(creds.scope, Scope::Default);

    let c = parse("[Global]\nauth-url=http://k/v3\napplication-credential-name=ccm\nusername=u\ndomain-name=D\napplication-credential-secret=s\n").unwrap();
    let (creds, _) = c.credentials().unwrap();
    assert!(matches!(creds.method, AuthMethod::ApplicationCredential {
        credential: ApplicationCredentialRef::Name { ref name, user: NamedRef::Name { .. } }, .. } if name == "ccm"));
}

#[test]
fn trust_and_token() {
    let c =
        parse("[Global]\nauth-url=http://k/v3\ntrust-id=t1\ntrustee-id=tu\ntrustee-password=p\n").unwrap();
    let (creds, _) = c.credentials().unwrap();
    assert_eq!(creds.scope, Scope::Trust("t1".into()));
    assert!(matches!(creds.method, AuthMethod::Password { user: NamedRef::Id(ref id), .. } if id == "tu"));
    let c = parse("[Global]\nauth-url=http://k/v3\ntoken=tok\ntenant-id=p1\n").unwrap();
    let (creds, _) = c.credentials().unwrap();
    assert!(matches!(creds.method, AuthMethod::Token { .. }));
    assert_eq!(creds.scope, Scope::Project(NamedRef::Id("p1".into())));
}

#[test]
fn missing_pieces_are_explained() {
    let err = parse("[Global]\nauth-url=http://k/v3\nusername=u\npassword=p\n")
        .unwrap()
        .credentials()
        .unwrap_err();
    assert!(
        err.to_string().contains("username \"u\" needs its domain"),
        "{err}"
    );
    let err = parse("[Global]\nusername=u\n")
        .unwrap()
        .credentials()
        .unwrap_err();
    assert!(err.to_string().contains("auth-url is not set"), "{err}");
    let err = parse("[Global]\nauth-url=http://k/v3\nuser-id=u\n")
        .unwrap()
        .credentials()
        .unwrap_err();
    assert!(err.to_string().contains("sets no password"), "{err}");
}

#[test]
fn os_variables_are_defaults_under_the_file() {
    let env = |k: &str| match k {
        "OS_AUTH_URL" => Some("http://from-env/v3".to_owned()),
        "OS_USERNAME" => Some("env-user".to_owned()),
        "OS_PASSWORD" => Some("env-pass".to_owned()),
        "OS_USER_DOMAIN_NAME" => Some("Default".to_owned()),
        "OS_PROJECT_ID" => Some("p-env".to_owned()),
        _ => None,
    };
    let c = CloudConfig::parse(Path::new("c.conf"), "[Global]\nusername = file-user\n", &env).unwrap();
    assert_eq!(c.global.auth_url.as_deref(), Some("http://from-env/v3"));
    assert_eq!(c.global.username.as_deref(), Some("file-user"), "the file wins");
    assert_eq!(c.global.tenant_id.as_deref(), Some("p-env"));
}

#[test]
fn clouds_yaml_fills_what_the_file_leaves_out() {
    let dir = std::env::temp_dir().join(format!("berth-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clouds = dir.join("clouds.yaml");
    std::fs::write(
        &clouds,
        "clouds:\n  mycloud:\n    auth:\n      auth_url: http://yaml/v3\n      username: yaml-user\n      password: yaml-pass\n      project_name: demo\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: internal\n    load_balancer_endpoint_override: http://proxy:9877/\n  other:\n    auth: {}\n",
    )
    .unwrap();
    let text = format!(
        "[Global]\nuse-clouds = true\nclouds-file = {}\ncloud = mycloud\nregion = FromFile\n",
        clouds.display()
    );
    let mut c = CloudConfig::parse(Path::new("c.conf"), &text, &no_env).unwrap();
    c.merge_clouds_yaml(&no_env).unwrap();
    let (creds, options) = c.credentials().unwrap();
    assert_eq!(creds.auth_url.as_str(), "http://yaml/v3");
    assert_eq!(options.region.as_deref(), Some("FromFile"), "explicit keys win");
    assert_eq!(options.interface, Interface::Internal);
    assert_eq!(
        options
            .endpoint_overrides
            .get("load-balancer")
            .map(String::as_str),
        Some("http://proxy:9877/"),
        "clouds.yaml's load_balancer_endpoint_override reaches the client"
    );
    assert_eq!(options.endpoint_overrides.len(), 1);

    c.global.cloud = Some("nope".into());
    c.global.auth_url = None;
    let err = c.merge_clouds_yaml(&no_env).unwrap_err().to_string();
    assert!(
        err.contains("has no cloud \"nope\" (it has: mycloud, other)"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn durations_like_go() {
    assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("5d").is_err());
}

#[test]
fn options_berth_does_not_act_on_yet_are_warnings_with_their_line() {
    let c = parse("[Global]\nauth-url = http://k/v3\n[LoadBalancer]\nsubnet-id = s\nmax-shared-lb = 3\ndefault-tls-container-ref = x\nprovider-requires-serial-api-calls = true\n").unwrap();
    let messages: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].starts_with(
            "/etc/kubernetes/cloud.conf:6: [LoadBalancer] default-tls-container-ref is not supported yet"
        ),
        "{}",
        messages[0]
    );
    // Acted on: no warning.
    assert!(c.load_balancer.provider_requires_serial_api_calls);
    assert_eq!(c.load_balancer.max_shared_lb, 3);
}
