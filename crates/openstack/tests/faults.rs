//! Faults the real testbed cannot be made to produce on demand, against a wiremock Keystone
//! and service: 409 while PENDING, 5xx, timeouts, revoked tokens, expiry under concurrency.

// Test helpers may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use berth_openstack::{
    Client, ClientOptions, Credentials, Secret,
    auth::{AuthMethod, NamedRef, Scope},
    metrics::ApiMetrics,
};
use serde_json::json;
use wiremock::{
    Mock, MockServer, ResponseTemplate,
    matchers::{header, method, path},
};

fn token_body(server: &MockServer, expires_in: jiff::SignedDuration) -> serde_json::Value {
    let expires_at = (jiff::Timestamp::now() + expires_in).to_string();
    json!({ "token": {
        "expires_at": expires_at,
        "user": { "id": "u1", "name": "ccm" },
        "project": { "id": "p1", "name": "k8s" },
        "roles": [{ "id": "r1", "name": "member" }],
        "catalog": [
            { "type": "load-balancer", "name": "octavia", "endpoints": [
                { "interface": "public", "region_id": "R1", "url": format!("{}/lb", server.uri()) }] },
            { "type": "network", "name": "neutron", "endpoints": [
                { "interface": "public", "region_id": "R1", "url": format!("{}/net", server.uri()) }] }
        ]
    }})
}

/// Keystone answers logins with `tok-1`, `tok-2`, …: the first lives `first`, later ones an hour.
async fn keystone(server: &MockServer, first: jiff::SignedDuration) {
    Mock::given(method("POST"))
        .and(path("/v3/auth/tokens"))
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("x-subject-token", "tok-1")
                .set_body_json(token_body(server, first)),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/tokens"))
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("x-subject-token", "tok-2")
                .set_body_json(token_body(server, jiff::SignedDuration::from_hours(1))),
        )
        .with_priority(2)
        .mount(server)
        .await;
}

fn client(server: &MockServer, tweak: impl FnOnce(&mut ClientOptions)) -> (Client, Arc<ApiMetrics>) {
    berth_openstack::install_crypto_provider();
    let metrics = Arc::new(ApiMetrics::default());
    let mut options = ClientOptions {
        region: Some("R1".into()),
        max_backoff: Duration::from_millis(50),
        metrics: metrics.clone(),
        ..ClientOptions::default()
    };
    tweak(&mut options);
    let credentials = Credentials {
        auth_url: format!("{}/v3", server.uri()).parse().unwrap(),
        method: AuthMethod::Password {
            user: NamedRef::Id("u1".into()),
            password: Secret::new("pw"),
        },
        scope: Scope::Project(NamedRef::Id("p1".into())),
    };
    (Client::new(credentials, options).unwrap(), metrics)
}

const LB: &str = "/lb/v2/lbaas/loadbalancers/lb1";

fn lb_body(status: &str) -> serde_json::Value {
    json!({ "loadbalancer": { "id": "lb1", "name": "x", "provisioning_status": status } })
}

#[tokio::test]
async fn a_409_while_pending_is_waited_out() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("PUT"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(409).set_body_json(
            json!({"faultcode": "Client", "faultstring": "Load Balancer lb1 is immutable and cannot be updated."}),
        ))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(200).set_body_json(lb_body("PENDING_UPDATE")))
        .with_priority(2)
        .mount(&server)
        .await;
    let (c, m) = client(&server, |_| {});
    let lb = c
        .load_balancer()
        .update("lb1", json!({"description": "d"}))
        .await
        .unwrap();
    assert_eq!(lb.provisioning_status, "PENDING_UPDATE");
    assert_eq!(m.calls("load-balancer", "PUT", "409"), 2);
    assert_eq!(m.calls("load-balancer", "PUT", "200"), 1);
}

