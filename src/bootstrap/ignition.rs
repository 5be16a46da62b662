//! The Ignition subset CAPD supports (spec v2.x and v3.x): files, directories, links and systemd
//! units, with inline (`data:` URL) content only.
use serde_json::{Map, Value};

use super::cloud_config::parser_message;
use super::plan::{Plan, display_path, normalize_path, shorten};
use super::{BootstrapError, Format, NodeOptions, Step, decode, kubeadm};

const FORMAT: Format = Format::Ignition;

/// Upstream CAPD appends this to every line of `/etc/kubeadm.sh` that runs `kubeadm init/join`.
pub(crate) const KUBEADM_SH_FLAG: &str = " --ignore-preflight-errors=all";
const KUBEADM_SH: &str = "/etc/kubeadm.sh";
const UNIT_DIR: &str = "/etc/systemd/system";

pub(crate) fn commands(data: &[u8], options: &NodeOptions) -> Result<Vec<Step>, BootstrapError> {
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err(BootstrapError::Empty { format: FORMAT });
    }
    let doc: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(json_err) => match serde_yaml_ng::from_slice::<Value>(data) {
            Ok(v) => v,
            Err(yaml_err) => {
                // Report the parser the author most likely meant.
                let looks_json = data
                    .iter()
                    .find(|b| !b.is_ascii_whitespace())
                    .is_some_and(|b| *b == b'{' || *b == b'[');
                let (syntax, message) = if looks_json {
                    ("JSON", json_err.to_string())
                } else {
                    ("YAML", yaml_err.to_string())
                };
                return Err(BootstrapError::Syntax {
                    format: FORMAT,
                    syntax,
                    message: parser_message(&message),
                });
            }
        },
    };
    let root = match doc {
        Value::Object(root) => root,
        Value::Null => return Err(BootstrapError::Empty { format: FORMAT }),
        other => {
            return Err(BootstrapError::NotAMapping {
                format: FORMAT,
                found: kind(&other),
                hint: "",
            });
        }
    };

    check_ignition_section(&root)?;
    let ignored = ignored_sections(&root);
    if !ignored.is_empty() {
        tracing::warn!(
            sections = %ignored.join(", "),
            "ignition: ignoring unsupported sections (as upstream CAPD does)"
        );
    }

    let mut plan = Plan::default();
    if let Some(storage) = object(root.get("storage"), "storage")? {
        for (i, dir) in array(storage.get("directories"), "storage.directories")?
            .iter()
            .enumerate()
        {
            directory(&mut plan, i, dir)?;
        }
        for (i, file) in array(storage.get("files"), "storage.files")?
            .iter()
            .enumerate()
        {
            self::file(&mut plan, i, file, options)?;
        }
        for (i, link) in array(storage.get("links"), "storage.links")?
            .iter()
            .enumerate()
        {
            self::link(&mut plan, i, link)?;
        }
    }
    if let Some(systemd) = object(root.get("systemd"), "systemd")? {
        units(&mut plan, array(systemd.get("units"), "systemd.units")?)?;
    }
    Ok(plan.into_steps())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid(location: impl Into<String>, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::Invalid {
        location: location.into(),
        reason: reason.into(),
    }
}

fn object<'a>(
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

fn array<'a>(v: Option<&'a Value>, loc: &str) -> Result<&'a [Value], BootstrapError> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(invalid(
            loc,
            format!("must be an array, found {}", kind(other)),
        )),
    }
}

fn string<'a>(
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

fn boolean(m: &Map<String, Value>, key: &str, loc: &str) -> Result<Option<bool>, BootstrapError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(invalid(
            loc,
            format!("{key} must be true or false, found {}", kind(other)),
        )),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_empty),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// `ignition.version` must be 2.x or 3.x; remote config merging is refused.
