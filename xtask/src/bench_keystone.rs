//! `cargo xtask bench keystone`: TokenReviews per second and latency of `berth keystone-webhook`
//! on the testbed's Keystone, cached and uncached, beside a direct Keystone validation
//! (`GET /v3/auth/tokens`, what every uncached review needs at least) as the floor.
//!
//! Each of `--concurrency` workers reviews its own demo token `--reviews / concurrency` times
//! over HTTPS (keep-alive), so no two workers share a Keystone call. "Uncached" runs the webhook
//! with `--token-cache-size 0` (every review asks Keystone); "cached" with the defaults, tokens
//! warmed first.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use berth_e2e::{
    Testbed,
    keystone::{Webhook, WebhookOptions},
};
use berth_openstack::Secret;
use clap::Args;

use crate::paths;

#[derive(Args)]
pub(crate) struct Options {
    /// Reviews per run.
    #[arg(long, default_value_t = 4000)]
    reviews: usize,
    /// Concurrent clients (each with its own token).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

/// Throughput and latency of one run.
struct Run {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn summarize(mut latencies: Vec<Duration>, wall: Duration) -> Run {
    latencies.sort();
    let pick = |q: f64| {
        let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Run {
        per_second: latencies.len() as f64 / wall.as_secs_f64(),
        p50_ms: pick(0.50),
        p99_ms: pick(0.99),
    }
}

/// Runs `per_worker` calls of `call(worker)` on each worker concurrently.
async fn drive<F, Fut>(workers: usize, per_worker: usize, call: F) -> Result<Run>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let t = Instant::now();
                call(w).await?;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(summarize(all, started.elapsed()))
}

async fn reviews(
    webhook: std::sync::Arc<Webhook>,
    tokens: std::sync::Arc<Vec<Secret>>,
    o: &Options,
) -> Result<Run> {
    drive(o.concurrency, o.reviews / o.concurrency, move |w| {
        let webhook = webhook.clone();
        let tokens = tokens.clone();
        async move {
            let s = webhook.token_review("v1", tokens[w].expose()).await?;
            anyhow::ensure!(s["authenticated"] == true, "not authenticated: {s}");
            Ok(())
        }
    })
    .await
}

pub(crate) fn run(options: &Options) -> Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(bench(options))
}

async fn bench(o: &Options) -> Result<()> {
    let tb = Testbed::load()?;
    let binary = paths::cargo_target().join("release/berth");
    let admin = tb.openstack(&tb.admin).await?;
    let mut tokens = Vec::new();
    for _ in 0..o.concurrency {
        // A client per token: each logs in once.
        tokens.push(tb.openstack_demo().await?.token().await?.value.clone());
    }
    let tokens = std::sync::Arc::new(tokens);
    let result = async {
        // The floor: Keystone's own validation, same concurrency, keep-alive.
        let admin_token = admin.token().await?.value.clone();
        let url = format!("{}/auth/tokens?nocatalog", tb.auth_url.trim_end_matches('/'));
        let http = reqwest::Client::new();
        let floor = {
            let (tokens, http, url, admin_token) =
                (tokens.clone(), http.clone(), url.clone(), admin_token.clone());
            drive(o.concurrency, o.reviews / o.concurrency, move |w| {
                let (tokens, http, url, admin_token) =
                    (tokens.clone(), http.clone(), url.clone(), admin_token.clone());
                async move {
                    let r = http
                        .get(&url)
                        .header("x-auth-token", admin_token.expose())
                        .header("x-subject-token", tokens[w].expose())
                        .send()
                        .await?;
                    anyhow::ensure!(r.status().is_success(), "Keystone answered {}", r.status());
                    r.bytes().await?;
                    Ok(())
                }
            })
            .await?
        };
        let uncached = {
            let webhook = std::sync::Arc::new(
                Webhook::start(
                    &tb,
                    WebhookOptions {
                        binary: Some(binary.clone()),
                        args: vec!["--token-cache-size".into(), "0".into()],
                        ..WebhookOptions::default()
                    },
                )
                .await?,
            );
            let run = reviews(webhook.clone(), tokens.clone(), o).await?;
            let calls = webhook.keystone_validations().await?;
            println!("uncached: {calls} Keystone validations for {} reviews", o.reviews);
            run
        };
        let cached = {
            let webhook = std::sync::Arc::new(
                Webhook::start(
                    &tb,
                    WebhookOptions {
                        binary: Some(binary.clone()),
                        ..WebhookOptions::default()
                    },
                )
                .await?,
            );
            for t in tokens.iter() {
                webhook.token_review("v1", t.expose()).await?;
            }
            let run = reviews(webhook.clone(), tokens.clone(), o).await?;
            let calls = webhook.keystone_validations().await?;
            println!(
                "cached: {calls} Keystone validations for {} reviews (+ warm-up)",
                o.reviews
            );
            run
        };
        anyhow::Ok((floor, uncached, cached))
    }
    .await;
    for t in tokens.iter() {
        let _ = admin.identity().revoke_token(t).await;
    }
    let (floor, uncached, cached) = result.context("benchmark")?;
    println!(
        "\n{} TokenReviews, {} concurrent clients, each with its own demo token\n",
        o.reviews, o.concurrency
    );
    println!("| | reviews/s | p50 | p99 |\n|---|---|---|---|");
    for (name, r) in [
        ("Keystone GET /v3/auth/tokens, direct (the floor)", &floor),
        (
            "berth keystone-webhook, uncached (--token-cache-size 0)",
            &uncached,
        ),
        ("berth keystone-webhook, cached", &cached),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} ms | {:.2} ms |",
            r.per_second, r.p50_ms, r.p99_ms
        );
    }
    Ok(())
}
