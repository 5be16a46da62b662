//! Containers this process is removing or has just removed. Their `die`, `stop` and `destroy`
//! events are not news: the reconcile that removed one knows already. Waking its owner again cut
//! short the backoff of the failure that made it remove the container: a start that kept failing
//! (an entrypoint missing from the image, "port is already allocated") was retried at engine
//! speed, since each failed start's removal woke the owner at once. A container removed by anyone
//! else still wakes its owner.
use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a removal is remembered without its `destroy` event (the stream broke meanwhile;
/// an engine that comes back wakes every object anyway).
const KEEP: Duration = Duration::from_secs(60);
/// At most this many removals remembered: removals run a few at a time, so only a broken event
/// stream lets entries pile up, and the oldest are dropped first.
const MAX: usize = 1024;

/// Removals by container name, oldest first.
#[derive(Default)]
pub struct OwnRemovals {
    entries: Mutex<VecDeque<(String, Instant)>>,
}

impl OwnRemovals {
    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, Instant)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before asking the engine to remove `name`: its events are ours from now on.
    pub fn note(&self, name: &str) {
        self.note_at(name, Instant::now());
    }

    fn note_at(&self, name: &str, now: Instant) {
        let mut entries = self.entries();
        while entries
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > KEEP)
            || entries.len() >= MAX
        {
            entries.pop_front();
        }
        entries.push_back((name.to_string(), now));
    }

    /// The removal of `name` did not happen (the engine refused, or there was nothing to
    /// remove): no `destroy` will come, and a later container of that name is news again.
    pub fn forget(&self, name: &str) {
        let mut entries = self.entries();
        if let Some(i) = entries.iter().rposition(|(n, _)| n == name) {
            entries.remove(i);
        }
    }

    /// Whether an event `action` of container `name` reports a removal of ours. `destroy` is a
    /// removal's last event and ends it.
    pub fn is_own(&self, name: &str, action: &str) -> bool {
        self.is_own_at(name, action, Instant::now())
    }

    fn is_own_at(&self, name: &str, action: &str, now: Instant) -> bool {
        let mut entries = self.entries();
        let Some(i) = entries
            .iter()
            .position(|(n, at)| n == name && now.duration_since(*at) <= KEEP)
        else {
            return false;
        };
        if action == "destroy" {
            entries.remove(i);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_of_ours_is_quiet_until_its_destroy_and_then_news_again() {
        let own = OwnRemovals::default();
        own.note("n1");
        assert!(own.is_own("n1", "die"));
        assert!(own.is_own("n1", "destroy"));
        // A new container of the same name dying is somebody else's doing.
        assert!(!own.is_own("n1", "die"));
        assert!(!own.is_own("n2", "destroy"), "never removed by us");
    }

    #[test]
    fn a_removal_that_did_not_happen_is_forgotten() {
        let own = OwnRemovals::default();
        own.note("n1");
        own.note("n1");
        own.forget("n1");
        assert!(own.is_own("n1", "destroy"), "one removal still under way");
        assert!(!own.is_own("n1", "destroy"));
    }

    #[test]
    fn a_removal_whose_destroy_never_came_expires_and_the_list_is_bounded() {
        let own = OwnRemovals::default();
        let start = Instant::now();
        own.note_at("old", start);
        let later = start + KEEP + Duration::from_secs(1);
        assert!(
            !own.is_own_at("old", "die", later),
            "past KEEP it is news again"
        );
        for i in 0..MAX + 10 {
            own.note_at(&format!("n{i}"), later);
        }
        let entries = own.entries();
        assert_eq!(entries.len(), MAX);
        assert_eq!(entries.front().unwrap().0, "n10", "the oldest went first");
    }
}
