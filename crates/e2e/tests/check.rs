//! `berth check` against the real testbed, as a user runs it.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{path::PathBuf, process::Output};

use berth_e2e::Testbed;

fn berth() -> std::process::Command {
    std::process::Command::new(berth_e2e::berth_binary().unwrap())
}

fn check(conf: &PathBuf) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = berth()
        .args(["check", "--cloud-config"])
        .arg(conf)
        .env_remove("OS_CLOUD")
        .output()
        .unwrap();
    (
        status.code(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

/// The testbed's cloud.conf with `edit` applied, in a file of its own.
fn variant(tb: &Testbed, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(&tb.cloud_conf).unwrap();
    let path = std::env::temp_dir().join(format!("berth-e2e-{name}-{}.conf", std::process::id()));
    std::fs::write(&path, edit(text)).unwrap();
    path
}

#[test]
fn check_accepts_the_testbed_and_enables_every_feature() {
    let tb = Testbed::load().unwrap();
    let (code, out, err) = check(&tb.cloud_conf);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains(&format!("project demo ({})", tb.tenant.project_id)),
        "{out}"
    );
    assert!(out.contains("extraroute-atomic      yes"), "{out}");
    for feature in ["nodes", "load-balancers", "routes", "block-storage"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(feature) && l.contains("enabled")),
            "{feature} not enabled:\n{out}"
        );
    }
    assert!(out.contains(&tb.tenant.router_id), "{out}");
    assert!(out.ends_with("verdict: ok\n"), "{out}");
}

#[test]
fn check_reports_a_router_that_does_not_exist() {
    let tb = Testbed::load().unwrap();
    let conf = variant(&tb, "router", |t| {
        t.replace(&tb.tenant.router_id, "00000000-0000-0000-0000-000000000000")
    });
    let (code, out, err) = check(&conf);
    assert_eq!(code, Some(2), "stdout:\n{out}\nstderr:\n{err}");
    let routes = out
        .lines()
        .find(|l| l.trim_start().starts_with("routes"))
        .unwrap();
    assert!(routes.contains("BROKEN") && routes.contains("404"), "{routes}");
    std::fs::remove_file(conf).unwrap();
}

#[test]
fn check_with_a_wrong_password_fails_without_showing_it() {
    let tb = Testbed::load().unwrap();
    let conf = variant(&tb, "password", |t| {
        t.replace(
            &format!("password = {}", tb.demo.password.expose()),
            "password = wrong-Pa55word",
        )
    });
    let (code, out, err) = check(&conf);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("login to Keystone at http://127.0.0.1:5000/v3 failed (401"),
        "{err}"
    );
    assert!(!err.contains("wrong-Pa55word") && !out.contains("wrong-Pa55word"));
    std::fs::remove_file(conf).unwrap();
}