fn check_ignition_section(root: &Map<String, Value>) -> Result<(), BootstrapError> {
    let Some(ign) = object(root.get("ignition"), "ignition")? else {
        return Err(invalid(
            "ignition.version",
            "missing: an Ignition config must declare its spec version",
        ));
    };
    match string(ign, "version", "ignition")? {
        Some(v) if v.starts_with("2.") || v.starts_with("3.") => {}
        Some(v) => {
            return Err(invalid(
                "ignition.version",
                format!(
                    "unsupported spec version {:?} (supported: 2.x, 3.x)",
                    shorten(v, 16)
                ),
            ));
        }
        None => {
            return Err(invalid(
                "ignition.version",
                "missing: an Ignition config must declare its spec version",
            ));
        }
    }
    if let Some(config) = object(ign.get("config"), "ignition.config")? {
        let remote: Vec<&str> = ["merge", "append", "replace"]
            .into_iter()
            .filter(|k| config.get(*k).is_some_and(|v| !is_empty(v)))
            .collect();
        if !remote.is_empty() {
            return Err(invalid(
                "ignition.config",
                format!(
                    "{} of other configs is not supported (the node cannot fetch them)",
                    remote.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Non-empty sections we do not act on (upstream ignores them too): returned for a warning.
fn ignored_sections(root: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in root {
        match key.as_str() {
            "ignition" => {}
            "storage" | "systemd" => {
                if let Value::Object(section) = value {
                    let supported: &[&str] = if key == "storage" {
                        &["files", "directories", "links"]
                    } else {
                        &["units"]
                    };
                    for (sub, v) in section {
                        if !supported.contains(&sub.as_str()) && !is_empty(v) {
                            out.push(format!("{key}.{}", shorten(sub, 32)));
                        }
                    }
                }
            }
            other if !is_empty(value) => out.push(shorten(other, 32)),
            _ => {}
        }
    }
    out
}

/// `user`/`group` objects (`{id}` or `{name}`) as a chown spec; `None` when root or unset.
fn owner(m: &Map<String, Value>, loc: &str) -> Result<Option<String>, BootstrapError> {
    let part = |key: &str| -> Result<Option<String>, BootstrapError> {
        let Some(o) = object(m.get(key), loc)? else {
            return Ok(None);
        };
        if let Some(name) = string(o, "name", loc)?.filter(|n| !n.is_empty()) {
            return Ok(Some(name.to_string()));
        }
        match o.get("id") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(Some(n.to_string())),
            Some(other) => Err(invalid(
                loc,
                format!(
                    "{key}.id must be a non-negative integer, found {}",
                    kind(other)
                ),
            )),
        }
    };
    let is_root = |p: &Option<String>| matches!(p.as_deref(), None | Some("root" | "0"));
    let (user, group) = (part("user")?, part("group")?);
    if is_root(&user) && is_root(&group) {
        return Ok(None);
    }
    Ok(Some(match (user, group) {
        (Some(u), Some(g)) => format!("{u}:{g}"),
        (Some(u), None) => u,
        (None, Some(g)) => format!(":{g}"),
        (None, None) => unreachable!("both root handled above"),
    }))
}

/// `mode`: an integer (the usual JSON form, e.g. 420 for 0644) or an octal string (from YAML).
fn mode(m: &Map<String, Value>, loc: &str) -> Result<Option<u32>, BootstrapError> {
    let mode = match m.get("mode") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => u64::from_str_radix(s.trim().trim_start_matches("0o"), 8).ok(),
        Some(other) => {
            return Err(invalid(
                loc,
                format!("mode must be a number, found {}", kind(other)),
            ));
        }
    };
    match mode {
        Some(m) if m <= 0o7777 => Ok(Some(m as u32)),
        _ => Err(invalid(loc, "mode is not a file mode between 0 and 0o7777")),
    }
}

/// A resource (`contents` or an `append` item): inline `data:` source, optional gzip.
fn resource(r: &Map<String, Value>, loc: &str) -> Result<Vec<u8>, BootstrapError> {
    let bytes = match string(r, "source", loc)? {
        None | Some("") => Vec::new(),
        Some(src) => decode::data_url(src).map_err(|e| invalid(loc, e))?,
    };
    match string(r, "compression", loc)? {
        None | Some("") => Ok(bytes),
        Some("gzip") => decode::gunzip(&bytes).map_err(|e| invalid(loc, e)),
        Some(other) => Err(invalid(
            loc,
            format!(
                "unsupported compression {:?} (supported: gzip)",
                shorten(other, 16)
            ),
        )),
    }
}

fn entry<'a>(v: &'a Value, loc: &str) -> Result<&'a Map<String, Value>, BootstrapError> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(invalid(
            loc,
            format!("must be an object, found {}", kind(other)),
        )),
    }
}

