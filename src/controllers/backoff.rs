//! Retry delays: per object for failed reconciles (kube-runtime has none), `base * 2^failures`,
//! capped; and [`WatchBackoff`] for broken watches.
use std::{collections::HashMap, sync::Mutex, time::Duration};

/// Delays between attempts to re-establish a broken watch: 0.25 s, doubling, at most 2 s; back to
/// 0.25 s once the watch delivers again. kube's default grows to 30 s (and forgets its history
/// only after 2 minutes without an error), so an API server restart left new objects unseen for
/// up to half a minute after the server was back (tests/faults.rs has the figures). A
/// restart costs a watch several errors in a row even once the server answers (connection
/// refused, then 403 until its authorizer has synced, then 410 Gone for the old
/// resourceVersion), each adding a delay: hence the low cap. Six watches retrying every 2 s while
/// the server is away cost it nothing.
#[derive(Clone, Debug)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(2);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(Self::MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// A controller's own pause after one of its trigger streams failed: none. Every watch feeding a
/// controller already backs off by itself ([`WatchBackoff`]), but kube's `Controller` also pauses
/// *all* its triggers (its primary watch and the wake-ups included) with client-go's default,
/// growing to 30 s and more, whenever any one of them yields an error. After an API server
/// restart each watch fails a few times (refused, 403, 410 Gone), so that pause grew to 12.6 s
/// and a new DockerMachine waited 18-34 s to be seen (tests/faults.rs).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTriggerBackoff;

impl Iterator for NoTriggerBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for NoTriggerBackoff {
    fn reset(&mut self) {}
}

pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Record a failure of `key` and return how long to wait before the next attempt.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key.to_string()).or_insert(0);
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(*n))
            .min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// Objects with failures on record.
    pub fn len(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget the failures of `key` after a successful reconcile.
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_backoff_doubles_to_its_cap_and_resets() {
        use kube::runtime::utils::Backoff as _;
        let mut b = WatchBackoff::default();
        let delays: Vec<u64> = b.by_ref().take(6).map(|d| d.as_millis() as u64).collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 2000, 2000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn doubles_until_the_cap_and_resets() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let delays: Vec<_> = (0..6).map(|_| b.next_delay("a").as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(b.next_delay("b").as_secs(), 1, "keys are independent");
        b.reset("a");
        assert_eq!(b.next_delay("a").as_secs(), 1);
    }
}
