//! What users read when their cloud.conf is wrong: snapshots of every kind of message.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use berth_config::CloudConfig;

fn no_env(_: &str) -> Option<String> {
    None
}

fn outcome(text: &str) -> String {
    match CloudConfig::parse(Path::new("/etc/kubernetes/cloud.conf"), text, &no_env) {
        Err(e) => format!("error: {e}"),
        Ok(c) => {
            let mut out: Vec<String> = c.warnings.iter().map(|w| format!("warning: {w}")).collect();
            if let Err(e) = c.credentials() {
                out.push(format!("error: {e}"));
            }
            out.join("\n")
        }
    }
}

#[test]
fn error_and_warning_messages() {
    let cases = [
        (
            "syntax: unclosed section",
            "[Global]\nauth-url = http://k/v3\n[LoadBalancer\n",
        ),
        ("syntax: key before any section", "auth-url = http://k/v3\n"),
        ("syntax: unquoted subsection", "[LoadBalancerClass internal]\n"),
        (
            "syntax: class without name",
            "[LoadBalancerClass]\nsubnet-id = x\n",
        ),
        ("syntax: unterminated quote", "[Global]\nusername = \"demo\n"),
        ("bad enum", "[LoadBalancer]\nlb-method = FASTEST\n"),
        ("bad bool", "[LoadBalancer]\ncreate-monitor = maybe\n"),
        ("bad duration", "[LoadBalancer]\nmonitor-delay = 5\n"),
        ("bad range", "[BlockStorage]\nnode-volume-attach-limit = 300\n"),
        ("bad url", "[Global]\nauth-url = ftp://k/v3\n"),
        (
            "bad cidr list",
            "[Networking]\naddress-sort-order = 10.0.0.0/8, fd00::/200\n",
        ),
        (
            "bad list item",
            "[Metadata]\nsearch-order = configDrive, cloudInit\n",
        ),
        ("empty secret", "[Global]\npassword = \"\"\n"),
        (
            "unknown keys and sections",
            "[Global]\nauth-url = http://k/v3\nuser-id = u\npassword = p\nuser-domian-name = D\n[Loadbalancer]\nsubnetid = s\n[Routes]\nrouter-id = r\n",
        ),
        (
            "repeated key",
            "[Global]\nauth-url = http://k/v3\nuser-id = u\npassword = p\n[Route]\nrouter-id = a\nrouter-id = b\n",
        ),
        (
            "unknown provider",
            "[Global]\nauth-url = http://k/v3\nuser-id = u\npassword = p\n[LoadBalancer]\nlb-provider = haproxy\n",
        ),
        ("no auth url", "[Global]\nusername = u\n"),
        (
            "username without domain",
            "[Global]\nauth-url = http://k/v3\nusername = u\npassword = p\n",
        ),
        (
            "no secret at all",
            "[Global]\nauth-url = http://k/v3\nuser-id = u\n",
        ),
        (
            "application credential without id or name",
            "[Global]\nauth-url = http://k/v3\napplication-credential-secret = s\n",
        ),
        (
            "trust without password",
            "[Global]\nauth-url = http://k/v3\ntrust-id = t\ntrustee-id = u\n",
        ),
    ];
    let report: String = cases
        .iter()
        .map(|(what, text)| format!("## {what}\n{}\n", outcome(text)))
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(report);
}