fn file(plan: &mut Plan, i: usize, v: &Value, options: &NodeOptions) -> Result<(), BootstrapError> {
    let base = format!("storage.files[{i}]");
    let m = entry(v, &base)?;
    let path = normalize_path(string(m, "path", &base)?.unwrap_or(""))
        .map_err(|e| invalid(base.clone(), e))?;
    let loc = format!("{base} ({})", display_path(&path));
    if let Some(fs) = string(m, "filesystem", &loc)?.filter(|fs| *fs != "root") {
        return Err(invalid(
            loc,
            format!(
                "filesystem {:?} is not supported (only root)",
                shorten(fs, 32)
            ),
        ));
    }

    let fix = |bytes: Vec<u8>| {
        if path == KUBEADM_SH {
            kubeadm_sh(bytes)
        } else {
            bytes
        }
    };
    // v2: `append: true` appends `contents`; v3: `append` is a list of extra resources.
    let (append_contents, mut appends): (bool, &[Value]) = match m.get("append") {
        None | Some(Value::Null) => (false, &[]),
        Some(Value::Bool(b)) => (*b, &[]),
        Some(Value::Array(a)) => (false, a),
        Some(other) => {
            return Err(invalid(
                loc,
                format!(
                    "append must be a boolean or an array, found {}",
                    kind(other)
                ),
            ));
        }
    };
    match object(m.get("contents"), &loc)? {
        // CABPK's kubeadm config, rewritten for a kind-style node. Its whole content is known only
        // when `contents` replaces the file: v3 append fragments are folded in first, so the
        // rewrite sees what kubeadm will read. A pure append is left alone.
        Some(contents) if !append_contents && kubeadm::is_config_path(FORMAT, &path) => {
            let mut bytes = resource(contents, &loc)?;
            for (j, a) in appends.iter().enumerate() {
                let aloc = format!("{loc} append[{j}]");
                bytes.extend(resource(entry(a, &aloc)?, &aloc)?);
            }
            appends = &[];
            plan.write_file(&path, kubeadm::rewrite(&loc, &bytes, options)?, false);
        }
        Some(contents) => {
            let bytes = resource(contents, &loc)?;
            plan.write_file(&path, fix(bytes), append_contents);
        }
        // No contents and nothing to append: create the file if missing, keep it if present.
        None if appends.is_empty() => plan.write_file(&path, Vec::new(), true),
        None => {}
    }
    for (j, a) in appends.iter().enumerate() {
        let aloc = format!("{loc} append[{j}]");
        let bytes = resource(entry(a, &aloc)?, &aloc)?;
        plan.write_file(&path, fix(bytes), true);
    }
    if let Some(mode) = mode(m, &loc)? {
        plan.chmod(&path, mode);
    }
    if let Some(owner) = owner(m, &loc)? {
        plan.chown(&path, &owner);
    }
    Ok(())
}

fn directory(plan: &mut Plan, i: usize, v: &Value) -> Result<(), BootstrapError> {
    let base = format!("storage.directories[{i}]");
    let m = entry(v, &base)?;
    let raw = string(m, "path", &base)?.unwrap_or("").trim();
    let trimmed = raw.trim_end_matches('/');
    if trimmed.is_empty() && raw.starts_with('/') {
        return Ok(()); // "/" itself
    }
    let path = normalize_path(trimmed).map_err(|e| invalid(base.clone(), e))?;
    let loc = format!("{base} ({})", display_path(&path));
    plan.mkdir_p(&path);
    if let Some(mode) = mode(m, &loc)? {
        plan.chmod(&path, mode);
    }
    if let Some(owner) = owner(m, &loc)? {
        plan.chown(&path, &owner);
    }
    Ok(())
}

