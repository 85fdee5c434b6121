//! Authentication: who holds a token, according to Keystone.
//!
//! [`Authenticator::authenticate`] answers in this order:
//! 1. a token that cannot be a Keystone token ([`looks_like_keystone`]: ServiceAccount JWTs,
//!    bootstrap tokens, odd bytes) is refused at once, without asking Keystone;
//! 2. a cached answer: a valid token's user for at most the cache TTL and never past the
//!    token's `expires_at`; a refusal for the (short) negative TTL;
//! 3. otherwise Keystone (`GET /v3/auth/tokens`), once for all the concurrent reviews of the
//!    same token (single flight).
//!
//! The cache is keyed by the token's SHA-256, so no token is kept in memory after its review,
//! and it is bounded: when full, expired entries go first, then the ones closest to expiry.

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use base64::Engine as _;
use berth_openstack::{Secret, identity::TokenInfo};
use jiff::Timestamp;
use tokio::{sync::OnceCell, time::Instant};
use tracing::{debug, warn};

use crate::{
    metrics::Metrics,
    policy::{DOMAIN_ID, DOMAIN_NAME, PROJECT_ID, PROJECT_NAME, ROLES},
    review::UserInfo,
    sync::RoleMapping,
};

/// What Keystone said about a token.
#[derive(Debug, Clone)]
pub enum Validation {
    /// The token is valid.
    Valid {
        /// What the token carries.
        info: TokenInfo,
        /// The user's Keystone group names, when they are asked for.
        groups: Vec<String>,
    },
    /// Keystone does not accept the token (unknown, expired or revoked).
    Invalid(String),
    /// Keystone could not be asked, or failed: nothing is known.
    Unavailable(String),
}

/// A boxed future, for [`Validator`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Asks Keystone about a token. The real one is [`KeystoneValidator`]; tests use fakes.
pub trait Validator: Send + Sync + 'static {
    /// Validates `token`.
    fn validate<'a>(&'a self, token: &'a Secret) -> BoxFuture<'a, Validation>;
}

/// Validates tokens with Keystone, with the webhook's own credentials.
#[derive(Debug, Clone)]
pub struct KeystoneValidator {
    client: berth_openstack::Client,
    groups: bool,
}

impl KeystoneValidator {
    /// A validator using `client`; `groups` also fetches the user's Keystone groups.
    pub fn new(client: berth_openstack::Client, groups: bool) -> Self {
        Self { client, groups }
    }
}

impl Validator for KeystoneValidator {
    fn validate<'a>(&'a self, token: &'a Secret) -> BoxFuture<'a, Validation> {
        Box::pin(async move {
            let identity = self.client.identity();
            match identity.validate_token(token).await {
                Ok(info) => {
                    let groups = if self.groups {
                        match identity.user_groups(&info.user_id).await {
                            Ok(g) => g,
                            Err(e) => {
                                return Validation::Unavailable(format!(
                                    "cannot list the user's Keystone groups: {e}"
                                ));
                            }
                        }
                    } else {
                        Vec::new()
                    };
                    Validation::Valid { info, groups }
                }
                // 404: unknown, expired or revoked. 401 here means the subject token (our own
                // was renewed and retried by the client already).
                Err(e) if matches!(e.status().map(|s| s.as_u16()), Some(404 | 401)) => Validation::Invalid(
                    "Keystone does not accept the token (unknown, expired or revoked)".into(),
                ),
                Err(e) => Validation::Unavailable(format!("cannot validate the token with Keystone: {e}")),
            }
        })
    }
}

/// Whether `token` may be a Keystone token: Fernet and UUID tokens are URL-safe base64 or hex
/// without dots; JWS tokens (Keystone's `jws` provider) are JWTs whose payload carries
/// `openstack_*` claims. Anything else (ServiceAccount JWTs, `abcdef.0123456789abcdef`
/// bootstrap tokens, spaces, odd bytes) is not worth a Keystone call.
pub fn looks_like_keystone(token: &str) -> Result<(), &'static str> {
    if token.len() < 16 {
        return Err("the token is too short to be a Keystone token");
    }
    if token.len() > crate::review::MAX_TOKEN_LEN {
        return Err("the token is too long to be a Keystone token");
    }
    let base64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'=')
    };
    let segments: Vec<&str> = token.split('.').collect();
    match segments.as_slice() {
        [single] if base64url(single) => Ok(()),
        [_] => Err("the token holds characters a Keystone token never has"),
        [header, payload, _signature] if base64url(header) && base64url(payload) => {
            let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload.trim_end_matches('='))
                .map_err(|_| "a JWT whose payload is not base64url")?;
            let claims: serde_json::Value =
                serde_json::from_slice(&decoded).map_err(|_| "a JWT whose payload is not JSON")?;
            let keystone = claims
                .as_object()
                .is_some_and(|c| c.keys().any(|k| k.starts_with("openstack_")));
            if keystone {
                Ok(())
            } else {
                Err("a JWT that Keystone did not issue (e.g. a ServiceAccount token)")
            }
        }
        _ => Err("a token with dots that is not a JWT (e.g. a bootstrap token)"),
    }
}

