//! The typed `spec.backend.inMemory` of upstream's DevCluster and DevMachine (and of the
//! DevClusterTemplate and DevMachineTemplate, whose `spec.template.spec` is the same spec),
//! read from the JSON that [`crate::api::dev`] keeps as written.
//!
//! Upstream v1beta2's shapes: a DevCluster's `inMemory` is an empty object; a DevMachine's has
//! four optional components, `vm`, `node`, `apiServer` and `etcd`, each with an optional
//! `provisioning: {startupDuration, startupJitter}`. `startupDuration` is a Go duration string
//! (`"10s"`, `"1m30s"`, `"500ms"`) and is required once `provisioning` is given;
//! `startupJitter` is a decimal string (`"0.2"`), empty or absent meaning none. A component or
//! a `provisioning` left out is a zero delay, as upstream.
//!
//! Stricter than upstream, by design: a negative duration and a jitter outside 0..=1 (or
//! not finite) are refused here with a [`SpecError`] (upstream parses them, then a negative
//! delay or jitter simply does not wait, and a jitter above 1 waits longer). Keys this module
//! does not know are ignored, as upstream's API server prunes them.
use std::time::Duration;

use serde_json::{Map, Value};

use crate::api::{
    common::json_kind as type_name,
    dev::{DevClusterBackend, DevMachineBackend},
};

/// Why an `inMemory` spec cannot be read. `field` is the path below the backend, such as
/// `inMemory.vm.provisioning.startupDuration`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{field}: expected {expected}, found {found}")]
    WrongType {
        field: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{field}: required")]
    Missing { field: String },
    #[error("{field}: invalid duration {value:?}: {reason}")]
    Duration {
        field: String,
        value: String,
        reason: DurationError,
    },
    #[error("{field}: invalid jitter {value:?}: {reason}")]
    Jitter {
        field: String,
        value: String,
        reason: JitterError,
    },
}

/// What is wrong with a Go duration string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty")]
    Empty,
    #[error("not a number followed by a unit (such as \"10s\", \"1m30s\", \"500ms\")")]
    Malformed,
    #[error("a number without a unit (ns, us, µs, ms, s, m, h)")]
    MissingUnit,
    #[error("unknown unit {0:?} (ns, us, µs, ms, s, m, h)")]
    UnknownUnit(String),
    #[error("longer than Go's longest duration (about 292 years)")]
    Overflow,
    #[error("negative")]
    Negative,
}

/// What is wrong with a jitter string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JitterError {
    #[error("not a decimal number")]
    NotANumber,
    #[error("not finite")]
    NotFinite,
    #[error("outside 0.0..=1.0")]
    OutOfRange,
}

/// The spec of an in-memory DevCluster: upstream's is an empty object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InMemoryClusterSpec;

/// The spec of an in-memory DevMachine: how long each of its parts takes to come up. `None`
/// where the component (or its `provisioning`) is left out: no delay.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InMemoryMachineSpec {
    pub vm: Option<Provisioning>,
    pub node: Option<Provisioning>,
    pub api_server: Option<Provisioning>,
    pub etcd: Option<Provisioning>,
}

/// Upstream's `CommonProvisioningSettings`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Provisioning {
    /// `startupDuration`.
    pub startup_duration: Duration,
    /// `startupJitter`: 0 when absent or empty; else within 0..=1.
    pub startup_jitter: f64,
}

/// A uniform draw in `0.0..1.0`, taken by the caller (upstream draws anew on every reconcile;
/// a caller may keep one per machine so that the delay does not move).
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Draw(f64);

/// A draw outside `0.0..1.0` (or NaN).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("a jitter draw must be within 0.0..1.0, got {0}")]
pub struct DrawError(pub f64);

impl Draw {
    pub fn new(value: f64) -> Result<Self, DrawError> {
        if (0.0..1.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(DrawError(value))
        }
    }

    /// A draw from 64 random (or hashed) bits: the top 53, as a fraction of 2^53.
    pub fn from_bits(bits: u64) -> Self {
        Self((bits >> 11) as f64 / (1u64 << 53) as f64)
    }

    pub fn value(self) -> f64 {
        self.0
    }
}

impl Provisioning {
    /// How long this part takes with the given draw: `startupDuration` plus
    /// `draw × startupJitter × startupDuration`, to the nanosecond below, as upstream computes it.
    pub fn delay(&self, draw: Draw) -> Duration {
        let base = self.startup_duration;
        if self.startup_jitter <= 0.0 {
            return base;
        }
        // Upstream: time.Duration(rand * jitter * float64(d)), truncated toward zero.
        let extra = draw.0 * self.startup_jitter * base.as_nanos() as f64;
        base + Duration::from_nanos(extra as u64)
    }
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, SpecError> {
    v.as_object().ok_or_else(|| SpecError::WrongType {
        field: field.to_owned(),
        expected: "an object",
        found: type_name(v),
    })
}

/// A key of an object, `null` counted as absent (as Go decodes it into a nil pointer).
fn member<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, SpecError> {
    v.as_str().ok_or_else(|| SpecError::WrongType {
        field: field.to_owned(),
        expected: "a string",
        found: type_name(v),
    })
}

impl InMemoryClusterSpec {
    /// Reads a DevCluster's `spec.backend.inMemory` (an object; its keys are ignored).
    pub fn from_value(v: &Value) -> Result<Self, SpecError> {
        object(v, "inMemory")?;
        Ok(Self)
    }

