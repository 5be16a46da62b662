//! Label and field selectors, in the API server's syntax, as far as CAPI, KCP and CABPK use
//! them (docs/in-memory.md): labels `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
//! `k notin (a,b)`, comma-joined; fields `metadata.name`, `metadata.namespace` and (Pods)
//! `spec.nodeName`, with `=`, `==` or `!=`. Anything else is a 400, never a silent match-all.
use super::status::ApiError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas outside parentheses.
fn terms(s: &str) -> Result<Vec<&str>, ApiError> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(ApiError::bad_request(format!(
                "unable to parse requirement: unbalanced parentheses in {s:?}"
            )));
        }
    }
    if depth != 0 {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: unbalanced parentheses in {s:?}"
        )));
    }
    out.push(&s[start..]);
    Ok(out)
}

/// A label key or value as the API server accepts them: no whitespace or operator characters.
fn word(s: &str, what: &str, whole: &str) -> Result<String, ApiError> {
    let ok = s.len() <= 317
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok && (what == "value" || !s.is_empty()) {
        Ok(s.to_string())
    } else {
        Err(ApiError::bad_request(format!(
            "unable to parse requirement: invalid label {what} {s:?} in {whole:?}"
        )))
    }
}

fn set(rest: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: expected a parenthesised set in {whole:?}"
            ))
        })?;
    inner
        .split(',')
        .map(|v| word(v.trim(), "value", whole))
        .collect()
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in terms(s)? {
            let t = term.trim();
            let req = if let Some(k) = t.strip_prefix('!') {
                LabelReq::NotExists(word(k.trim(), "key", s)?)
            } else if let Some((k, v)) = t.split_once("!=") {
                LabelReq::NotEq(word(k.trim(), "key", s)?, word(v.trim(), "value", s)?)
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                LabelReq::Eq(word(k.trim(), "key", s)?, word(v.trim(), "value", s)?)
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                LabelReq::NotIn(word(k.trim(), "key", s)?, set(rest, s)?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                LabelReq::In(word(k.trim(), "key", s)?, set(rest, s)?)
            } else {
                // A bare key: it must be a single word (this also refuses `>`/`<`, which the
                // API server has but nothing we serve uses).
                LabelReq::Exists(word(t, "key", s)?)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Does an object with these labels match? `get` looks a label up.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|req| match req {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
        })
    }
}

/// The fields a field selector may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Name,
    Namespace,
    NodeName,
}

/// A parsed `fieldSelector`: each term an (in)equality on one field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(Field, bool, String)>);

impl FieldSelector {
    /// `pods` says whether `spec.nodeName` may be named (the API server allows it on Pods only).
    pub fn parse(s: &str, pods: bool) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(out));
        }
        for term in s.split(',') {
            let (key, equal, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector {s:?}: {term:?} is not of the form field=value"
                )));
            };
            let field = match key.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                "spec.nodeName" if pods => Field::NodeName,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {other}"
                    )));
                }
            };
            out.push((field, equal, value.trim().to_string()));
        }
        Ok(Self(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Does an object match? `get` gives a field's value (`""` when unset, as the API server
    /// compares).
    pub fn matches<'a>(&self, get: impl Fn(Field) -> &'a str) -> bool {
        self.0
            .iter()
            .all(|(field, equal, value)| (get(*field) == value) == *equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |k| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v)
    }

    #[test]
    fn label_selectors_as_capi_and_kcp_write_them() {
        let pod = [("tier", "control-plane"), ("component", "etcd")];
        let kcp = LabelSelector::parse(
            "tier=control-plane,component in (kube-apiserver,kube-controller-manager,kube-scheduler,etcd)",
        )
        .unwrap();
        assert!(kcp.matches(labels(&pod)));
        assert!(!kcp.matches(labels(&[("tier", "control-plane"), ("component", "dns")])));

        let cp = LabelSelector::parse("node-role.kubernetes.io/control-plane").unwrap();
        assert!(cp.matches(labels(&[("node-role.kubernetes.io/control-plane", "")])));
        assert!(!cp.matches(labels(&[])));

        let cases = [
            ("component!=etcd", false),
            ("component==etcd", true),
            ("!tier", false),
            ("!absent", true),
            ("component notin (etcd)", false),
            ("component notin (dns, proxy)", true),
            ("absent notin (x)", true),
            ("absent in (x)", false),
            ("", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(labels(&pod)),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn bad_label_selectors_are_a_400() {
        for bad in ["a in (b", "a in b", "a b", "=v", "a>1", "a in ((b))", "x)"] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert_eq!(e.code, 400, "{bad}");
        }
    }

    #[test]
    fn field_selectors_name_namespace_and_pods_node_name() {
        let f = FieldSelector::parse("spec.nodeName=n1", true).unwrap();
        let get = |node: &'static str| {
            move |field| match field {
                Field::NodeName => node,
                Field::Name => "p",
                Field::Namespace => "kube-system",
            }
        };
        assert!(f.matches(get("n1")));
        assert!(!f.matches(get("n2")));
        let f = FieldSelector::parse("metadata.name!=p,metadata.namespace==kube-system", false)
            .unwrap();
        assert!(!f.matches(get("n1")));
        assert_eq!(
            FieldSelector::parse("spec.nodeName=n1", false)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            FieldSelector::parse("status.phase=Running", true)
                .unwrap_err()
                .message,
            "field label not supported: status.phase"
        );
        assert_eq!(
            FieldSelector::parse("nonsense", true).unwrap_err().code,
            400
        );
    }
}