#[tokio::test]
async fn a_409_on_neutron_is_an_error_at_once_with_neutrons_message() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("POST"))
        .and(path("/net/v2.0/floatingips"))
        .respond_with(ResponseTemplate::new(409).set_body_json(
            json!({"NeutronError": {"type": "IpAddressAlreadyAllocated", "message": "IP address 203.0.113.5 already allocated in subnet s1", "detail": ""}}),
        ))
        .mount(&server)
        .await;
    let (c, m) = client(&server, |_| {});
    let err = c
        .network()
        .create_floating_ip(json!({"floating_network_id": "n"}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "network POST /net/v2.0/floatingips returned 409 Conflict: IP address 203.0.113.5 already allocated in subnet s1"
    );
    assert_eq!(m.calls("network", "POST", "409"), 1, "not retried");
    assert_eq!(m.total_calls(), 2, "the login and the one POST");
}

#[tokio::test]
async fn server_errors_are_retried_for_reads_but_a_500_on_create_is_not() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(200).set_body_json(lb_body("ACTIVE")))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/lb/v2/lbaas/loadbalancers"))
        .respond_with(
            ResponseTemplate::new(500).set_body_json(json!({"faultcode": "Server", "faultstring": "boom"})),
        )
        .mount(&server)
        .await;
    let (c, m) = client(&server, |_| {});
    assert_eq!(
        c.load_balancer().get("lb1").await.unwrap().provisioning_status,
        "ACTIVE"
    );
    assert_eq!(m.calls("load-balancer", "GET", "503"), 1);
    let new = berth_openstack::load_balancer::NewLoadBalancer {
        name: "x".into(),
        ..Default::default()
    };
    let err = c.load_balancer().create(&new).await.unwrap_err();
    assert!(
        err.to_string()
            .ends_with("returned 500 Internal Server Error: boom"),
        "{err}"
    );
    assert_eq!(
        m.calls("load-balancer", "POST", "500"),
        1,
        "a create that may have happened is not repeated"
    );
}

#[tokio::test]
async fn a_gateway_timeout_on_create_is_not_repeated_but_a_503_is() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("POST"))
        .and(path("/lb/v2/lbaas/loadbalancers"))
        .respond_with(ResponseTemplate::new(504))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/lb/v2/lbaas/loadbalancers"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/lb/v2/lbaas/loadbalancers"))
        .respond_with(ResponseTemplate::new(201).set_body_json(lb_body("PENDING_CREATE")))
        .with_priority(3)
        .mount(&server)
        .await;
    let (c, m) = client(&server, |_| {});
    let new = berth_openstack::load_balancer::NewLoadBalancer {
        name: "x".into(),
        ..Default::default()
    };
    // The gateway may have passed the create on before it timed out: not repeated.
    let err = c.load_balancer().create(&new).await.unwrap_err();
    assert!(err.to_string().contains("504"), "{err}");
    assert_eq!(m.calls("load-balancer", "POST", "504"), 1);
    assert_eq!(m.calls("load-balancer", "POST", "201"), 0);
    // A 503 means the service refused it: waited out.
    let lb = c.load_balancer().create(&new).await.unwrap();
    assert_eq!(lb.provisioning_status, "PENDING_CREATE");
    assert_eq!(m.calls("load-balancer", "POST", "503"), 1);
    assert_eq!(m.calls("load-balancer", "POST", "201"), 1);
}

#[tokio::test]
async fn retries_are_bounded() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(503).set_body_string("busy"))
        .mount(&server)
        .await;
    let (c, m) = client(&server, |o| o.max_attempts = 3);
    let started = std::time::Instant::now();
    let err = c.load_balancer().get("lb1").await.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(503));
    assert!(
        err.to_string()
            .contains("GET /lb/v2/lbaas/loadbalancers/lb1 returned 503"),
        "{err}"
    );
    assert_eq!(m.calls("load-balancer", "GET", "503"), 3);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_read_that_times_out_is_tried_again() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(lb_body("ACTIVE"))
                .set_delay(Duration::from_secs(3)),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(200).set_body_json(lb_body("ACTIVE")))
        .with_priority(2)
        .mount(&server)
        .await;
    let (c, m) = client(&server, |o| o.request_timeout = Duration::from_millis(500));
    c.token().await.unwrap();
    assert_eq!(c.load_balancer().get("lb1").await.unwrap().id, "lb1");
    assert_eq!(m.calls("load-balancer", "GET", "timeout"), 1);
    assert_eq!(m.calls("load-balancer", "GET", "200"), 1);
}