    /// The in-memory spec of a DevCluster (or a DevClusterTemplate's `spec.template.spec`)
    /// backend, if it asks for that backend.
    pub fn of(backend: &DevClusterBackend) -> Result<Option<Self>, SpecError> {
        backend.in_memory.as_ref().map(Self::from_value).transpose()
    }
}

impl InMemoryMachineSpec {
    /// Reads a DevMachine's `spec.backend.inMemory`.
    pub fn from_value(v: &Value) -> Result<Self, SpecError> {
        let obj = object(v, "inMemory")?;
        let part = |key: &str| -> Result<Option<Provisioning>, SpecError> {
            let field = format!("inMemory.{key}");
            let Some(component) = member(obj, key) else {
                return Ok(None);
            };
            let component = object(component, &field)?;
            member(component, "provisioning")
                .map(|p| Provisioning::from_value(p, &format!("{field}.provisioning")))
                .transpose()
        };
        Ok(Self {
            vm: part("vm")?,
            node: part("node")?,
            api_server: part("apiServer")?,
            etcd: part("etcd")?,
        })
    }

    /// The in-memory spec of a DevMachine (or a DevMachineTemplate's `spec.template.spec`)
    /// backend, if it asks for that backend.
    pub fn of(backend: &DevMachineBackend) -> Result<Option<Self>, SpecError> {
        backend.in_memory.as_ref().map(Self::from_value).transpose()
    }
}

impl Provisioning {
    fn from_value(v: &Value, field: &str) -> Result<Self, SpecError> {
        let obj = object(v, field)?;
        let duration_field = format!("{field}.startupDuration");
        let duration = member(obj, "startupDuration").ok_or_else(|| SpecError::Missing {
            field: duration_field.clone(),
        })?;
        let duration = string(duration, &duration_field)?;
        let startup_duration =
            parse_go_duration(duration).map_err(|reason| SpecError::Duration {
                field: duration_field,
                value: duration.to_owned(),
                reason,
            })?;
        let jitter_field = format!("{field}.startupJitter");
        let startup_jitter = match member(obj, "startupJitter") {
            None => 0.0,
            Some(j) => {
                let j = string(j, &jitter_field)?;
                parse_jitter(j).map_err(|reason| SpecError::Jitter {
                    field: jitter_field,
                    value: j.to_owned(),
                    reason,
                })?
            }
        };
        Ok(Self {
            startup_duration,
            startup_jitter,
        })
    }
}

/// A jitter string: empty is none (as upstream); else a finite decimal within 0..=1.
pub fn parse_jitter(s: &str) -> Result<f64, JitterError> {
    if s.is_empty() {
        return Ok(0.0);
    }
    let v: f64 = s.parse().map_err(|_| JitterError::NotANumber)?;
    if !v.is_finite() {
        return Err(JitterError::NotFinite);
    }
    if !(0.0..=1.0).contains(&v) {
        return Err(JitterError::OutOfRange);
    }
    Ok(v)
}

/// Go's largest duration, in nanoseconds.
const GO_MAX_NANOS: u64 = i64::MAX as u64;

/// Parses a Go duration string as Go's `time.ParseDuration` does (a sign, then one or more
/// decimal numbers each with a unit: `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`; `"0"` alone
/// needs no unit), refusing negative values.
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(if s.is_empty() {
            DurationError::Empty
        } else {
            DurationError::Malformed
        });
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let b = rest.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(DurationError::Malformed);
        }
        // The integer part.
        let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &b[..int_len] {
            if v > (1u64 << 63) / 10 {
                return Err(DurationError::Overflow);
            }
            v = v * 10 + u64::from(c - b'0');
            if v > 1u64 << 63 {
                return Err(DurationError::Overflow);
            }
        }
        rest = &rest[int_len..];
        // The fraction: digits past what fits are read but dropped, as Go does.
        let (mut f, mut scale, mut frac_len) = (0u64, 1.0f64, 0usize);
        if rest.starts_with('.') {
            rest = &rest[1..];
            frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let mut overflow = false;
            for c in rest[..frac_len].bytes() {
                if overflow {
                    continue;
                }
                if f > GO_MAX_NANOS / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > 1u64 << 63 {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            rest = &rest[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return Err(DurationError::Malformed);
        }
        // The unit: up to the next digit or dot.
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(DurationError::MissingUnit);
        }
        let unit_name = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit: u64 = match unit_name {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => return Err(DurationError::UnknownUnit(other.to_owned())),
        };
        if v > (1u64 << 63) / unit {
            return Err(DurationError::Overflow);
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > 1u64 << 63 {
                return Err(DurationError::Overflow);
            }
        }
        total = total.checked_add(v).ok_or(DurationError::Overflow)?;
        if total > 1u64 << 63 {
            return Err(DurationError::Overflow);
        }
    }
    if neg && total > 0 {
        return Err(DurationError::Negative);
    }
    if total > GO_MAX_NANOS {
        return Err(DurationError::Overflow);
    }
    Ok(Duration::from_nanos(total))
}

#[cfg(test)]
mod tests;
