//! Prometheus metrics of the OpenStack calls a client makes.
//!
//! `openstack_api_calls_total{service,method,status}` counts every HTTP exchange (retries and
//! logins included; `status` is the HTTP status, or `connect`/`timeout`/`error` when no answer came),
//! `openstack_api_call_duration_seconds{service,method}` times them, and
//! `openstack_logins_total` counts Keystone logins. Benchmarks read the same numbers.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

/// Labels of one call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The catalog type, e.g. `network`.
    pub service: String,
    /// The HTTP method.
    pub method: String,
    /// The HTTP status, or `connect`, `timeout`, `error`.
    pub status: String,
}

/// Labels of a call's duration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// The catalog type.
    pub service: String,
    /// The HTTP method.
    pub method: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

/// The metrics; share one between clients with an `Arc`.
#[derive(Debug)]
pub struct ApiMetrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    logins: Counter,
    total: AtomicU64,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            logins: Counter::default(),
            total: AtomicU64::new(0),
        }
    }
}

impl ApiMetrics {
    /// Adds the metrics to `registry` (under its prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "openstack_api_calls",
            "OpenStack API calls by service, method and status",
            self.calls.clone(),
        );
        registry.register(
            "openstack_api_call_duration_seconds",
            "How long OpenStack API calls took",
            self.latency.clone(),
        );
        registry.register("openstack_logins", "Keystone logins", self.logins.clone());
    }

    pub(crate) fn call(&self, service: &str, method: &str, status: &str, seconds: f64) {
        self.calls
            .get_or_create(&CallLabels {
                service: service.into(),
                method: method.into(),
                status: status.into(),
            })
            .inc();
        self.latency
            .get_or_create(&LatencyLabels {
                service: service.into(),
                method: method.into(),
            })
            .observe(seconds);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn login(&self) {
        self.logins.inc();
    }

    /// API calls so far (every service, retries and Keystone logins included).
    pub fn total_calls(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Calls so far with these labels.
    pub fn calls(&self, service: &str, method: &str, status: &str) -> u64 {
        self.calls
            .get_or_create(&CallLabels {
                service: service.into(),
                method: method.into(),
                status: status.into(),
            })
            .get()
    }

    /// Keystone logins so far.
    pub fn logins(&self) -> u64 {
        self.logins.get()
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn calls_are_counted_and_exported() {
        let m = ApiMetrics::default();
        m.call("network", "GET", "200", 0.01);
        m.call("network", "GET", "200", 0.02);
        m.call("compute", "POST", "timeout", 30.0);
        m.login();
        assert_eq!(m.total_calls(), 3);
        assert_eq!(m.calls("network", "GET", "200"), 2);
        let mut registry = Registry::with_prefix("berth");
        m.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"berth_openstack_api_calls_total{service="network",method="GET",status="200"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains("berth_openstack_logins_total 1"), "{text}");
    }
}
