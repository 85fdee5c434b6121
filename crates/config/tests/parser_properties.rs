//! Properties of the cloud.conf reader: it never panics, and what is written is what is read.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{path::Path, time::Duration};

use berth_config::CloudConfig;
use proptest::prelude::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<CloudConfig, berth_config::Error> {
    CloudConfig::parse(Path::new("cloud.conf"), text, &no_env)
}

/// A value written the way gcfg reads it back: quoted, with `"` and `\` escaped.
fn quote(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Lines that look like cloud.conf, to reach deeper than random bytes do.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\[[A-Za-z]{0,14}( \"[^\"\n]{0,8}\")?\\]",
        "[a-z-]{1,20} *= *[^\n]{0,30}",
        "[;#][^\n]{0,20}",
        "[^\n]{0,40}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC{0,400}") {
        let _ = parse(&text);
    }

    #[test]
    fn never_panics_on_config_like_text(lines in proptest::collection::vec(line(), 0..30)) {
        let _ = parse(&lines.join("\n"));
    }

    #[test]
    fn any_text_value_round_trips_through_quoting(value in "[^\n\r]{1,60}", router in "[A-Za-z0-9-]{1,36}") {
        let text = format!("[Global]\nauth-url = http://k/v3\ntenant-name = {}\n[Route]\nrouter-id = {router}\n", quote(&value));
        let c = parse(&text).unwrap();
        // surrounding white space of a quoted value is kept; an all-blank value reads as unset
        if value.trim().is_empty() {
            prop_assert!(c.global.tenant_name.is_none() || c.global.tenant_name.as_deref() == Some(value.as_str()));
        } else {
            prop_assert_eq!(c.global.tenant_name.as_deref(), Some(value.as_str()));
        }
        prop_assert_eq!(c.route.router_id.as_deref(), Some(router.as_str()));
    }

    #[test]
    fn load_balancer_settings_round_trip(
        method in prop::sample::select(vec!["ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"]),
        monitor in any::<bool>(),
        delay_s in 1u64..3600,
        retries in 1i64..=10,
        shared in 1i64..1000,
        subnet in "[a-f0-9-]{1,36}",
        lower in any::<bool>(),
    ) {
        let m = if lower { method.to_ascii_lowercase() } else { method.to_owned() };
        let text = format!(
            "[LoadBalancer]\nlb-method = {m}\ncreate-monitor = {monitor}\nmonitor-delay = {delay_s}s\nmonitor-max-retries = {retries}\nmax-shared-lb = {shared}\nsubnet-id = {subnet}\n"
        );
        let c = parse(&text).unwrap();
        let lb = &c.load_balancer;
        prop_assert_eq!(lb.lb_method.as_str(), method);
        prop_assert_eq!(lb.create_monitor, monitor);
        prop_assert_eq!(lb.monitor_delay, Duration::from_secs(delay_s));
        prop_assert_eq!(lb.monitor_max_retries, retries);
        prop_assert_eq!(lb.max_shared_lb, shared);
        prop_assert_eq!(lb.subnet_id.as_deref(), Some(subnet.as_str()));
        prop_assert!(c.warnings.is_empty());
    }
}
