//! Where things are: the repository, the testbed's state, the caches outside the clone.

use std::path::PathBuf;

/// The repository's root.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The testbed's state: `$BERTH_TESTBED`, default `/tmp/berth-testbed`.
pub(crate) fn testbed_dir() -> PathBuf {
    std::env::var_os("BERTH_TESTBED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/berth-testbed"))
}

/// Caches kept between runs (venv, Kubernetes build): `$BERTH_CACHE`, default `~/.cache/berth`.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BERTH_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/berth")
}

/// The Kubernetes binaries built by `testbed/kubernetes/build.sh`.
pub(crate) fn kube_bin() -> PathBuf {
    std::env::var_os("KUBE_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("kube-1.20.2"))
        .join("bin")
}

/// The OpenStack venv made by `testbed/openstack/up.sh`.
pub(crate) fn venv() -> PathBuf {
    std::env::var_os("OSBED_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("openstack-venv"))
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `target/` in the repository).
pub(crate) fn cargo_target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
}
