//! Naming YAML values in messages, and reading scalars the way cloud-init does: shared by the
//! cloud-config parser and the modules it hands parts of a document to.
use serde_yaml_ng::Value;

use super::{
    plan::{display_path, shorten},
    redact,
};

/// What a value is, for a message ("expected a list, found a string").
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A mapping key as it may appear in a message: bounded, and redacted like any value.
pub(crate) fn key_name(k: &Value) -> String {
    let name = match k {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        _ => "<non-scalar key>".into(),
    };
    shorten(&redact(&display_path(&name)), 64)
}

/// A scalar as text, the way cloud-init would `str()` it.
pub(crate) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Tagged(t) => scalar(&t.value),
        _ => None,
    }
}
