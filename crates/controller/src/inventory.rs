//! One shared, bounded-age view of the project's servers and ports.
//!
//! Every node reconcile reads the same snapshot: one server list and one port list serve all
//! nodes, however many, and are taken again only when older than the maximum age. Concurrent
//! readers of a stale snapshot wait for one refresh instead of each making one.

use std::{collections::HashMap, sync::Arc, time::Duration};

use berth_openstack::{Client, compute::Server, network::Port};
use tokio::{sync::Mutex, time::Instant};

/// Servers and ports as they were at `taken`.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Servers by id.
    pub servers: HashMap<String, Server>,
    /// Server ids by name (a name may be shared).
    pub by_name: HashMap<String, Vec<String>>,
    /// Ports by the server (device) they belong to.
    pub ports: HashMap<String, Vec<Port>>,
}

impl Snapshot {
    /// The ports of a server.
    pub fn ports_of(&self, server_id: &str) -> &[Port] {
        self.ports.get(server_id).map(Vec::as_slice).unwrap_or_default()
    }
}

/// The shared view.
#[derive(Debug)]
pub struct Inventory {
    client: Client,
    max_age: Duration,
    current: Mutex<Option<(Instant, Arc<Snapshot>)>>,
}

impl Inventory {
    /// A view that is at most `max_age` old when read.
    pub fn new(client: Client, max_age: Duration) -> Self {
        Self {
            client,
            max_age,
            current: Mutex::new(None),
        }
    }

    /// The snapshot, taken again first when it is older than the maximum age.
    pub async fn snapshot(&self) -> berth_openstack::Result<Arc<Snapshot>> {
        self.snapshot_within(self.max_age).await
    }

    /// The snapshot, taken again first when it is older than `max_age` (a caller that just
    /// saw something new, such as a Node whose server is not listed yet, asks for a younger one).
    pub async fn snapshot_within(&self, max_age: Duration) -> berth_openstack::Result<Arc<Snapshot>> {
        let mut current = self.current.lock().await;
        if let Some((taken, snap)) = current.as_ref()
            && taken.elapsed() < max_age
        {
            return Ok(snap.clone());
        }
        let (compute, network) = (self.client.compute(), self.client.network());
        let (servers, ports) = tokio::try_join!(compute.servers(&[]), network.ports(&[]))?;
        let mut snap = Snapshot::default();
        for s in servers {
            snap.by_name.entry(s.name.clone()).or_default().push(s.id.clone());
            snap.servers.insert(s.id.clone(), s);
        }
        for p in ports {
            if !p.device_id.is_empty() {
                snap.ports.entry(p.device_id.clone()).or_default().push(p);
            }
        }
        let snap = Arc::new(snap);
        *current = Some((Instant::now(), snap.clone()));
        Ok(snap)
    }

    /// Forgets the snapshot: the next read takes a new one (after berth changed something).
    pub async fn invalidate(&self) {
        *self.current.lock().await = None;
    }
}