/// Cache settings.
#[derive(Debug, Clone, Copy)]
pub struct CacheOptions {
    /// The longest a valid token's user is reused (revocation takes effect after it).
    pub ttl: Duration,
    /// How long a refusal by Keystone is reused.
    pub negative_ttl: Duration,
    /// The most tokens remembered.
    pub max_entries: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(30),
            negative_ttl: Duration::from_secs(10),
            max_entries: 10_000,
        }
    }
}

/// The outcome of a TokenReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Authenticated as this user.
    User(Arc<UserInfo>),
    /// Refused, with the reason.
    Refused(String),
    /// Keystone could not be asked; refused, with the reason.
    Unavailable(String),
}

type Key = [u8; 32];

#[derive(Debug)]
struct Entry {
    outcome: Outcome,
    until: Instant,
}

/// Answers TokenReviews.
pub struct Authenticator {
    validator: Arc<dyn Validator>,
    options: CacheOptions,
    mappings: Arc<std::sync::RwLock<Vec<RoleMapping>>>,
    metrics: Arc<Metrics>,
    cache: Mutex<HashMap<Key, Entry>>,
    inflight: Mutex<HashMap<Key, Arc<OnceCell<Outcome>>>>,
    syncer: Option<crate::sync::Syncer>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn key(token: &Secret) -> Key {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.expose().as_bytes());
    let mut k = [0u8; 32];
    k.copy_from_slice(digest.as_ref());
    k
}

