//! Per-object exponential backoff (kube-runtime has none): `base * 2^failures`, capped.
use std::{collections::HashMap, sync::Mutex, time::Duration};

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
    fn doubles_until_the_cap_and_resets() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let delays: Vec<_> = (0..6).map(|_| b.next_delay("a").as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(b.next_delay("b").as_secs(), 1, "keys are independent");
        b.reset("a");
        assert_eq!(b.next_delay("a").as_secs(), 1);
    }
}
