//! The command line as a user meets it, without a cloud.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use assert_cmd::Command;

fn berth() -> Command {
    Command::cargo_bin("berth").unwrap()
}

#[test]
fn help_lists_every_subcommand_and_version_is_the_crate_version() {
    let out = berth().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("check"), "{help}");
    let out = berth().arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        concat!("berth ", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn check_names_the_file_line_and_key_of_a_bad_value() {
    let dir = std::env::temp_dir().join(format!("berth-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("cloud.conf");
    std::fs::write(&conf, "[Global]\nauth-url = http://127.0.0.1:1/v3\npassword = hunter2\n\n[LoadBalancer]\nlb-method = FASTEST\n")
        .unwrap();
    let out = berth()
        .args(["check", "--cloud-config"])
        .arg(&conf)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!(
            "{}:6: [LoadBalancer] lb-method = \"FASTEST\"",
            conf.display()
        )),
        "{err}"
    );
    assert!(err.contains("ROUND_ROBIN"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_of_a_missing_file_says_which() {
    let out = berth()
        .args(["check", "--cloud-config", "/nonexistent/cloud.conf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("cannot read /nonexistent/cloud.conf")
    );
}
