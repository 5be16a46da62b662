//! Reading Ignition's JSON: typed accessors whose errors name the location.
use super::*;

pub(super) use crate::api::common::json_kind as kind;

pub(super) fn invalid(location: impl Into<String>, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::Invalid {
        location: location.into(),
        reason: reason.into(),
    }
}

pub(super) fn object<'a>(
    v: Option<&'a Value>,
    loc: &str,
) -> Result<Option<&'a Map<String, Value>>, BootstrapError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(invalid(
            loc,
            format!("must be an object, found {}", kind(other)),
        )),
    }
}

pub(super) fn array<'a>(v: Option<&'a Value>, loc: &str) -> Result<&'a [Value], BootstrapError> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(invalid(
            loc,
            format!("must be an array, found {}", kind(other)),
        )),
    }
}

pub(super) fn string<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    loc: &str,
) -> Result<Option<&'a str>, BootstrapError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(
            loc,
            format!("{key} must be a string, found {}", kind(other)),
        )),
    }
}

pub(super) fn boolean(
    m: &Map<String, Value>,
    key: &str,
    loc: &str,
) -> Result<Option<bool>, BootstrapError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(invalid(
            loc,
            format!("{key} must be true or false, found {}", kind(other)),
        )),
    }
}

pub(super) fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_empty),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

pub(super) fn entry<'a>(v: &'a Value, loc: &str) -> Result<&'a Map<String, Value>, BootstrapError> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(invalid(
            loc,
            format!("must be an object, found {}", kind(other)),
        )),
    }
}
