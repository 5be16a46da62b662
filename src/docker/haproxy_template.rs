//! `customHAProxyConfigTemplateRef` templates, evaluated as upstream CAPD does: Go
//! `text/template` (the `gotmpl` crate, not an evaluator of ours) over upstream's data model,
//! with upstream's one extra function.
//!
//! The data, field for field as upstream's `loadbalancer.ConfigData`:
//! - `.FrontendControlPlanePort` (string): the port the LB listens on;
//! - `.BackendControlPlanePort` (string): the kube-apiservers' port inside the nodes (`6443`);
//! - `.BackendServers` (map, container name -> `{ .Address (string), .Weight (int) }`), ranged
//!   in sorted key order as Go does;
//! - `.IPv6` (bool): true for an IPv6-only cluster.
//!
//! Functions: Go's builtins plus `JoinHostPort host port` (Go's `net.JoinHostPort`).
//!
//! A referenced field that does not exist is an error, as it is for upstream's struct (not Go's
//! `<no value>` for a map). A text without `{{` is a template that renders to itself, so a
//! complete haproxy.cfg (what capd-rs accepted before it evaluated templates) is still used
//! byte for byte.
//!
//! The template comes from a ConfigMap, so evaluation is bounded: at most
//! [`MAX_RANGE_ITERATIONS`] range iterations, `gotmpl`'s recursion limit for `{{template}}`,
//! and at most [`MAX_RENDERED_BYTES`] of output.
use std::collections::BTreeMap;
use std::fmt;

use gotmpl::{MissingKey, Template, Value};

use super::haproxy::{HaproxyConfig, join_host_port};

/// The name templates see in their error messages (upstream's).
const TEMPLATE_NAME: &str = "loadbalancer-config";
/// Range iterations per evaluation: far above any real backend list.
pub const MAX_RANGE_ITERATIONS: u64 = 100_000;
/// The rendered config is written into the LB container through exec's stdin.
pub const MAX_RENDERED_BYTES: usize = 1024 * 1024;

/// Why a template could not be used; the message is the template engine's (line and column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot parse the template: {0}")]
    Parse(String),
    #[error("cannot evaluate the template: {0}")]
    Evaluate(String),
}

/// A parsed template, ready to render for any set of backends.
pub struct HaproxyTemplate(Template);

impl HaproxyTemplate {
    /// Parse `text` as a Go template with upstream's function set.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        Template::new(TEMPLATE_NAME)
            .missing_key(MissingKey::Error)
            .max_range_iters(MAX_RANGE_ITERATIONS)
            .func("JoinHostPort", join_host_port_func)
            .parse(text)
            .map(HaproxyTemplate)
            .map_err(|e| TemplateError::Parse(e.to_string()))
    }

    /// The haproxy.cfg this template gives for `cfg`.
    pub fn render(&self, cfg: &HaproxyConfig) -> Result<String, TemplateError> {
        let mut out = Bounded::default();
        self.0
            .execute_fmt(&mut out, &config_data(cfg))
            .map_err(|e| {
                if out.overflow {
                    TemplateError::Evaluate(format!(
                        "the rendered config exceeds {MAX_RENDERED_BYTES} bytes"
                    ))
                } else {
                    TemplateError::Evaluate(e.to_string())
                }
            })?;
        Ok(out.text)
    }
}

/// Parse and render in one go.
pub fn render(text: &str, cfg: &HaproxyConfig) -> Result<String, TemplateError> {
    HaproxyTemplate::parse(text)?.render(cfg)
}

/// Upstream's `ConfigData`: ports are strings there, weights ints.
fn config_data(cfg: &HaproxyConfig) -> Value {
    let servers: BTreeMap<String, Value> = cfg
        .servers
        .iter()
        .map(|(name, b)| {
            let server: BTreeMap<String, Value> = [
                (
                    "Address".to_string(),
                    Value::String(b.address.as_str().into()),
                ),
                ("Weight".to_string(), Value::Int(i64::from(b.weight))),
            ]
            .into();
            (name.clone(), Value::from(server))
        })
        .collect();
    let data: BTreeMap<String, Value> = [
        (
            "FrontendControlPlanePort".to_string(),
            Value::String(cfg.frontend_port.to_string().into()),
        ),
        (
            "BackendControlPlanePort".to_string(),
            Value::String(cfg.backend_port.to_string().into()),
        ),
        ("BackendServers".to_string(), Value::from(servers)),
        ("IPv6".to_string(), Value::Bool(cfg.ipv6)),
    ]
    .into();
    Value::from(data)
}

