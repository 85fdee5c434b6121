//! Kubernetes Events about the objects berth acts on.
//!
//! core/v1 Events, as kube-controller-manager 1.20 writes them: `kubectl describe` shows them
//! on every Kubernetes version, whereas kube-apiserver 1.20 takes `events.k8s.io/v1` Events
//! about cluster-scoped objects (Nodes) only in `kube-system`. Cluster-scoped objects' Events
//! go to `default`, as client-go's recorder does. The same event again within ten minutes
//! raises the first one's `count` instead of adding another, so a reconcile loop cannot
//! flood the API.

use std::{collections::HashMap, time::Duration};

use jiff::Timestamp;
use k8s_openapi::{
    api::core::v1::{Event, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time},
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::sync::Mutex;
use tracing::warn;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Something happened as it should.
    Normal,
    /// Something needs a look.
    Warning,
}

/// Publishes Events on behalf of one component.
pub struct Publisher {
    client: kube::Client,
    component: String,
    instance: String,
    recent: Mutex<HashMap<EventKey, Sent>>,
}

/// What makes two Events the same: the object's uid, the reason, the message.
type EventKey = (String, String, String);

/// An Event sent lately: its name and namespace, its count, when it was first sent.
struct Sent {
    name: String,
    namespace: String,
    count: i32,
    at: tokio::time::Instant,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("component", &self.component)
            .field("instance", &self.instance)
            .finish()
    }
}

const AGGREGATE_FOR: Duration = Duration::from_secs(600);

impl Publisher {
    /// A publisher for `component` (e.g. `berth-cloud-controller`) running as `instance`.
    pub fn new(client: kube::Client, component: &str, instance: &str) -> Self {
        Self {
            client,
            component: component.into(),
            instance: instance.into(),
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes an Event about `object`; failures are logged, never returned (an Event is
    /// no reason to fail a reconcile).
    pub async fn publish(&self, object: &ObjectReference, kind: Kind, reason: &str, message: &str) {
        if let Err(e) = self.try_publish(object, kind, reason, message).await {
            warn!(error = %e, reason, "could not publish an event");
        }
    }

    async fn try_publish(
        &self,
        object: &ObjectReference,
        kind: Kind,
        reason: &str,
        message: &str,
    ) -> kube::Result<()> {
        let namespace = object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let events = Api::<Event>::namespaced(self.client.clone(), &namespace);
        let key = (
            object.uid.clone().unwrap_or_default(),
            reason.to_owned(),
            message.to_owned(),
        );
        let now = Timestamp::now();
        let mut recent = self.recent.lock().await;
        recent.retain(|_, sent| sent.at.elapsed() < AGGREGATE_FOR);
        if let Some(sent) = recent.get_mut(&key) {
            sent.count += 1;
            let patch = json!({ "count": sent.count, "lastTimestamp": Time(now) });
            let api = Api::<Event>::namespaced(self.client.clone(), &sent.namespace);
            match api
                .patch(&sent.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone (expired or deleted): send a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", object.name.as_deref().unwrap_or("object"))),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(match kind {
                Kind::Normal => "Normal".into(),
                Kind::Warning => "Warning".into(),
            }),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            action: None,
            event_time: None::<MicroTime>,
            ..Event::default()
        };
        let created = events.create(&PostParams::default(), &event).await?;
        if let Some(name) = created.metadata.name {
            recent.insert(
                key,
                Sent {
                    name,
                    namespace,
                    count: 1,
                    at: tokio::time::Instant::now(),
                },
            );
        }
        Ok(())
    }
}
