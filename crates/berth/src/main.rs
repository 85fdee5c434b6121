//! The `berth` command: Kubernetes on OpenStack.
//!
//! `main` only parses the command line, sets up logging and the TLS provider, and hands over
//! to the subcommand's module.

mod check;
mod gc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "berth",
    version,
    about = "Kubernetes on OpenStack",
    propagate_version = true
)]
struct Cli {
    /// Log filter, e.g. `info`, `debug`, `berth_openstack=debug` (RUST_LOG works too).
    #[arg(long, global = true, env = "BERTH_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a cloud.conf, log in, and tell which berth features this cloud supports.
    Check(check::Args),
    /// Run the cloud controller (for kubelets with --cloud-provider=external): node
    /// initialisation and lifecycle, pod-network routes and LoadBalancer Services.
    CloudController(Box<berth_controller::process::Args>),
    /// Delete the load balancers, floating IPs and security groups berth made for Services
    /// that no longer exist.
    Gc(gc::Args),
    /// Serve kube-apiserver's TokenReview and SubjectAccessReview webhooks with Keystone.
    KeystoneWebhook(Box<berth_keystone::webhook::Args>),
    /// kubectl exec credential plugin: print a Keystone token as an ExecCredential.
    KeystoneLogin(Box<berth_keystone::login::Args>),
}

fn main() -> ExitCode {
    // One rustls crypto provider for every TLS client in the process.
    berth_openstack::install_crypto_provider();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("berth: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Check(args) => runtime.block_on(check::run(args)),
        Command::Gc(args) => runtime.block_on(gc::run(args)),
        Command::CloudController(args) => runtime
            .block_on(berth_controller::process::run(*args))
            .map(|()| ExitCode::SUCCESS),
        Command::KeystoneWebhook(args) => runtime
            .block_on(berth_keystone::webhook::run(*args))
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::KeystoneLogin(args) => runtime
            .block_on(berth_keystone::login::run(*args))
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("berth: {e:#}");
            ExitCode::FAILURE
        }
    }
}
