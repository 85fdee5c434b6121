//! Leader election between two `berth cloud-controller` replicas on the testbed.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use berth_e2e::{CloudController, HollowNode, HollowNodeOptions, Testbed, eventually, unique_name};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

const LEADER: &str = "berth_leader";

fn args(lease: &str) -> Vec<String> {
    [
        "--controllers",
        "cloud-node",
        "--leader-elect-resource-name",
        lease,
        "--leader-elect-lease-duration",
        "6s",
        "--leader-elect-renew-deadline",
        "4s",
        "--leader-elect-retry-period",
        "1s",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

async fn leading(c: &CloudController) -> bool {
    c.metric(LEADER).await.unwrap() == 1.0
}

async fn reconciles(c: &CloudController) -> f64 {
    c.metric("berth_reconciles_total{controller=\"node\",result=\"ok\"}")
        .await
        .unwrap()
}

#[tokio::test]
async fn one_replica_leads_and_the_other_takes_over_when_it_dies() {
    let tb = Testbed::load().unwrap();
    let os = tb.openstack_demo().await.unwrap();
    let kube = tb.kube().await.unwrap();
    let lease_name = unique_name("lease");
    let a_args = args(&lease_name);
    let a = CloudController::start(
        &tb,
        "leader-a",
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    eventually("replica a to lead", Duration::from_secs(30), || async {
        Ok(leading(&a).await.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    let mut b = CloudController::start(
        &tb,
        "leader-b",
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    b.metrics().await.unwrap();

    // Work for the leader: a node to initialise. Only the leader may touch it.
    let h = HollowNode::create(
        &tb,
        &os,
        &kube,
        &unique_name("leader"),
        HollowNodeOptions {
            uninitialized_taint: true,
            ..HollowNodeOptions::default()
        },
    )
    .await
    .unwrap();
    let nodes = Api::<Node>::all(kube.clone());
    eventually("the node initialised", Duration::from_secs(60), || async {
        let n = nodes.get(&h.name).await?;
        Ok(n.spec.and_then(|s| s.provider_id).map(|_| ()))
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!leading(&b).await, "two leaders");
    assert_eq!(
        reconciles(&b).await,
        0.0,
        "the standby reconciled:\n{}",
        b.log_text()
    );
    assert!(reconciles(&a).await >= 1.0);
    let leases = Api::<Lease>::namespaced(kube.clone(), "kube-system");
    let holder_a = leases
        .get(&lease_name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();

    // The leader dies without a word: the standby takes over within the lease duration.
    let mut a = a;
    a.kill();
    let started = std::time::Instant::now();
    eventually("replica b to lead", Duration::from_secs(20), || async {
        Ok(leading(&b).await.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    assert!(
        started.elapsed() <= Duration::from_secs(6 + 3),
        "took {:?}",
        started.elapsed()
    );
    let lease = leases.get(&lease_name).await.unwrap().spec.unwrap();
    assert_ne!(lease.holder_identity.as_deref(), Some(holder_a.as_str()));
    assert_eq!(lease.lease_transitions, Some(1));
    eventually("the new leader reconciles", Duration::from_secs(30), || async {
        Ok((reconciles(&b).await >= 1.0).then_some(()))
    })
    .await
    .unwrap();

    // A graceful stop gives the Lease up at once.
    assert_eq!(b.terminate().await.unwrap(), Some(0), "{}", b.log_text());
    let lease = leases.get(&lease_name).await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity, None, "released on SIGTERM");
    leases.delete(&lease_name, &Default::default()).await.unwrap();
    h.remove(&os, &kube).await.unwrap();
}