fn link(plan: &mut Plan, i: usize, v: &Value) -> Result<(), BootstrapError> {
    let base = format!("storage.links[{i}]");
    let m = entry(v, &base)?;
    let path = normalize_path(string(m, "path", &base)?.unwrap_or(""))
        .map_err(|e| invalid(base.clone(), e))?;
    let loc = format!("{base} ({})", display_path(&path));
    let target = match string(m, "target", &loc)? {
        Some(t) if !t.trim().is_empty() => t.to_string(),
        _ => return Err(invalid(loc, "missing target")),
    };
    let hard = boolean(m, "hard", &loc)?.unwrap_or(false);
    plan.mkdir_p(super::plan::parent(&path));
    let flags = if hard { "-fn" } else { "-sfn" };
    plan.command(vec!["ln".into(), flags.into(), target, path.clone()]);
    if let Some(owner) = owner(m, &loc)? {
        plan.command(vec!["chown".into(), "-h".into(), owner, path]);
    }
    Ok(())
}

/// A unit or drop-in name: a plain file name.
fn unit_name(name: Option<&str>, loc: &str) -> Result<String, BootstrapError> {
    match name.map(str::trim) {
        None | Some("") => Err(invalid(loc, "missing name")),
        Some(n) if n.contains('/') || n == "." || n == ".." || n.contains('\0') => Err(invalid(
            loc,
            format!("name {} must be a plain file name", display_path(n)),
        )),
        Some(n) => Ok(n.to_string()),
    }
}

fn units(plan: &mut Plan, units: &[Value]) -> Result<(), BootstrapError> {
    if units.is_empty() {
        return Ok(());
    }
    let mut enable = Vec::new();
    let mut mask = Vec::new();
    for (i, v) in units.iter().enumerate() {
        let base = format!("systemd.units[{i}]");
        let m = entry(v, &base)?;
        let name = unit_name(string(m, "name", &base)?, &base)?;
        let loc = format!("{base} ({})", display_path(&name));
        if let Some(contents) = string(m, "contents", &loc)? {
            plan.write_file(
                &format!("{UNIT_DIR}/{name}"),
                contents.as_bytes().to_vec(),
                false,
            );
        }
        for (j, d) in array(m.get("dropins"), &loc)?.iter().enumerate() {
            let dloc = format!("{loc} dropins[{j}]");
            let d = entry(d, &dloc)?;
            let dname = unit_name(string(d, "name", &dloc)?, &dloc)?;
            if let Some(contents) = string(d, "contents", &dloc)? {
                plan.write_file(
                    &format!("{UNIT_DIR}/{name}.d/{dname}"),
                    contents.as_bytes().to_vec(),
                    false,
                );
            }
        }
        // v2 spells it `enable` (deprecated) or `enabled`; v3 `enabled`.
        let enabled = boolean(m, "enabled", &loc)?.or(boolean(m, "enable", &loc)?);
        if boolean(m, "mask", &loc)? == Some(true) {
            mask.push(name);
        } else if enabled == Some(true) {
            enable.push(name);
        }
    }
    plan.command(vec!["systemctl".into(), "daemon-reload".into()]);
    for name in mask {
        plan.command(vec!["systemctl".into(), "mask".into(), name]);
    }
    for name in enable {
        plan.command(vec![
            "systemctl".into(),
            "enable".into(),
            "--now".into(),
            name,
        ]);
    }
    Ok(())
}

