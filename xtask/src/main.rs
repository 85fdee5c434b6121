//! `cargo xtask`: berth's developer tasks.
//!
//! - `testbed up|down|status`: the local testbed (real OpenStack and Kubernetes on loopback);
//! - `demo`: berth's main job on the testbed;
//! - `test`: every check and test, unit and end-to-end, as CI runs them;
//! - `leaks`: what e2e tests left in OpenStack or Kubernetes.

mod bench;
mod bench_keystone;
mod bench_lb;
mod demo;
mod leaks;
mod paths;
mod run;
mod test;
mod testbed;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "berth's developer tasks", version)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Start, stop or inspect the local testbed.
    Testbed {
        #[command(subcommand)]
        action: testbed::Action,
    },
    /// Run berth's main job on the local testbed (starting it first).
    Demo,
    /// Run every check and test: format, lints, unit tests, then e2e tests on a fresh testbed.
    Test(test::Options),
    /// Benchmarks against kube-controller-manager 1.20's in-tree OpenStack provider.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// List what e2e tests left behind in OpenStack and Kubernetes; fails if anything.
    Leaks {
        /// Delete the leftovers instead (after a failed run).
        #[arg(long)]
        delete: bool,
    },
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Node initialisation and pod-network routes for N hollow nodes (builds berth --release).
    Nodes(bench::Options),
    /// LoadBalancer Services on Octavia: ingress, node join, idle, delete (builds berth --release).
    Lb(bench_lb::Options),
    /// TokenReviews per second and latency of berth keystone-webhook, cached and uncached,
    /// against a direct Keystone validation (builds berth --release; needs a running testbed).
    Keystone(bench_keystone::Options),
}

fn main() -> Result<()> {
    berth_openstack::install_crypto_provider();
    match Cli::parse().task {
        Task::Testbed { action } => testbed::run(action),
        Task::Demo => demo::run(),
        Task::Test(options) => test::run(&options),
        Task::Bench {
            what: BenchWhat::Nodes(options),
        } => {
            build_berth_release()?;
            bench::run(&options)
        }
        Task::Bench {
            what: BenchWhat::Lb(options),
        } => {
            build_berth_release()?;
            bench_lb::run(&options)
        }
        Task::Bench {
            what: BenchWhat::Keystone(options),
        } => {
            build_berth_release()?;
            bench_keystone::run(&options)
        }
        Task::Leaks { delete: false } => leaks::report(&leaks::find()?),
        Task::Leaks { delete: true } => leaks::delete(),
    }
}

/// `cargo build --release -p berth`: the benchmarks run the release binary.
fn build_berth_release() -> Result<()> {
    run::exec(
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())).args([
            "build",
            "--release",
            "--package",
            "berth",
        ]),
    )
}
