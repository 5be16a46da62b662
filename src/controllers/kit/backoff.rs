//! Retry delays: per object for failed reconciles (kube-runtime has none), `base * 2^failures`,
//! capped; and [`WatchBackoff`] for broken watches.
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

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

/// Starts of a container that keeps stopping (a node or LB whose main process dies): the first
/// start is at once (an engine restart stops every container; it must come back quickly), each
/// next one waits twice as long as the one before, from [`RESTART_FIRST_DELAY`] up to
/// [`RESTART_MAX_DELAY`]. A start that dies again shortly after is no success: the streak is
/// forgotten only once the container ran for [`RESTART_STABLE_AFTER`] before stopping (or is
/// seen running that long). Whatever wakes the reconcile (a `die` event, a resync, a watch
/// event), the decision is the same, so nothing restarts at engine speed.
pub const RESTART_FIRST_DELAY: Duration = Duration::from_secs(10);
pub const RESTART_MAX_DELAY: Duration = Duration::from_secs(300);
pub const RESTART_STABLE_AFTER: Duration = Duration::from_secs(60);

/// One container's streak of starts by us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streak {
    /// Starts in this streak.
    pub starts: u32,
    /// When the last one was made.
    pub last: Instant,
}

/// What to do with a stopped container (pure; see [`Restarts::decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartDecision {
    /// Start it now; `starts` counts this start (1 = the first of a streak).
    Start { starts: u32 },
    /// Not yet: look again after `wait`; `starts` were made in this streak so far.
    Wait { wait: Duration, starts: u32 },
}

/// How long the `n`-th start of a streak (1-based) waits after the one before it.
pub fn restart_delay(n: u32) -> Duration {
    match n {
        0 | 1 => Duration::ZERO,
        n => RESTART_FIRST_DELAY
            .saturating_mul(2u32.saturating_pow(n - 2))
            .min(RESTART_MAX_DELAY),
    }
}

/// Pure: given the streak so far, how long the container ran before it last stopped (if the
/// engine says), and now: start, or wait.
pub fn decide_restart(
    streak: Option<Streak>,
    ran_for: Option<Duration>,
    now: Instant,
) -> RestartDecision {
    let stable = ran_for.is_some_and(|d| d >= RESTART_STABLE_AFTER);
    let starts = match streak {
        Some(s) if !stable => s,
        _ => return RestartDecision::Start { starts: 1 },
    };
    let due = starts.last + restart_delay(starts.starts + 1);
    match due.checked_duration_since(now) {
        Some(wait) if !wait.is_zero() => RestartDecision::Wait {
            wait,
            starts: starts.starts,
        },
        _ => RestartDecision::Start {
            starts: starts.starts + 1,
        },
    }
}

/// The condition message of a container that keeps stopping: how its main process last ended,
/// how often it was started in this streak, and when the next start is.
pub fn restarting_message(
    name: &str,
    exit_code: Option<i64>,
    starts: u32,
    next: Option<Duration>,
) -> String {
    let code = exit_code.map_or_else(|| "unknown".to_string(), |code| code.to_string());
    let next = next.map_or_else(String::new, |d| {
        format!("; next start in {}s", d.as_secs().max(1))
    });
    format!(
        "Container {name} keeps stopping (last exit code {code}); started again {starts} time(s) \
         without staying up for {}s{next}",
        RESTART_STABLE_AFTER.as_secs()
    )
}

/// The streaks of every object whose container we restarted, keyed like [`Backoff`].
#[derive(Default)]
pub struct Restarts(Mutex<HashMap<String, Streak>>);

impl Restarts {
    /// Decide for `key`'s stopped container, and record the start when the answer is to start.
    pub fn decide(&self, key: &str, ran_for: Option<Duration>) -> RestartDecision {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let decision = decide_restart(map.get(key).copied(), ran_for, now);
        if let RestartDecision::Start { starts } = decision {
            map.insert(key.to_string(), Streak { starts, last: now });
        }
        decision
    }