/// Upstream's `/etc/kubeadm.sh` fix: every line running `kubeadm init` or `kubeadm join` gets
/// ` --ignore-preflight-errors=all` at its end. Non-UTF-8 content is left alone.
fn kubeadm_sh(bytes: Vec<u8>) -> Vec<u8> {
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return e.into_bytes(),
    };
    text.split('\n')
        .map(|line| {
            if line.contains("kubeadm init") || line.contains("kubeadm join") {
                format!("{line}{KUBEADM_SH_FLAG}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::decode::{b64, gzip};

    const V2: &str = include_str!("testdata/cabpk-ignition-v2.json");

    fn steps(doc: &str) -> Vec<Step> {
        commands(doc.as_bytes(), &NodeOptions::default()).unwrap()
    }

    fn err(doc: &str) -> String {
        commands(doc.as_bytes(), &NodeOptions::default())
            .unwrap_err()
            .to_string()
    }

    fn argvs(steps: &[Step]) -> Vec<Vec<&str>> {
        steps
            .iter()
            .map(|s| s.argv.iter().map(String::as_str).collect())
            .collect()
    }

    fn v3(body: &str) -> String {
        format!(r#"{{"ignition":{{"version":"3.4.0"}},{body}}}"#)
    }

    #[test]
    fn cabpk_v2_fixture() {
        let steps = steps(V2);
        let descriptions: Vec<&str> = steps.iter().map(|s| s.description.as_str()).collect();
        assert_eq!(
            descriptions,
            [
                "mkdir -p /etc/kubernetes/pki",
                "write /etc/kubernetes/pki/ca.crt",
                "chmod 0640 /etc/kubernetes/pki/ca.crt",
                "write /etc/kubernetes/pki/ca.key",
                "chmod 0600 /etc/kubernetes/pki/ca.key",
                "mkdir -p /etc/sysctl.d",
                "write /etc/sysctl.d/99-kubernetes.conf",
                "mkdir -p /etc",
                "write /etc/kubeadm.sh",
                "chmod 0700 /etc/kubeadm.sh",
                "write /etc/kubeadm.yml",
                "chmod 0600 /etc/kubeadm.yml",
                "mkdir -p /etc/systemd/system",
                "write /etc/systemd/system/kubeadm.service",
                "run systemctl",
                "run systemctl",
            ]
        );
        let content = |i: usize| String::from_utf8(steps[i].stdin.clone().unwrap()).unwrap();
        assert!(content(1).starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(content(1).ends_with("-----END CERTIFICATE-----\n"));
        assert_eq!(
            content(6),
            "net.ipv4.ip_forward = 1\n",
            "gzip compression honoured"
        );
        let sh = content(8);
        assert!(
            sh.contains("\nkubeadm init --config /etc/kubeadm.yml --ignore-preflight-errors=all\n"),
            "{sh}"
        );
        assert_eq!(sh.matches("--ignore-preflight-errors").count(), 1, "{sh}");
        // The kubeadm config is rewritten (its chmod kept): kubelet flags, kube-proxy config.
        let cfg = content(10);
        assert!(cfg.contains("token: abcdef.0123456789abcdef"), "{cfg}");
        assert!(
            cfg.contains("criSocket: unix:///var/run/containerd/containerd.sock"),
            "{cfg}"
        );
        assert!(cfg.contains("name: runtime-cgroups\n"), "{cfg}");
        assert!(cfg.contains("kind: KubeProxyConfiguration\n"), "{cfg}");
        assert!(content(13).contains("ExecStart=/etc/kubeadm.sh"));
        for s in &steps {
            assert!(!s.description.contains("BEGIN") && !s.description.contains("abcdef."));
        }
    }

    #[test]
    fn kubeadm_config_append_fragments_are_folded_in() {
        let doc = v3(
            r#""storage":{"files":[{"path":"/etc/kubeadm.yml","mode":384,
                "contents":{"source":"data:,apiVersion%3A%20kubeadm.k8s.io%2Fv1beta4%0A"},
                "append":[{"source":"data:,kind%3A%20JoinConfiguration%0A"}]}]}"#,
        );
        let steps = steps(&doc);
        assert_eq!(
            argvs(&steps),
            [
                vec!["mkdir", "-p", "/etc"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/etc/kubeadm.yml"],
                vec!["chmod", "0600", "/etc/kubeadm.yml"],
            ]
        );
        let cfg = String::from_utf8(steps[1].stdin.clone().unwrap()).unwrap();
        assert!(cfg.contains("kind: JoinConfiguration\n"), "{cfg}");
        assert!(cfg.contains("name: fail-swap-on\n"), "{cfg}");
        let msg = err(&v3(
            r#""storage":{"files":[{"path":"/etc/kubeadm.yml","contents":{"source":"data:,a%3A%20%5B"}}]}"#,
        ));
        assert!(
            msg.starts_with(
                "storage.files[0] (/etc/kubeadm.yml): kubeadm config is not valid YAML"
            ),
            "{msg}"
        );
    }

    #[test]
    fn yaml_form_is_accepted() {
        let yaml = "ignition:\n  version: 3.4.0\nstorage:\n  files:\n    - path: /etc/x\n      mode: 0644\n      contents:\n        source: 'data:,hi'\n";
        let steps = steps(yaml);
        assert_eq!(
            argvs(&steps),
            [
                vec!["mkdir", "-p", "/etc"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/etc/x"],
                vec!["chmod", "0644", "/etc/x"],
            ]
        );
        assert_eq!(steps[1].stdin.as_deref(), Some(&b"hi"[..]));
    }

    #[test]
    fn v3_files() {
        let doc = v3(&format!(
            r#""storage":{{"files":[
                {{"path":"/a/gz","contents":{{"source":"data:;base64,{gz}","compression":"gzip"}},"mode":384}},
                {{"path":"/a/nomode","contents":{{"source":"data:,x"}}}},
                {{"path":"/a/empty"}},
                {{"path":"/a/log","append":[{{"source":"data:,one%0A"}},{{"source":"data:,two%0A"}}]}},
                {{"path":"/a/both","contents":{{"source":"data:,base%0A"}},"append":[{{"source":"data:,more%0A"}}],
                  "user":{{"name":"core"}},"group":{{"id":1000}}}},
                {{"path":"/a/g","group":{{"name":"docker"}},"user":{{"id":0}}}}
            ]}}"#,
            gz = b64(&gzip(b"compressed\n"))
        ));
        let steps = steps(&doc);
        assert_eq!(
            argvs(&steps),
            [
                vec!["mkdir", "-p", "/a"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/a/gz"],
                vec!["chmod", "0600", "/a/gz"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/a/nomode"],
                vec!["/bin/sh", "-c", "cat >> \"$0\"", "/a/empty"],
                vec!["/bin/sh", "-c", "cat >> \"$0\"", "/a/log"],
                vec!["/bin/sh", "-c", "cat >> \"$0\"", "/a/log"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/a/both"],
                vec!["/bin/sh", "-c", "cat >> \"$0\"", "/a/both"],
                vec!["chown", "core:1000", "/a/both"],
                vec!["/bin/sh", "-c", "cat >> \"$0\"", "/a/g"],
                vec!["chown", "0:docker", "/a/g"],
            ]
        );
        let stdin = |i: usize| steps[i].stdin.clone().unwrap();
        assert_eq!(stdin(1), b"compressed\n");
        assert_eq!(stdin(3), b"x");
        assert_eq!(stdin(4), b"");
        assert_eq!(stdin(5), b"one\n");
        assert_eq!(stdin(6), b"two\n");
    }

    #[test]
    fn v2_append_flag() {
        let doc = r#"{"ignition":{"version":"2.2.0"},"storage":{"files":[{"filesystem":"root","path":"/etc/hosts","append":true,"contents":{"source":"data:,10.0.0.1%20x%0A"}}]}}"#;
        let steps = steps(doc);
        assert_eq!(
            steps[1].argv,
            ["/bin/sh", "-c", "cat >> \"$0\"", "/etc/hosts"]
        );
        assert_eq!(steps[1].description, "append /etc/hosts");
    }

    #[test]
    fn missing_mode_does_not_panic_and_skips_chmod() {
        let doc = v3(r#""storage":{"files":[{"path":"/x","contents":{"source":"data:,a"}}]}"#);
        assert!(steps(&doc).iter().all(|s| s.argv[0] != "chmod"));
    }

    #[test]
    fn directories_and_links() {
        let doc = v3(r#""storage":{
                "directories":[{"path":"/opt/app/","mode":493},{"path":"/"}],
                "links":[{"path":"/usr/local/bin/kc","target":"/usr/bin/kubectl"},
                         {"path":"/opt/h","target":"/opt/app/f","hard":true,"user":{"name":"core"}}]
            }"#);
        assert_eq!(
            argvs(&steps(&doc)),
            [
                vec!["mkdir", "-p", "/opt/app"],
                vec!["chmod", "0755", "/opt/app"],
                vec!["mkdir", "-p", "/usr/local/bin"],
                vec!["ln", "-sfn", "/usr/bin/kubectl", "/usr/local/bin/kc"],
                vec!["mkdir", "-p", "/opt"],
                vec!["ln", "-fn", "/opt/app/f", "/opt/h"],
                vec!["chown", "-h", "core", "/opt/h"],
            ]
        );
        assert!(err(&v3(r#""storage":{"links":[{"path":"/l"}]}"#)).ends_with("missing target"));
    }

    #[test]
    fn units() {
        let doc = v3(r#""systemd":{"units":[
                {"name":"a.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n",
                 "dropins":[{"name":"10-env.conf","contents":"[Service]\nEnvironment=X=1\n"}]},
                {"name":"ntpd.service","enabled":true},
                {"name":"b.service","contents":"[Unit]\n"},
                {"name":"c.service","mask":true},
                {"name":"d.service","enable":true}
            ]}"#);
        assert_eq!(
            argvs(&steps(&doc)),
            [
                vec!["mkdir", "-p", "/etc/systemd/system"],
                vec![
                    "/bin/sh",
                    "-c",
                    "cat > \"$0\"",
                    "/etc/systemd/system/a.service"
                ],
                vec!["mkdir", "-p", "/etc/systemd/system/a.service.d"],
                vec![
                    "/bin/sh",
                    "-c",
                    "cat > \"$0\"",
                    "/etc/systemd/system/a.service.d/10-env.conf"
                ],
                vec![
                    "/bin/sh",
                    "-c",
                    "cat > \"$0\"",
                    "/etc/systemd/system/b.service"
                ],
                vec!["systemctl", "daemon-reload"],
                vec!["systemctl", "mask", "c.service"],
                vec!["systemctl", "enable", "--now", "a.service"],
                vec!["systemctl", "enable", "--now", "ntpd.service"],
                vec!["systemctl", "enable", "--now", "d.service"],
            ]
        );
        assert!(
            err(&v3(r#""systemd":{"units":[{"name":"../x"}]}"#))
                .contains("must be a plain file name")
        );
        assert_eq!(
            err(&v3(r#""systemd":{"units":[{"enabled":true}]}"#)),
            "systemd.units[0]: missing name"
        );
    }

    #[test]
    fn kubeadm_sh_lines() {
        let out = kubeadm_sh(
            b"#!/bin/bash\nkubeadm join --config /etc/kubeadm.yml\nkubeadm version\n".to_vec(),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "#!/bin/bash\nkubeadm join --config /etc/kubeadm.yml --ignore-preflight-errors=all\nkubeadm version\n"
        );
        assert_eq!(kubeadm_sh(vec![0xff, 0xfe]), vec![0xff, 0xfe]);
        // Only /etc/kubeadm.sh is touched.
        let doc = v3(
            r#""storage":{"files":[{"path":"/etc/other.sh","contents":{"source":"data:,kubeadm%20init"}}]}"#,
        );
        assert_eq!(steps(&doc)[1].stdin.as_deref(), Some(&b"kubeadm init"[..]));
    }

    #[test]
    fn version_and_shape_errors() {
        assert_eq!(
            err(r#"{"storage":{}}"#),
            "ignition.version: missing: an Ignition config must declare its spec version"
        );
        assert!(
            err(r#"{"ignition":{"version":"1.0.0"}}"#)
                .contains("unsupported spec version \"1.0.0\"")
        );
        assert!(err(r#"["a"]"#).contains("must be a mapping at the top level, found an array"));
        assert_eq!(
            commands(b"  \n", &NodeOptions::default()).unwrap_err(),
            BootstrapError::Empty {
                format: Format::Ignition
            }
        );
        assert!(
            err(&v3(r#""storage":[]"#)).starts_with("storage: must be an object, found an array")
        );
        assert!(
            err(&v3(r#""storage":{"files":{}}"#)).starts_with("storage.files: must be an array")
        );
        assert!(
            err(r#"{"ignition":{"version":"3.0.0","config":{"merge":[{"source":"https://x/y.ign"}]}}}"#)
                .contains("merge of other configs is not supported")
        );
        // Only the version section is required.
        assert!(steps(&v3(r#""passwd":{}"#)).is_empty());
    }

    #[test]
    fn syntax_errors_report_position_not_content() {
        let msg = err(
            r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/k","contents":{"source":"data:,SECRETKEY"}}"#,
        );
        assert!(
            msg.starts_with("ignition bootstrap data is not valid JSON: "),
            "{msg}"
        );
        assert!(msg.contains("line 1 column"), "{msg}");
        assert!(!msg.contains("SECRETKEY"), "{msg}");
        let msg = err("ignition:\n  version: [\n");
        assert!(
            msg.starts_with("ignition bootstrap data is not valid YAML: "),
            "{msg}"
        );
    }

    #[test]
    fn file_errors() {
        assert_eq!(
            err(&v3(
                r#""storage":{"files":[{"contents":{"source":"data:,x"}}]}"#
            )),
            "storage.files[0]: missing path"
        );
        let msg = err(&v3(
            r#""storage":{"files":[{"path":"/k","contents":{"source":"https://example.com/k?token=abc"}}]}"#,
        ));
        assert!(
            msg.starts_with("storage.files[0] (/k): contents source with scheme \"https\""),
            "{msg}"
        );
        assert!(!msg.contains("example.com"), "{msg}");
        let msg = err(&v3(
            r#""storage":{"files":[{"path":"/k","contents":{"source":"data:;base64,c2VjcmV0","compression":"gzip"}}]}"#,
        ));
        assert!(
            msg.starts_with("storage.files[0] (/k): content is not valid gzip"),
            "{msg}"
        );
        let msg = err(&v3(
            r#""storage":{"files":[{"path":"/k","contents":{"source":"data:,x","compression":"xz"}}]}"#,
        ));
        assert!(msg.contains("unsupported compression \"xz\""), "{msg}");
        let msg = err(&v3(r#""storage":{"files":[{"path":"/k","mode":99999}]}"#));
        assert!(msg.contains("mode is not a file mode"), "{msg}");
        let msg = err(&v3(r#""storage":{"files":[{"path":"/k","mode":"rw"}]}"#));
        assert!(msg.contains("mode is not a file mode"), "{msg}");
        let msg = err(
            r#"{"ignition":{"version":"2.3.0"},"storage":{"files":[{"filesystem":"oem","path":"/k"}]}}"#,
        );
        assert!(msg.contains("filesystem \"oem\" is not supported"), "{msg}");
    }

    #[test]
    fn ignored_sections_are_listed() {
        let root: Map<String, Value> = serde_json::from_str(
            r#"{"ignition":{"version":"3.4.0","config":{"replace":{"source":null}}},"passwd":{"users":[{"name":"core"}]},
                "storage":{"files":[],"disks":[{"device":"/dev/sdb"}],"filesystems":[]},"systemd":{"units":[]},"kernelArguments":{}}"#,
        )
        .unwrap();
        assert_eq!(ignored_sections(&root), ["passwd", "storage.disks"]);
    }
}
