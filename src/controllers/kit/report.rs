//! The status one reconcile builds, and the one place conditions are written: each carries the
//! object's generation and the time it was set, Ready summarises the kind's conditions, and
//! conditions computed from the generation read follow a spec write of the reconcile's own.
use std::ops::{Deref, DerefMut};

use chrono::{DateTime, SubsecRound, Utc};

use crate::api::conditions::{
    self, Condition, ConditionStatus, Desired, WithConditions, reasons, types,
};

/// The status a reconcile builds: every condition set through it carries the object's
/// generation and the time it was set. The one place conditions are written.
pub struct Report<S> {
    status: S,
    generation: Option<i64>,
}

impl<S: WithConditions + Clone + Default> Report<S> {
    pub fn new(current: Option<&S>, generation: Option<i64>) -> Self {
        Self {
            status: current.cloned().unwrap_or_default(),
            generation,
        }
    }

    /// Set one condition; true if anything changed.
    pub fn set(&mut self, desired: &Desired) -> bool {
        set(
            self.status.conditions_mut(),
            desired,
            self.generation,
            Utc::now(),
        )
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status.conditions()
    }

    /// What a reconcile's last word on conditions is: retired types gone, Ready summarising
    /// `ready_from` (unless deleting: Ready already says Deleting), and the conditions computed
    /// from the generation read carrying `observed` (see [`restamp`]).
    pub(super) fn close(
        &mut self,
        retired: &[&str],
        ready_from: Option<&[&'static str]>,
        observed: Option<i64>,
    ) {
        let conds = self.status.conditions_mut();
        conds.retain(|c| !retired.contains(&c.type_.as_str()));
        if let Some(inputs) = ready_from {
            let ready = summarize_ready(self.status.conditions(), inputs);
            self.set(&ready);
        }
        restamp(self.status.conditions_mut(), self.generation, observed);
    }
}

/// Messages are capped well below the schema's 32 KiB so one noisy command cannot bloat status.
const MAX_MESSAGE: usize = 4096;

/// Set `desired` in `conditions`. `lastTransitionTime` moves only when the status changes;
/// returns true if anything changed.
fn set(
    conditions: &mut Vec<Condition>,
    desired: &Desired,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let message = conditions::truncate(&desired.message, MAX_MESSAGE);
    let now = now.trunc_subsecs(0);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        let changed = existing.status != desired.status
            || existing.reason != desired.reason
            || existing.message != message
            || existing.observed_generation != generation;
        if existing.status != desired.status {
            existing.last_transition_time = now;
        }
        existing.status = desired.status;
        existing.reason = desired.reason.to_string();
        existing.message = message;
        existing.observed_generation = generation;
        return changed;
    }
    conditions.push(Condition {
        type_: desired.type_.to_string(),
        status: desired.status,
        observed_generation: generation,
        last_transition_time: now,
        reason: desired.reason.to_string(),
        message,
    });
    true
}

/// Conditions computed from generation `from` now carry `to`: the object's generation after a
/// spec write of the reconcile's own that none of them depends on (see
/// [`Patcher::observed_generation`]).
fn restamp(conditions: &mut [Condition], from: Option<i64>, to: Option<i64>) {
    if from == to {
        return;
    }
    for c in conditions
        .iter_mut()
        .filter(|c| c.observed_generation == from)
    {
        c.observed_generation = to;
    }
}

/// The `Ready` summary of the given condition types, as CAPI's summary does: True when all are
/// True; otherwise False (or Unknown) with the messages of the ones that are not, in order.
/// A missing input counts as Unknown, "Condition not yet reported".
fn summarize_ready(conditions: &[Condition], inputs: &[&'static str]) -> Desired {
    let mut falses = Vec::new();
    let mut unknowns = Vec::new();
    for t in inputs {
        match conditions::get(conditions, t) {
            Some(c) if c.status == ConditionStatus::True => {}
            Some(c) => {
                let line = if c.message.is_empty() {
                    format!("{t}: {}", c.reason)
                } else {
                    format!("{t}: {}", c.message)
                };
                if c.status == ConditionStatus::False {
                    falses.push(line)
                } else {
                    unknowns.push(line)
                }
            }
            None => unknowns.push(format!("{t}: Condition not yet reported")),
        }
    }
    if !falses.is_empty() {
        falses.extend(unknowns);
        Desired::false_(types::READY, reasons::NOT_READY, falses.join("; "))
    } else if !unknowns.is_empty() {
        Desired::unknown(types::READY, reasons::READY_UNKNOWN, unknowns.join("; "))
    } else {
        Desired::true_(types::READY, reasons::READY)
    }
}

impl<S> Deref for Report<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.status
    }
}

impl<S> DerefMut for Report<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::{ConditionStatus, Desired, reasons};

    #[test]
    fn restamp_moves_only_conditions_of_the_view_generation() {
        let mut c = Vec::new();
        set(&mut c, &Desired::true_("A", "R"), Some(3), Utc::now());
        set(&mut c, &Desired::true_("B", "R"), Some(2), Utc::now());
        restamp(&mut c, Some(3), Some(4));
        let gens: Vec<_> = c.iter().map(|c| c.observed_generation).collect();
        assert_eq!(gens, [Some(4), Some(2)]);
        restamp(&mut c, Some(4), Some(4));
        assert_eq!(c[0].observed_generation, Some(4));
    }
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut cs = Vec::new();
        assert!(set(
            &mut cs,
            &Desired::false_("A", "Waiting", "x"),
            Some(1),
            t(0)
        ));
        assert!(!set(
            &mut cs,
            &Desired::false_("A", "Waiting", "x"),
            Some(1),
            t(5)
        ));
        assert_eq!(cs[0].last_transition_time, t(0));
        assert!(set(
            &mut cs,
            &Desired::false_("A", "Other", "y"),
            Some(1),
            t(6)
        ));
        assert_eq!(
            cs[0].last_transition_time,
            t(0),
            "reason change keeps the time"
        );
        assert!(set(&mut cs, &Desired::true_("A", "Ok"), Some(2), t(7)));
        assert_eq!(cs[0].last_transition_time, t(7));
        assert_eq!(cs[0].observed_generation, Some(2));
        assert_eq!(cs.len(), 1);
    }

    #[test]
    fn long_messages_are_capped() {
        let mut cs = Vec::new();
        set(
            &mut cs,
            &Desired::false_("A", "R", "é".repeat(10_000)),
            None,
            t(0),
        );
        assert!(cs[0].message.len() <= MAX_MESSAGE);
    }

    #[test]
    fn ready_summary() {
        let mut cs = Vec::new();
        let s = summarize_ready(&cs, &["A", "B"]);
        assert_eq!(
            (s.status, s.reason),
            (ConditionStatus::Unknown, reasons::READY_UNKNOWN)
        );
        assert!(s.message.contains("A: Condition not yet reported"));

        set(&mut cs, &Desired::true_("A", "Ok"), None, t(0));
        set(
            &mut cs,
            &Desired::false_("B", "Broken", "engine down"),
            None,
            t(0),
        );
        let s = summarize_ready(&cs, &["A", "B"]);
        assert_eq!(
            (s.status, s.reason),
            (ConditionStatus::False, reasons::NOT_READY)
        );
        assert_eq!(s.message, "B: engine down");

        set(&mut cs, &Desired::true_("B", "Ok"), None, t(0));
        assert_eq!(
            summarize_ready(&cs, &["A", "B"]).status,
            ConditionStatus::True
        );
    }
}