    /// Starts in `key`'s current streak (0: none).
    pub fn starts(&self, key: &str) -> u32 {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).map_or(0, |s| s.starts)
    }

    /// The container is running and has been for `up`: a long enough run ends the streak.
    pub fn running_for(&self, key: &str, up: Option<Duration>) {
        if up.is_some_and(|d| d >= RESTART_STABLE_AFTER) {
            self.forget(key);
        }
    }

    pub fn forget(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    #[test]
    fn restarts_follow_the_schedule_and_a_quick_death_is_no_success() {
        let t0 = Instant::now();
        assert_eq!(
            decide_restart(None, None, t0),
            RestartDecision::Start { starts: 1 },
            "the first start of a streak is at once"
        );
        let delays: Vec<u64> = (1..=8).map(|n| restart_delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
        // Died 2 s after the first start: the second waits 10 s, counted from the first.
        let s1 = Streak {
            starts: 1,
            last: t0,
        };
        let quick = Some(Duration::from_secs(2));
        assert_eq!(
            decide_restart(Some(s1), quick, t0 + Duration::from_secs(2)),
            RestartDecision::Wait {
                wait: Duration::from_secs(8),
                starts: 1
            }
        );
        assert_eq!(
            decide_restart(Some(s1), quick, t0 + Duration::from_secs(10)),
            RestartDecision::Start { starts: 2 }
        );
        // Without the engine's times there is no evidence of a stable run either.
        let s3 = Streak {
            starts: 3,
            last: t0,
        };
        assert!(matches!(
            decide_restart(Some(s3), None, t0 + Duration::from_secs(39)),
            RestartDecision::Wait { starts: 3, .. }
        ));
        // A run of a minute or more ends the streak: an engine restart much later starts at once.
        assert_eq!(
            decide_restart(Some(s3), Some(RESTART_STABLE_AFTER), t0),
            RestartDecision::Start { starts: 1 }
        );
    }

    #[test]
    fn a_crash_loop_gets_a_handful_of_starts_a_minute() {
        // A container that dies right after each start, looked at every 100 ms for a minute
        // (die events, resyncs, watch events: whatever wakes the reconcile).
        let t0 = Instant::now();
        let mut streak = None;
        let mut starts = 0;
        for tick in 0..600u64 {
            let now = t0 + Duration::from_millis(100 * tick);
            if let RestartDecision::Start { starts: n } =
                decide_restart(streak, Some(Duration::from_millis(50)), now)
            {
                streak = Some(Streak {
                    starts: n,
                    last: now,
                });
                starts += 1;
            }
        }
        assert_eq!(starts, 3, "at 0, 10 and 30 s");
    }

    #[test]
    fn restarts_remember_per_key_and_forget_after_a_stable_run() {
        let r = Restarts::default();
        assert_eq!(r.decide("a", None), RestartDecision::Start { starts: 1 });
        assert!(matches!(
            r.decide("a", None),
            RestartDecision::Wait { starts: 1, .. }
        ));
        assert_eq!(r.decide("b", None), RestartDecision::Start { starts: 1 });
        assert_eq!(r.starts("a"), 1);
        r.running_for("a", Some(Duration::from_secs(5)));
        assert_eq!(r.len(), 2, "a short run keeps the streak");
        r.running_for("a", Some(RESTART_STABLE_AFTER));
        assert_eq!(r.starts("a"), 0);
        r.forget("b");
        assert!(r.is_empty());
    }

    #[test]
    fn a_restarting_container_says_how_often_how_it_ended_and_when_next() {
        let m = restarting_message("c-w0", Some(137), 3, Some(Duration::from_millis(39_500)));
        assert_eq!(
            m,
            "Container c-w0 keeps stopping (last exit code 137); started again 3 time(s) \
             without staying up for 60s; next start in 39s"
        );
        let m = restarting_message("c-lb", None, 1, None);
        assert!(
            m.contains("last exit code unknown") && !m.contains("next start"),
            "{m}"
        );
    }
}