#[tokio::test]
async fn a_refused_token_means_one_new_login_and_one_retry() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    Mock::given(method("GET"))
        .and(path(LB))
        .and(header("x-auth-token", "tok-1"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(LB))
        .and(header("x-auth-token", "tok-2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(lb_body("ACTIVE")))
        .mount(&server)
        .await;
    let (c, m) = client(&server, |_| {});
    assert_eq!(c.load_balancer().get("lb1").await.unwrap().id, "lb1");
    assert_eq!(m.logins(), 2);

    // A 401 that stays is reported after that one retry, not looped on.
    Mock::given(method("GET"))
        .and(path("/lb/v2/lbaas/loadbalancers/lb2"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    let err = c.load_balancer().get("lb2").await.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(401));
    assert_eq!(m.logins(), 3);
    assert_eq!(m.calls("load-balancer", "GET", "401"), 3);
}

#[tokio::test]
async fn a_hundred_calls_after_expiry_make_exactly_one_login() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_millis(3500)).await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(200).set_body_json(lb_body("ACTIVE")))
        .mount(&server)
        .await;
    let (c, m) = client(&server, |o| o.token_refresh_margin = Duration::from_secs(1));
    c.token().await.unwrap();
    assert_eq!(m.logins(), 1);
    tokio::time::sleep(Duration::from_secs(3)).await; // now within the margin: the token is stale
    let calls = (0..100).map(|_| {
        let c = c.clone();
        tokio::spawn(async move { c.load_balancer().get("lb1").await.map(|lb| lb.id) })
    });
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), "lb1");
    }
    assert_eq!(m.logins(), 2, "100 concurrent callers share one new login");
    assert_eq!(m.calls("load-balancer", "GET", "200"), 100);
}

#[tokio::test]
async fn a_token_near_expiry_is_replaced_in_the_background() {
    let server = MockServer::start().await;
    keystone(&server, jiff::SignedDuration::from_secs(5)).await;
    Mock::given(method("GET"))
        .and(path(LB))
        .respond_with(ResponseTemplate::new(200).set_body_json(lb_body("ACTIVE")))
        .mount(&server)
        .await;
    let (c, m) = client(&server, |o| o.token_refresh_margin = Duration::from_secs(2));
    assert_eq!(c.token().await.unwrap().value.expose(), "tok-1");
    tokio::time::sleep(Duration::from_millis(1500)).await; // within twice the margin, not within it
    // Still served with the current token at once, while a refresh starts.
    assert_eq!(c.token().await.unwrap().value.expose(), "tok-1");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(m.logins(), 2);
    assert_eq!(c.token().await.unwrap().value.expose(), "tok-2");
}

#[tokio::test]
async fn wrong_credentials_give_keystones_message_and_no_secret() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/tokens"))
        .respond_with(ResponseTemplate::new(401).set_body_json(
            json!({"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}),
        ))
        .mount(&server)
        .await;
    let (c, _) = client(&server, |_| {});
    let err = c.token().await.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        text.contains("failed (401 Unauthorized): The request you have made requires authentication."),
        "{text}"
    );
    assert!(!text.contains("pw\""), "{text}");
}

#[tokio::test]
async fn a_keystone_500_is_retried_but_a_401_is_final() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/tokens"))
        .respond_with(ResponseTemplate::new(500).set_body_string("database is locked"))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    keystone(&server, jiff::SignedDuration::from_hours(1)).await;
    let (c, m) = client(&server, |_| {});
    assert_eq!(c.token().await.unwrap().value.expose(), "tok-1");
    assert_eq!(m.calls("identity", "POST", "500"), 2);
    assert_eq!(m.logins(), 1);

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v3/auth/tokens"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    let (c, m) = client(&server, |_| {});
    assert!(c.token().await.is_err());
    assert_eq!(
        m.calls("identity", "POST", "401"),
        1,
        "wrong credentials are not retried"
    );
}