impl Authenticator {
    /// An authenticator asking `validator`, applying the role mappings in `mappings`.
    pub fn new(
        validator: Arc<dyn Validator>,
        options: CacheOptions,
        mappings: Arc<std::sync::RwLock<Vec<RoleMapping>>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            validator,
            options,
            mappings,
            metrics,
            cache: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            syncer: None,
        }
    }

    /// Also syncs namespaces and RoleBindings for each user Keystone vouches for.
    pub fn with_syncer(mut self, syncer: crate::sync::Syncer) -> Self {
        self.syncer = Some(syncer);
        self
    }

    /// Who holds `token`.
    pub async fn authenticate(&self, token: &Secret) -> Outcome {
        if let Err(why) = looks_like_keystone(token.expose()) {
            self.metrics.token_review("not_keystone");
            return Outcome::Refused(format!("not a Keystone token: {why}"));
        }
        let k = key(token);
        if let Some(outcome) = self.cached(&k) {
            self.count(&outcome);
            return outcome;
        }
        let cell = {
            let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
            match inflight.get(&k) {
                // A finished flight whose owner was cancelled before removing it is stale.
                Some(c) if !c.initialized() => c.clone(),
                _ => {
                    let c = Arc::new(OnceCell::new());
                    inflight.insert(k, c.clone());
                    c
                }
            }
        };
        let mut ran = false;
        let outcome = cell
            .get_or_init(|| {
                ran = true;
                self.ask_keystone(token, k)
            })
            .await
            .clone();
        if ran {
            self.metrics.cache("miss");
            let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
            if inflight.get(&k).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                inflight.remove(&k);
            }
        } else {
            self.metrics.cache("shared");
        }
        self.count(&outcome);
        outcome
    }

    fn count(&self, outcome: &Outcome) {
        self.metrics.token_review(match outcome {
            Outcome::User(_) => "authenticated",
            Outcome::Refused(_) => "invalid",
            Outcome::Unavailable(_) => "unavailable",
        });
    }

    fn cached(&self, k: &Key) -> Option<Outcome> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = cache.get(k)?;
        if entry.until <= Instant::now() {
            cache.remove(k);
            return None;
        }
        self.metrics.cache(match entry.outcome {
            Outcome::User(_) => "hit",
            _ => "negative_hit",
        });
        Some(entry.outcome.clone())
    }

    async fn ask_keystone(&self, token: &Secret, k: Key) -> Outcome {
        let validation = self.validator.validate(token).await;
        let now = Instant::now();
        let (outcome, until) = match validation {
            Validation::Valid { info, groups } => {
                self.metrics.validation("valid");
                let left = info.expires_at.duration_since(Timestamp::now());
                let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
                if left.is_zero() {
                    (Outcome::Refused("the token has expired".into()), None)
                } else {
                    let user = self.user_info(&info, groups);
                    debug!(user = %user.username, project = ?info.project_id, "token validated");
                    if let Some(syncer) = &self.syncer {
                        syncer.sync_user(&user).await;
                    }
                    (
                        Outcome::User(Arc::new(user)),
                        Some(now + left.min(self.options.ttl)),
                    )
                }
            }
            Validation::Invalid(reason) => {
                self.metrics.validation("invalid");
                (Outcome::Refused(reason), Some(now + self.options.negative_ttl))
            }
            Validation::Unavailable(reason) => {
                self.metrics.validation("error");
                warn!(%reason, "Keystone unavailable; refusing the token");
                (Outcome::Unavailable(reason), None)
            }
        };
        if let Some(until) = until.filter(|_| self.options.max_entries > 0) {
            self.insert(k, outcome.clone(), until);
        }
        outcome
    }

    fn insert(&self, k: Key, outcome: Outcome, until: Instant) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= self.options.max_entries && !cache.contains_key(&k) {
            let now = Instant::now();
            cache.retain(|_, e| e.until > now);
            while cache.len() >= self.options.max_entries {
                let Some(soonest) = cache.iter().min_by_key(|(_, e)| e.until).map(|(k, _)| *k) else {
                    break;
                };
                cache.remove(&soonest);
            }
        }
        cache.insert(k, Entry { outcome, until });
    }

    /// How many tokens the cache holds.
    pub fn cache_len(&self) -> usize {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The user a valid token stands for: upstream's fields, then the role mappings.
    fn user_info(&self, info: &TokenInfo, keystone_groups: Vec<String>) -> UserInfo {
        let mut groups = keystone_groups;
        if let Some(p) = &info.project_id {
            groups.push(p.clone());
        }
        let mut extra = BTreeMap::new();
        extra.insert(ROLES.to_owned(), info.roles.clone());
        extra.insert(PROJECT_ID.to_owned(), info.project_id.iter().cloned().collect());
        extra.insert(
            PROJECT_NAME.to_owned(),
            info.project_name.iter().cloned().collect(),
        );
        extra.insert(DOMAIN_ID.to_owned(), vec![info.user_domain_id.clone()]);
        extra.insert(DOMAIN_NAME.to_owned(), vec![info.user_domain_name.clone()]);
        let mut user = UserInfo {
            username: info.user_name.clone(),
            uid: info.user_id.clone(),
            groups,
            extra,
        };
        let mappings = self.mappings.read().unwrap_or_else(PoisonError::into_inner);
        crate::sync::apply_role_mappings(&mappings, &info.roles, &mut user);
        user
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct Fake {
        calls: AtomicUsize,
        delay: Duration,
        answer: Box<dyn Fn(&str) -> Validation + Send + Sync>,
    }

    impl Validator for Fake {
        fn validate<'a>(&'a self, token: &'a Secret) -> BoxFuture<'a, Validation> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.delay).await;
                (self.answer)(token.expose())
            })
        }
    }

    fn info(expires_in: jiff::SignedDuration) -> TokenInfo {
        TokenInfo {
            expires_at: Timestamp::now() + expires_in,
            user_id: "u1".into(),
            user_name: "demo".into(),
            user_domain_id: "default".into(),
            user_domain_name: "Default".into(),
            project_id: Some("p1".into()),
            project_name: Some("demo".into()),
            roles: vec!["member".into(), "reader".into()],
        }
    }

    fn authenticator(fake: Arc<Fake>, options: CacheOptions) -> Authenticator {
        Authenticator::new(fake, options, Arc::default(), Arc::default())
    }

    const TOKEN: &str = "gAAAAABpZ2V0LXRva2VuLWZvci10ZXN0cy1vbmx5LXBsZWFzZQ";

    #[test]
    fn token_shapes() {
        assert!(looks_like_keystone(TOKEN).is_ok());
        assert!(looks_like_keystone("0123456789abcdef0123456789abcdef").is_ok());
        let sa = format!(
            "{}.{}.sig",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"k"}"#),
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(br#"{"iss":"kubernetes/serviceaccount","sub":"system:serviceaccount:default:x"}"#)
        );
        assert!(looks_like_keystone(&sa).unwrap_err().contains("ServiceAccount"));
        let jws = format!(
            "{}.{}.sig",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256"}"#),
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(br#"{"sub":"u1","openstack_methods":["password"]}"#)
        );
        assert!(looks_like_keystone(&jws).is_ok());
        assert!(looks_like_keystone("abcdef.0123456789abcdef").is_err());
        assert!(looks_like_keystone("short").is_err());
        assert!(looks_like_keystone("has spaces in it, quite long").is_err());
        assert!(looks_like_keystone(&"a".repeat(20_000)).is_err());
    }

    #[tokio::test]
    async fn concurrent_reviews_of_one_token_make_one_call() {
        let fake = Arc::new(Fake {
            calls: AtomicUsize::new(0),
            delay: Duration::from_millis(50),
            answer: Box::new(|_| Validation::Valid {
                info: info(jiff::SignedDuration::from_hours(1)),
                groups: vec![],
            }),
        });
        let a = Arc::new(authenticator(fake.clone(), CacheOptions::default()));
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let a = a.clone();
                tokio::spawn(async move { a.authenticate(&Secret::new(TOKEN)).await })
            })
            .collect();
        for t in tasks {
            let Outcome::User(u) = t.await.unwrap() else {
                panic!("refused")
            };
            assert_eq!(u.username, "demo");
            assert_eq!(u.groups, ["p1"]);
            assert_eq!(u.extra[ROLES], ["member", "reader"]);
        }
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        // and the next one is a cache hit
        a.authenticate(&Secret::new(TOKEN)).await;
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_never_outlives_the_token_or_the_ttl() {
        let fake = Arc::new(Fake {
            calls: AtomicUsize::new(0),
            delay: Duration::ZERO,
            answer: Box::new(|t| {
                let life = if t.ends_with('x') { 5 } else { 3600 };
                Validation::Valid {
                    info: info(jiff::SignedDuration::from_secs(life)),
                    groups: vec![],
                }
            }),
        });
        let a = authenticator(
            fake.clone(),
            CacheOptions {
                ttl: Duration::from_secs(30),
                ..CacheOptions::default()
            },
        );
        let short = Secret::new(format!("{TOKEN}x"));
        a.authenticate(&short).await;
        tokio::time::advance(Duration::from_secs(4)).await;
        a.authenticate(&short).await;
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            1,
            "within the token's life: cached"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        a.authenticate(&short).await;
        assert_eq!(
            fake.calls.load(Ordering::SeqCst),
            2,
            "past expires_at: asked again"
        );
        let long = Secret::new(TOKEN);
        a.authenticate(&long).await;
        tokio::time::advance(Duration::from_secs(29)).await;
        a.authenticate(&long).await;
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
        tokio::time::advance(Duration::from_secs(2)).await;
        a.authenticate(&long).await;
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4, "past the TTL: asked again");
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_cached_briefly_and_outages_not_at_all() {
        let fake = Arc::new(Fake {
            calls: AtomicUsize::new(0),
            delay: Duration::ZERO,
            answer: Box::new(|t| {
                if t.ends_with('d') {
                    Validation::Unavailable("connection refused".into())
                } else {
                    Validation::Invalid("revoked".into())
                }
            }),
        });
        let a = authenticator(fake.clone(), CacheOptions::default());
        let bad = Secret::new(TOKEN);
        assert!(matches!(a.authenticate(&bad).await, Outcome::Refused(_)));
        assert!(matches!(a.authenticate(&bad).await, Outcome::Refused(_)));
        assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(11)).await;
        a.authenticate(&bad).await;
        assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
        let down = Secret::new(format!("{TOKEN}d"));
        assert!(matches!(a.authenticate(&down).await, Outcome::Unavailable(_)));
        assert!(matches!(a.authenticate(&down).await, Outcome::Unavailable(_)));
        assert_eq!(fake.calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn the_cache_is_bounded_and_jwts_never_reach_keystone() {
        let fake = Arc::new(Fake {
            calls: AtomicUsize::new(0),
            delay: Duration::ZERO,
            answer: Box::new(|_| Validation::Valid {
                info: info(jiff::SignedDuration::from_hours(1)),
                groups: vec!["devs".into()],
            }),
        });
        let a = authenticator(
            fake.clone(),
            CacheOptions {
                max_entries: 10,
                ..CacheOptions::default()
            },
        );
        for i in 0..50 {
            a.authenticate(&Secret::new(format!("{TOKEN}{i:04}"))).await;
        }
        assert!(a.cache_len() <= 10);
        let before = fake.calls.load(Ordering::SeqCst);
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2ln";
        assert!(
            matches!(a.authenticate(&Secret::new(jwt)).await, Outcome::Refused(r) if r.contains("not a Keystone token"))
        );
        assert_eq!(fake.calls.load(Ordering::SeqCst), before);
    }
}
