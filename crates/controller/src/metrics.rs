//! The cloud controller's Prometheus metrics (besides the OpenStack client's own).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

/// Labels of a reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReconcileLabels {
    /// `node` or `route`.
    pub controller: String,
    /// `ok`, or the error's kind.
    pub result: String,
}

/// Counters and gauges.
#[derive(Debug, Default)]
pub struct Metrics {
    reconciles: Family<ReconcileLabels, Counter>,
    node_deletions: Counter,
    routes: Gauge,
    leader: Gauge,
}

impl Metrics {
    /// Adds the metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles by controller and result",
            self.reconciles.clone(),
        );
        registry.register(
            "node_deletions",
            "Nodes deleted because their server is gone",
            self.node_deletions.clone(),
        );
        registry.register(
            "routes",
            "Pod-network routes on the router that berth manages",
            self.routes.clone(),
        );
        registry.register("leader", "1 while this replica leads", self.leader.clone());
    }

    /// Counts one reconcile.
    pub fn reconcile(&self, controller: &str, result: &str) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: result.into(),
            })
            .inc();
    }

    /// Counts a Node deleted because its server is gone.
    pub fn node_deleted(&self) {
        self.node_deletions.inc();
    }

    /// Nodes deleted so far.
    pub fn node_deletions(&self) -> u64 {
        self.node_deletions.get()
    }

    /// Sets the number of managed routes.
    pub fn set_routes(&self, n: usize) {
        self.routes.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Sets whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }
}
