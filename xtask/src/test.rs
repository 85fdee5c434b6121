//! `cargo xtask test`: what CI runs. Format and lint checks, unit tests, then the e2e tests on
//! a fresh testbed, then a check that they left nothing behind.

use std::process::Command;

use anyhow::Result;
use clap::Args;

use crate::{
    leaks,
    run::{Stopwatch, exec},
    testbed,
};

#[derive(Args)]
pub(crate) struct Options {
    /// Skip `cargo fmt --check` and `cargo clippy -D warnings`.
    #[arg(long)]
    no_lint: bool,
    /// Only the unit tests: no testbed, no e2e tests.
    #[arg(long)]
    unit: bool,
    /// Reuse a running testbed instead of starting a fresh one.
    #[arg(long)]
    reuse_testbed: bool,
    /// Leave the testbed running afterwards.
    #[arg(long)]
    keep: bool,
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn have_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `cargo nextest run` (or `cargo test` where nextest is missing) with these selection args.
fn test_command(select: &[&str]) -> Command {
    let mut cmd = cargo();
    if have_nextest() {
        cmd.args(["nextest", "run", "--no-fail-fast"]).args(select);
    } else {
        cmd.arg("test").args(select);
    }
    cmd
}

pub(crate) fn run(options: &Options) -> Result<()> {
    let total = Stopwatch::start();
    if !options.no_lint {
        exec(cargo().args(["fmt", "--all", "--", "--check"]))?;
        exec(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    }
    exec(&mut test_command(&["--workspace", "--exclude", "berth-e2e"]))?;
    if options.unit {
        return Ok(());
    }

    let up = testbed::UpOptions {
        fresh: !options.reuse_testbed,
        ..Default::default()
    };
    testbed::up(&up)?;
    // The e2e tests run the berth binary as a user would: the unit phase built it (for
    // crates/berth/tests), with the same features, so no separate build is needed.
    let e2e = exec(&mut test_command(&["--package", "berth-e2e"]));
    let leftovers = leaks::find();
    if !options.keep {
        testbed::down(false)?;
    }
    // Leftovers are reported even when a test failed: they say what it did not clean up.
    let leftovers = leftovers.and_then(|found| leaks::report(&found));
    e2e?;
    leftovers?;
    eprintln!("all tests passed in {:.0}s", total.secs());
    Ok(())
}
