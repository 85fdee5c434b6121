//! The webhook's Prometheus metrics (besides the OpenStack client's own
//! `berth_openstack_api_calls_total`, which counts every Keystone call).
//!
//! - `berth_keystone_token_reviews_total{result}`: `authenticated`, `not_keystone` (refused
//!   locally by the token's shape), `invalid` (Keystone said no), `unavailable` (Keystone could
//!   not be asked), `malformed` (not a review);
//! - `berth_keystone_token_cache_total{result}`: `hit`, `negative_hit`, `miss`, `shared` (waited
//!   for another review's Keystone call of the same token);
//! - `berth_keystone_validations_total{result}`: Keystone validations made (`valid`, `invalid`,
//!   `error`);
//! - `berth_keystone_access_reviews_total{decision}`: `allowed`, `denied`, `malformed`;
//! - `berth_keystone_policy_reloads_total{result}`, `berth_keystone_policy_rules`,
//!   `berth_keystone_policy_valid` (0 while the latest policy text is refused);
//! - `berth_keystone_sync_config_reloads_total{result}`, `berth_keystone_sync_config_valid` (0
//!   while the latest sync configuration from its ConfigMap is refused);
//! - `berth_keystone_review_duration_seconds{kind}`.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// A `result` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The outcome.
    pub result: String,
}

/// A `decision` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabel {
    /// The decision.
    pub decision: String,
}

/// A `kind` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `token` or `access`.
    pub kind: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    ])
}

/// The webhook's metrics; share one with an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    token_reviews: Family<ResultLabel, Counter>,
    cache: Family<ResultLabel, Counter>,
    validations: Family<ResultLabel, Counter>,
    access_reviews: Family<DecisionLabel, Counter>,
    policy_reloads: Family<ResultLabel, Counter>,
    policy_rules: Gauge,
    policy_valid: Gauge,
    sync_config_reloads: Family<ResultLabel, Counter>,
    sync_config_valid: Gauge,
    durations: Family<KindLabel, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Self {
            token_reviews: Family::default(),
            cache: Family::default(),
            validations: Family::default(),
            access_reviews: Family::default(),
            policy_reloads: Family::default(),
            policy_rules: Gauge::default(),
            policy_valid: Gauge::default(),
            sync_config_reloads: Family::default(),
            sync_config_valid: Gauge::default(),
            durations: Family::new_with_constructor(duration_histogram),
        };
        m.policy_valid.set(1);
        m.sync_config_valid.set(1);
        m
    }
}

fn label(s: &str) -> ResultLabel {
    ResultLabel { result: s.into() }
}

impl Metrics {
    /// Adds the metrics to `registry` (use the `berth` prefix).
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("keystone");
        sub.register(
            "token_reviews",
            "TokenReviews answered, by result",
            self.token_reviews.clone(),
        );
        sub.register(
            "token_cache",
            "Token cache lookups, by result",
            self.cache.clone(),
        );
        sub.register(
            "validations",
            "Keystone token validations made, by result",
            self.validations.clone(),
        );
        sub.register(
            "access_reviews",
            "SubjectAccessReviews answered, by decision",
            self.access_reviews.clone(),
        );
        sub.register(
            "policy_reloads",
            "Policy loads, by result",
            self.policy_reloads.clone(),
        );
        sub.register(
            "policy_rules",
            "Rules of the policy in force",
            self.policy_rules.clone(),
        );
        sub.register(
            "policy_valid",
            "1 when the latest policy text was accepted, 0 while it is refused (the previous one stays in force)",
            self.policy_valid.clone(),
        );
        sub.register(
            "sync_config_reloads",
            "Sync configuration loads, by result",
            self.sync_config_reloads.clone(),
        );
        sub.register(
            "sync_config_valid",
            "1 when the latest sync configuration was accepted, 0 while it is refused (the previous one stays in force)",
            self.sync_config_valid.clone(),
        );
        sub.register(
            "review_duration_seconds",
            "Time to answer a review, by kind",
            self.durations.clone(),
        );
    }

    /// Counts a TokenReview answer.
    pub fn token_review(&self, result: &str) {
        self.token_reviews.get_or_create(&label(result)).inc();
    }

    /// Counts a cache lookup.
    pub fn cache(&self, result: &str) {
        self.cache.get_or_create(&label(result)).inc();
    }

    /// Counts a Keystone validation.
    pub fn validation(&self, result: &str) {
        self.validations.get_or_create(&label(result)).inc();
    }

    /// Keystone validations made so far.
    pub fn validations(&self) -> u64 {
        ["valid", "invalid", "error"]
            .iter()
            .map(|r| self.validations.get_or_create(&label(r)).get())
            .sum()
    }

    /// Counts a SubjectAccessReview answer.
    pub fn access_review(&self, decision: &str) {
        self.access_reviews
            .get_or_create(&DecisionLabel {
                decision: decision.into(),
            })
            .inc();
    }

    /// Records a policy load.
    pub fn policy_loaded(&self, ok: bool, rules: Option<usize>) {
        self.policy_reloads
            .get_or_create(&label(if ok { "ok" } else { "error" }))
            .inc();
        self.policy_valid.set(i64::from(ok));
        if let Some(n) = rules {
            self.policy_rules.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Records a sync configuration load.
    pub fn sync_config_loaded(&self, ok: bool) {
        self.sync_config_reloads
            .get_or_create(&label(if ok { "ok" } else { "error" }))
            .inc();
        self.sync_config_valid.set(i64::from(ok));
    }

    /// Times a review.
    pub fn duration(&self, kind: &str, seconds: f64) {
        self.durations
            .get_or_create(&KindLabel { kind: kind.into() })
            .observe(seconds);
    }
}