/// `JoinHostPort host port`, both strings as in Go (a number is taken as its decimal text).
fn join_host_port_func(args: &[Value]) -> gotmpl::Result<Value> {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::Uint(u) => Some(u.to_string()),
        _ => None,
    };
    match args {
        [host, port] => match (text(host), text(port)) {
            (Some(host), Some(port)) => Ok(Value::String(join(&host, &port).into())),
            _ => Err(gotmpl::TemplateError::Exec(
                "JoinHostPort: host and port must be strings".into(),
            )),
        },
        _ => Err(gotmpl::TemplateError::Exec(format!(
            "JoinHostPort: wants 2 arguments, got {}",
            args.len()
        ))),
    }
}

/// [`join_host_port`] for a port given as text.
fn join(host: &str, port: &str) -> String {
    match port.parse::<u16>() {
        Ok(p) => join_host_port(host, p),
        // Go joins any text; so do we.
        Err(_) if host.contains(':') => format!("[{host}]:{port}"),
        Err(_) => format!("{host}:{port}"),
    }
}

/// A `fmt::Write` that refuses to grow past [`MAX_RENDERED_BYTES`].
#[derive(Default)]
struct Bounded {
    text: String,
    /// Set when a write was refused, so the error can say why.
    overflow: bool,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.text.len() + s.len() > MAX_RENDERED_BYTES {
            self.overflow = true;
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::haproxy::{self, Backend};

    fn cfg(ipv6: bool, servers: &[(&str, &str)]) -> HaproxyConfig {
        let mut c = HaproxyConfig::new(7443, ipv6);
        for (name, address) in servers {
            c.servers.insert(
                name.to_string(),
                Backend {
                    address: address.to_string(),
                    weight: 100,
                },
            );
        }
        c
    }

    /// Upstream's `DefaultTemplate`, read from the Go module cache at test time (nothing of
    /// upstream's text is in this repository). Fails, naming why, without `go` or the module.
    fn upstream_default_template() -> String {
        let out = std::process::Command::new("go")
            .args([
                "mod",
                "download",
                "-json",
                "sigs.k8s.io/cluster-api/test@v1.14.2",
            ])
            .current_dir(std::env::temp_dir())
            .output()
            .expect("this test needs `go` on PATH to read upstream CAPD's template");
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "go mod download -json sigs.k8s.io/cluster-api/test@v1.14.2 gave no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let dir = info["Dir"].as_str().unwrap_or_else(|| {
            panic!("go mod download found no module directory: {info}");
        });
        let path = format!("{dir}/infrastructure/docker/internal/loadbalancer/config.go");
        let src = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read upstream's template at {path}: {e}"));
        let start = src
            .find("const DefaultTemplate = `")
            .unwrap_or_else(|| panic!("no `const DefaultTemplate` in {path}"))
            + "const DefaultTemplate = `".len();
        let len = src[start..]
            .find('`')
            .unwrap_or_else(|| panic!("unterminated DefaultTemplate in {path}"));
        src[start..start + len].to_string()
    }

    fn lines_with<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines()
            .map(str::trim_end)
            .filter(|l| l.trim_start().starts_with(prefix))
            .collect()
    }

    #[test]
    fn upstreams_default_template_renders_port_and_backends() {
        let tmpl = upstream_default_template();
        assert!(tmpl.contains("{{"), "upstream's template has actions");
        let out = render(
            &tmpl,
            &cfg(false, &[("c-cp-b", "172.18.0.5"), ("c-cp-a", "172.18.0.4")]),
        )
        .unwrap();
        assert_eq!(lines_with(&out, "bind *:7443"), ["  bind *:7443"]);
        assert!(
            lines_with(&out, "bind :::").is_empty(),
            "no IPv6 bind: {out}"
        );
        assert_eq!(
            lines_with(&out, "server "),
            [
                "  server c-cp-a 172.18.0.4:6443 weight 100 check check-ssl verify none resolvers docker resolve-prefer ipv4",
                "  server c-cp-b 172.18.0.5:6443 weight 100 check check-ssl verify none resolvers docker resolve-prefer ipv4",
            ]
        );
        // Where the directives differ from our own default (comments, stats admin, strict
        // limits), the server block is still the same text as ours renders.
        let ours = haproxy::render(&cfg(
            false,
            &[("c-cp-b", "172.18.0.5"), ("c-cp-a", "172.18.0.4")],
        ));
        let tail = |s: &str| s[s.find("backend kube-apiservers").unwrap()..].to_string();
        assert_eq!(tail(&out), tail(&ours));
    }

    #[test]
    fn upstreams_default_template_in_its_ipv6_form() {
        let out = render(
            &upstream_default_template(),
            &cfg(
                true,
                &[
                    ("c-cp-a", "fc00:f853:ccd:e793::4"),
                    ("c-cp-b", "fc00:f853:ccd:e793::5"),
                ],
            ),
        )
        .unwrap();
        assert_eq!(lines_with(&out, "bind *:7443"), ["  bind *:7443"]);
        assert_eq!(lines_with(&out, "bind :::"), ["  bind :::7443;"]);
        assert_eq!(
            lines_with(&out, "server "),
            [
                "  server c-cp-a [fc00:f853:ccd:e793::4]:6443 weight 100 check check-ssl verify none resolvers docker resolve-prefer ipv6",
                "  server c-cp-b [fc00:f853:ccd:e793::5]:6443 weight 100 check check-ssl verify none resolvers docker resolve-prefer ipv6",
            ]
        );
    }

    #[test]
    fn a_plain_config_renders_to_itself() {
        let plain = "global\n  daemon\n\nfrontend x\n  bind *:6443 # 100% {not a template}\n";
        assert_eq!(
            render(plain, &cfg(false, &[("a", "1.2.3.4")])).unwrap(),
            plain
        );
    }

    #[test]
    fn weights_and_join_host_port_follow_go() {
        let mut c = cfg(false, &[("a", "10.0.0.1")]);
        c.servers.get_mut("a").unwrap().weight = 0;
        let t = "{{ range $n, $b := .BackendServers }}{{ $n }}={{ JoinHostPort $b.Address $.BackendControlPlanePort }}/{{ $b.Weight }}{{ end }} {{ JoinHostPort \"::1\" \"80\" }}";
        assert_eq!(render(t, &c).unwrap(), "a=10.0.0.1:6443/0 [::1]:80");
    }

    #[test]
    fn bad_templates_are_named_errors_not_panics() {
        let c = cfg(false, &[]);
        let parse = render("bind *:{{ .FrontendControlPlanePort ", &c).unwrap_err();
        assert!(matches!(parse, TemplateError::Parse(_)), "{parse}");
        let missing = render("{{ .NoSuchField }}", &c).unwrap_err();
        assert!(
            matches!(missing, TemplateError::Evaluate(ref m) if m.contains("NoSuchField")),
            "{missing}"
        );
        let func = render("{{ nosuchfunc 1 }}", &c).unwrap_err();
        assert!(func.to_string().contains("nosuchfunc"), "{func}");
        let args = render("{{ JoinHostPort \"a\" }}", &c).unwrap_err();
        assert!(args.to_string().contains("JoinHostPort"), "{args}");
        // Recursion and output are bounded.
        let recursive = render(
            "{{ define \"r\" }}x{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}",
            &c,
        );
        assert!(recursive.is_err());
        let endless = render("{{ range 1000000 }}x{{ end }}", &c).unwrap_err();
        assert!(endless.to_string().contains("range"), "{endless}");
        // printf pads to at most 65535 characters; a range multiplies that.
        let huge = render("{{ range 100 }}{{ printf \"%060000d\" 1 }}{{ end }}", &c).unwrap_err();
        assert!(huge.to_string().contains("exceeds"), "{huge}");
    }
}
