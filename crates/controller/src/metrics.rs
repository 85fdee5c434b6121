//! The cloud controller's Prometheus metrics (besides the OpenStack client's own).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
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

/// Labels of a load balancer operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OperationLabels {
    /// `ensure`, `update` (members only) or `delete`.
    pub operation: String,
    /// `ok`, or the error's kind.
    pub result: String,
}

fn operation_histogram() -> Histogram {
    Histogram::new([0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0])
}

/// Counters and gauges.
#[derive(Debug)]
pub struct Metrics {
    reconciles: Family<ReconcileLabels, Counter>,
    node_deletions: Counter,
    routes: Gauge,
    leader: Gauge,
    lb_operations: Family<OperationLabels, Histogram, fn() -> Histogram>,
    gc_deletions: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            node_deletions: Counter::default(),
            routes: Gauge::default(),
            leader: Gauge::default(),
            lb_operations: Family::new_with_constructor(operation_histogram),
            gc_deletions: Counter::default(),
        }
    }
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
        registry.register(
            "loadbalancer_operation_seconds",
            "Load balancer operations (ensure, update, delete) by result, and how long they took",
            self.lb_operations.clone(),
        );
        registry.register(
            "gc_deletions",
            "OpenStack objects the garbage collector deleted because their Service was gone",
            self.gc_deletions.clone(),
        );
    }

    /// Records one load balancer operation.
    pub fn lb_operation(&self, operation: &str, result: &str, took: std::time::Duration) {
        self.lb_operations
            .get_or_create(&OperationLabels {
                operation: operation.into(),
                result: result.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts objects the garbage collector deleted.
    pub fn gc_deleted(&self, n: usize) {
        self.gc_deletions.inc_by(u64::try_from(n).unwrap_or(u64::MAX));
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
