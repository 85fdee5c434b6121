//! Running commands with their output shown, failing loudly.

use std::{
    process::{Child, Command},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

/// Runs `cmd`, showing its output; fails with the command line if it fails.
pub(crate) fn exec(cmd: &mut Command) -> Result<()> {
    let shown = show(cmd);
    eprintln!("==> {shown}");
    let status = cmd.status().with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// Starts `cmd` in the background, showing its output.
pub(crate) fn spawn(cmd: &mut Command) -> Result<(String, Child)> {
    let shown = show(cmd);
    eprintln!("==> {shown} (in the background)");
    let child = cmd.spawn().with_context(|| format!("cannot start {shown}"))?;
    Ok((shown, child))
}

/// Waits for a command started by [`spawn`].
pub(crate) fn wait(shown: &str, mut child: Child) -> Result<()> {
    let status = child.wait().with_context(|| format!("waiting for {shown}"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Times a step and reports it.
pub(crate) struct Stopwatch(Instant);

impl Stopwatch {
    pub(crate) fn start() -> Self {
        Self(Instant::now())
    }

    pub(crate) fn secs(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}
