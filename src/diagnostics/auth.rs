//! Who may read `/metrics`: the bearer token is authenticated with a TokenReview and its user
//! authorised with a SubjectAccessReview (`get` on the non-resource URL `/metrics`), through the
//! API server, as controller-runtime's `filters.WithAuthenticationAndAuthorization` does. The
//! answers are cached briefly per token, so a scraper does not cost two API calls per scrape.
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};
use tracing::{debug, warn};

/// How long an allowed token is trusted without asking again.
const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused one stays refused (a newly bound role takes effect after this).
const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered at most: a flood of made-up tokens evicts, it does not grow the map.
const MAX_ENTRIES: usize = 256;

/// What a request to `/metrics` gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No bearer token, or one the API server does not accept: 401.
    Unauthenticated,
    /// A valid token whose user may not `get /metrics`: 403.
    Forbidden,
}

/// Why no decision could be made (the API server did not answer): 500, not cached.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ReviewError {
    what: &'static str,
    source: kube::Error,
}

pub struct Reviewer {
    client: Client,
    cache: Mutex<Cache>,
}

impl Reviewer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The decision for a request with this `Authorization` header value (if any).
    pub async fn review(&self, authorization: Option<&str>) -> Result<Decision, ReviewError> {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Ok(Decision::Unauthenticated);
        };
        let now = Instant::now();
        if let Some(d) = self.lock().get(token, now) {
            return Ok(d);
        }
        let decision = self.ask(token).await?;
        let ttl = match decision {
            Decision::Allowed => ALLOWED_TTL,
            _ => REFUSED_TTL,
        };
        self.lock().insert(token, decision, now + ttl);
        Ok(decision)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn ask(&self, token: &str) -> Result<Decision, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError {
                what: "TokenReview",
                source,
            })?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                // The API server's reason can echo nothing secret, but it is not needed either.
                debug!("metrics request with a token the API server did not authenticate");
                return Ok(Decision::Unauthenticated);
            }
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|source| ReviewError {
                what: "SubjectAccessReview",
                source,
            })?;
        if reviewed.status.is_some_and(|s| s.allowed) {
            Ok(Decision::Allowed)
        } else {
            warn!(
                user = user.username.as_deref().unwrap_or(""),
                "metrics request refused: the user may not get /metrics"
            );
            Ok(Decision::Forbidden)
        }
    }
}

/// Decisions by token, each until it expires; at most [`MAX_ENTRIES`].
#[derive(Default)]
struct Cache {
    entries: HashMap<String, (Decision, Instant)>,
}

impl Cache {
    fn get(&self, token: &str, now: Instant) -> Option<Decision> {
        self.entries
            .get(token)
            .filter(|(_, until)| *until > now)
            .map(|(d, _)| *d)
    }

    fn insert(&mut self, token: &str, decision: Decision, until: Instant) {
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(token) {
            let now = Instant::now();
            self.entries.retain(|_, (_, u)| *u > now);
            if self.entries.len() >= MAX_ENTRIES {
                // Still full of live entries: drop the one that would expire first.
                if let Some(first) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, u))| *u)
                    .map(|(k, _)| k.clone())
                {
                    self.entries.remove(&first);
                }
            }
        }
        self.entries.insert(token.to_string(), (decision, until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_expires_and_stays_bounded() {
        let mut c = Cache::default();
        let now = Instant::now();
        c.insert("a", Decision::Allowed, now + Duration::from_secs(5));
        assert_eq!(c.get("a", now), Some(Decision::Allowed));
        assert_eq!(c.get("a", now + Duration::from_secs(6)), None, "expired");
        for i in 0..(MAX_ENTRIES * 2) {
            c.insert(
                &format!("t{i}"),
                Decision::Unauthenticated,
                now + Duration::from_secs(60 + i as u64),
            );
        }
        assert_eq!(c.entries.len(), MAX_ENTRIES);
        // The newest are kept, the soonest to expire went first.
        assert!(c.get(&format!("t{}", MAX_ENTRIES * 2 - 1), now).is_some());
        assert!(c.get("t0", now).is_none());
    }
}
