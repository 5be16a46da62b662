//! cloud-config, as upstream CAPD takes it and then some: `bootcmd` first (as cloud-init runs
//! it, before everything else), then `write_files` and `runcmd` in document order, with `users`
//! created just before the first `runcmd` (cloud-init creates them in its init stage, runcmd runs
//! last). Every other module is accepted, as upstream does, and skipped: [`Planned::skipped`]
//! names it (`ntp`, `mounts`, `disk_setup`, `fs_setup`, ... mean nothing in a container).
use serde_yaml_ng::Value;

use super::plan::{Plan, display_path, normalize_path, shorten};
use super::yaml::{key_name, kind, scalar};
use super::{
    BootstrapError, Format, KUBEADM_IGNORE_PREFLIGHT_ERRORS, NodeOptions, Planned, decode, kubeadm,
    limits, redact, users,
};

const FORMAT: Format = Format::CloudConfig;

/// Keys a `write_files` entry may have. `defer` is accepted and ignored: we have no later stage
/// to defer to, and files are written in order anyway.
const FILE_KEYS: &[&str] = &[
    "path",
    "content",
    "encoding",
    "permissions",
    "owner",
    "append",
    "defer",
];

/// The modules honoured; any other is skipped.
const HONOURED: &[&str] = &["bootcmd", "write_files", "users", "runcmd"];

#[cfg(test)]
pub(crate) fn commands(
    data: &[u8],
    options: &NodeOptions,
) -> Result<Vec<super::Step>, BootstrapError> {
    plan(data, options).map(|p| p.steps)
}

pub(crate) fn plan(data: &[u8], options: &NodeOptions) -> Result<Planned, BootstrapError> {
    let text = std::str::from_utf8(data).map_err(|e| BootstrapError::Syntax {
        format: FORMAT,
        syntax: "UTF-8",
        message: format!("invalid byte at offset {}", e.valid_up_to()),
    })?;
    if let Err(message) = limits::check_yaml_expansion(FORMAT, text)? {
        return Err(BootstrapError::Syntax {
            format: FORMAT,
            syntax: "YAML",
            message: parser_message(&message),
        });
    }
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| BootstrapError::Syntax {
        format: FORMAT,
        syntax: "YAML",
        message: parser_message(&e.to_string()),
    })?;
    let map = match doc {
        Value::Mapping(m) if !m.is_empty() => m,
        Value::Mapping(_) | Value::Null => return Err(BootstrapError::Empty { format: FORMAT }),
        other => {
            return Err(BootstrapError::NotAMapping {
                format: FORMAT,
                found: kind(&other),
                hint: if text.trim_start().starts_with("#!") {
                    " (shell-script user data is not supported; put the commands in runcmd)"
                } else {
                    ""
                },
            });
        }
    };

    if map.get("ignition").is_some_and(Value::is_mapping) {
        return Err(invalid(
            "cloud-config",
            "the data looks like an Ignition config; set the bootstrap Secret's format to \"ignition\"",
        ));
    }

    // A module that asks for nothing (`ntp: {}`, `mounts:`) is not worth a warning.
    let mut skipped: Vec<String> = map
        .iter()
        .filter(|(k, v)| !k.as_str().is_some_and(|k| HONOURED.contains(&k)) && !is_empty(v))
        .map(|(k, _)| key_name(k))
        .collect();
    // Everything is parsed before anything is planned to run: a bad entry anywhere refuses
    // the whole document.
    let users = match map.get("users") {
        Some(v) => users::parse(v)?,
        None => users::Users::default(),
    };
    skipped.extend(users.skipped.iter().cloned());

    let mut plan = Plan::default();
    if let Some(v) = map.get("bootcmd") {
        commands_of(&mut plan, "bootcmd", v, false)?;
    }
    let mut users_planned = false;
    for (key, value) in &map {
        match key.as_str() {
            Some("write_files") => write_files(&mut plan, value, options)?,
            Some("runcmd") => {
                if !users_planned {
                    users::apply(&mut plan, &users);
                    users_planned = true;
                }
                commands_of(&mut plan, "runcmd", value, true)?;
            }
            _ => {}
        }
    }
    if !users_planned {
        users::apply(&mut plan, &users);
    }
    Ok(Planned {
        steps: plan.into_steps(),
        skipped,
    })
}

/// A parser error message made safe to show: bounded, with anything secret-looking hidden.
pub(crate) fn parser_message(message: &str) -> String {
    shorten(&redact(message), 300)
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

fn invalid(location: impl Into<String>, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::Invalid {
        location: location.into(),
        reason: reason.into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Plain,
    Base64,
    Gzip,
    GzipBase64,
}

fn encoding(v: Option<&Value>) -> Result<Encoding, String> {
    let raw = match v {
        None | Some(Value::Null) => return Ok(Encoding::Plain),
        Some(v) => {
            scalar(v).ok_or_else(|| format!("encoding must be a string, found {}", kind(v)))?
        }
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" | "text/plain" => Ok(Encoding::Plain),
        "b64" | "base64" => Ok(Encoding::Base64),
        "gz" | "gzip" => Ok(Encoding::Gzip),
        "gz+b64" | "gz+base64" | "gzip+b64" | "gzip+base64" => Ok(Encoding::GzipBase64),
        _ => Err(format!(
            "unsupported encoding {:?} (supported: b64, base64, gz, gzip, gz+b64, gz+base64, gzip+b64, gzip+base64, text/plain)",
            shorten(&raw, 32)
        )),
    }
}

/// Octal permissions: `'0640'`, `'640'`, `'0o640'`; an unquoted `0640` arrives as the string
/// `"0640"`. An unquoted integer is read as the octal digits written (`640` means 0640), as
/// upstream CAPD does; YAML's own `0o640` notation arrives as 416 and cannot be told apart, so it
/// is rejected unless its decimal digits happen to be octal.
fn permissions(v: Option<&Value>) -> Result<Option<u32>, String> {
    let text = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => n.to_string(),
        Some(v) => scalar(v)
            .ok_or_else(|| format!("permissions must be an octal string, found {}", kind(v)))?,
    };
    let digits = text.trim();
    if digits.is_empty() {
        return Ok(None);
    }
    let digits = digits
        .strip_prefix("0o")
        .or_else(|| digits.strip_prefix("0O"))
        .unwrap_or(digits);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.starts_with('+') => Ok(Some(mode)),
        _ => Err(format!(
            "permissions {:?} is not an octal mode between 0000 and 7777 (write it quoted, e.g. '0640')",
            shorten(&text, 16)
        )),
    }
}

fn boolean(name: &str, v: Option<&Value>) -> Result<bool, String> {
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(format!("{name} must be true or false, found {}", kind(v))),
    }
}

fn write_files(
    plan: &mut Plan,
    value: &Value,
    options: &NodeOptions,
) -> Result<(), BootstrapError> {
    let files = match value {
        Value::Null => return Ok(()),
        Value::Sequence(files) => files,
        other => {
            return Err(invalid(
                "write_files",
                format!("must be a list of files, found {}", kind(other)),
            ));
        }
    };
    for (i, entry) in files.iter().enumerate() {
        let Value::Mapping(entry) = entry else {
            return Err(invalid(
                format!("write_files[{i}]"),
                format!("must be a mapping, found {}", kind(entry)),
            ));
        };
        let raw_path = match entry.get("path") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                scalar(v)
                    .ok_or_else(|| invalid(format!("write_files[{i}]"), "path must be a string"))?,
            ),
        };
        let path = normalize_path(raw_path.as_deref().unwrap_or(""))
            .map_err(|reason| invalid(format!("write_files[{i}]"), reason))?;
        let location = format!("write_files[{i}] ({})", display_path(&path));
        let at = |reason: String| invalid(location.clone(), reason);

        let unknown: Vec<String> = entry
            .keys()
            .filter(|k| !k.as_str().is_some_and(|k| FILE_KEYS.contains(&k)))
            .map(key_name)
            .collect();
        if !unknown.is_empty() {
            return Err(at(format!(
                "unsupported keys: {} (supported: {})",
                unknown.join(", "),
                FILE_KEYS.join(", ")
            )));
        }

        let content = match entry.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(v) => scalar(v)
                .ok_or_else(|| at(format!("content must be a string, found {}", kind(v))))?,
        };
        // Gzip may decode to far more than its text: every file draws on one budget for the
        // whole plan, so neither one bomb nor many files each under a bound add up.
        let left = plan.decoded.left();
        let bytes = match encoding(entry.get("encoding")).map_err(&at)? {
            Encoding::Plain => content.into_bytes(),
            Encoding::Base64 => decode::base64(content.as_bytes()).map_err(&at)?,
            Encoding::Gzip => decode::gunzip(content.as_bytes(), left).map_err(&at)?,
            Encoding::GzipBase64 => {
                // Base64 first, then gunzip: upstream CAPD stops after the base64 step.
                decode::gunzip(&decode::base64(content.as_bytes()).map_err(&at)?, left)
                    .map_err(&at)?
            }
        };
        plan.decoded.spend(bytes.len()).map_err(&at)?;
        let mode = permissions(entry.get("permissions")).map_err(&at)?;
        let owner = match entry.get("owner") {
            None | Some(Value::Null) => String::new(),
            Some(v) => scalar(v)
                .ok_or_else(|| at(format!("owner must be a string, found {}", kind(v))))?
                .trim()
                .to_string(),
        };
        let append = boolean("append", entry.get("append")).map_err(&at)?;
        boolean("defer", entry.get("defer")).map_err(&at)?;
        // CABPK's kubeadm config, rewritten for a kind-style node. An append is left alone: the
        // file's whole content is not known here.
        let bytes = if !append && kubeadm::is_config_path(FORMAT, &path) {
            kubeadm::rewrite(&location, &bytes, options)?
        } else {
            bytes
        };

        plan.write_file(&path, bytes, append);
        if let Some(mode) = mode.filter(|m| *m != 0o644) {
            plan.chmod(&path, mode);
        }
        if !matches!(owner.as_str(), "" | "root" | "root:root") {
            plan.chown(&path, &owner);
        }
    }
    Ok(())
}

/// `runcmd` or `bootcmd`: a list of shell scripts (strings) and argv lists. Only `runcmd` gets
/// upstream's kubeadm preflight flag (CABPK runs kubeadm there).
fn commands_of(
    plan: &mut Plan,
    module: &str,
    value: &Value,
    kubeadm: bool,
) -> Result<(), BootstrapError> {
    let items = match value {
        Value::Null => return Ok(()),
        Value::Sequence(items) => items,
        other => {
            return Err(invalid(
                module,
                format!("must be a list of commands, found {}", kind(other)),
            ));
        }
    };
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Sequence(args) => {
                let mut argv = Vec::with_capacity(args.len() + 1);
                for (j, arg) in args.iter().enumerate() {
                    argv.push(match arg {
                        Value::Null => String::new(),
                        v => scalar(v).ok_or_else(|| {
                            invalid(
                                format!("{module}[{i}][{j}]"),
                                format!("must be a string, found {}", kind(v)),
                            )
                        })?,
                    });
                }
                if argv.first().is_none_or(|a| a.trim().is_empty()) {
                    return Err(invalid(format!("{module}[{i}]"), "empty command"));
                }
                plan.command(if kubeadm { kubeadm_argv(argv) } else { argv });
            }
            Value::Null | Value::Mapping(_) => {
                return Err(invalid(
                    format!("{module}[{i}]"),
                    format!("must be a string or a list, found {}", kind(item)),
                ));
            }
            other => {
                let script = scalar(other).unwrap_or_default();
                plan.shell(if kubeadm {
                    kubeadm_script(&script)
                } else {
                    script
                });
            }
        }
    }
    Ok(())
}

/// Insert the preflight flag after the first `kubeadm init` and the first `kubeadm join`.
pub(crate) fn kubeadm_script(script: &str) -> String {
    let script = insert_after_first(script, "kubeadm init");
    insert_after_first(&script, "kubeadm join")
}

fn insert_after_first(s: &str, needle: &str) -> String {
    let mut from = 0;
    while let Some(pos) = s[from..].find(needle) {
        let end = from + pos + needle.len();
        let at_word_end = s[end..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '-' || c == '_'));
        if at_word_end {
            return format!(
                "{} {KUBEADM_IGNORE_PREFLIGHT_ERRORS}{}",
                &s[..end],
                &s[end..]
            );
        }
        from = end;
    }
    s.to_string()
}

/// `["kubeadm", "init"|"join", …]` gets the preflight flag as argv[2].
fn kubeadm_argv(mut argv: Vec<String>) -> Vec<String> {
    let is_kubeadm = argv
        .first()
        .is_some_and(|a| a == "kubeadm" || a.ends_with("/kubeadm"));
    if is_kubeadm && argv.get(1).is_some_and(|a| a == "init" || a == "join") {
        argv.insert(2, KUBEADM_IGNORE_PREFLIGHT_ERRORS.to_string());
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::super::{SENTINEL_PATH, Step};
    use super::*;
    use crate::bootstrap::decode::{b64, gzip};

    const INIT: &str = include_str!("testdata/cabpk-init.yaml");
    const JOIN: &str = include_str!("testdata/cabpk-join.yaml");

    fn steps(yaml: &str) -> Vec<Step> {
        commands(yaml.as_bytes(), &NodeOptions::default()).unwrap()
    }

    fn err(yaml: &str) -> BootstrapError {
        commands(yaml.as_bytes(), &NodeOptions::default()).unwrap_err()
    }

    fn argvs(steps: &[Step]) -> Vec<Vec<&str>> {
        steps
            .iter()
            .map(|s| s.argv.iter().map(String::as_str).collect())
            .collect()
    }

    fn write_of<'a>(steps: &'a [Step], path: &str) -> &'a Step {
        steps
            .iter()
            .find(|s| s.argv.len() == 4 && s.argv[0] == "/bin/sh" && s.argv[3] == path)
            .unwrap_or_else(|| panic!("no write of {path} in {steps:?}"))
    }

    #[test]
    fn cabpk_init_fixture() {
        let steps = steps(INIT);
        let descriptions: Vec<&str> = steps.iter().map(|s| s.description.as_str()).collect();
        assert_eq!(
            descriptions,
            [
                "mkdir -p /etc/kubernetes/pki",
                "write /etc/kubernetes/pki/ca.crt",
                "chmod 0640 /etc/kubernetes/pki/ca.crt",
                "write /etc/kubernetes/pki/ca.key",
                "chmod 0600 /etc/kubernetes/pki/ca.key",
                "mkdir -p /etc/kubernetes/pki/etcd",
                "write /etc/kubernetes/pki/etcd/ca.crt",
                "chmod 0640 /etc/kubernetes/pki/etcd/ca.crt",
                "write /etc/kubernetes/pki/etcd/ca.key",
                "chmod 0600 /etc/kubernetes/pki/etcd/ca.key",
                "mkdir -p /etc/kubernetes",
                "write /etc/kubernetes/audit-policy.yaml",
                "mkdir -p /run/kubeadm",
                "write /run/kubeadm/kubeadm.yaml",
                "chmod 0640 /run/kubeadm/kubeadm.yaml",
                "mkdir -p /run/cluster-api",
                "write /run/cluster-api/placeholder",
                "shell script running mkdir",
                "shell script running kubeadm",
                "shell script running echo",
            ]
        );

        // The gzip+base64 file is really decompressed.
        let audit = write_of(&steps, "/etc/kubernetes/audit-policy.yaml");
        let text = String::from_utf8(audit.stdin.clone().unwrap()).unwrap();
        assert!(
            text.starts_with("apiVersion: audit.k8s.io/v1\nkind: Policy\n"),
            "{text}"
        );

        // The kubeadm config is rewritten for a kind-style node, token and all, but never
        // described; its mode is kept (the chmod above).
        let kubeadm = write_of(&steps, "/run/kubeadm/kubeadm.yaml");
        let cfg = String::from_utf8(kubeadm.stdin.clone().unwrap()).unwrap();
        assert!(cfg.contains("token: abcdef.0123456789abcdef"), "{cfg}");
        assert!(
            cfg.starts_with("---\napiVersion: kubeadm.k8s.io/v1beta4\n"),
            "{cfg}"
        );
        assert!(cfg.contains("kind: ClusterConfiguration\n"), "{cfg}");
        assert!(
            cfg.contains("  - name: cgroup-root\n    value: /kubelet\n"),
            "{cfg}"
        );
        assert_eq!(cfg.matches("name: eviction-hard").count(), 1, "{cfg}");
        assert!(
            cfg.ends_with(
                "---\napiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nconntrack:\n  maxPerCore: 0\n"
            ),
            "{cfg}"
        );
        assert!(!cfg.contains("fail-cgroupv1"), "{cfg}");

        let key = write_of(&steps, "/etc/kubernetes/pki/ca.key");
        let key = String::from_utf8(key.stdin.clone().unwrap()).unwrap();
        assert!(key.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
        assert!(key.ends_with("-----END RSA PRIVATE KEY-----\n"));

        for s in &steps {
            assert!(!s.description.contains("BEGIN"), "{}", s.description);
            assert!(!s.description.contains("abcdef.0123"), "{}", s.description);
        }

        let last_kubeadm = &steps[steps.len() - 2];
        assert!(last_kubeadm.argv[2].ends_with(SENTINEL_PATH));
    }

    #[test]
    fn cabpk_join_fixture() {
        let steps = steps(JOIN);
        let last = steps.last().unwrap();
        assert_eq!(
            last.argv[2],
            format!(
                "kubeadm join {KUBEADM_IGNORE_PREFLIGHT_ERRORS} --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > {SENTINEL_PATH}"
            )
        );
        let join = write_of(&steps, "/run/kubeadm/kubeadm-join-config.yaml");
        assert_eq!(
            join.description,
            "write /run/kubeadm/kubeadm-join-config.yaml"
        );
        let cfg = String::from_utf8(join.stdin.clone().unwrap()).unwrap();
        assert!(cfg.contains("kind: JoinConfiguration"));
        assert!(cfg.contains("token: abcdef.0123456789abcdef"), "{cfg}");
        assert!(cfg.contains("name: fail-swap-on\n"), "{cfg}");
        assert!(
            !cfg.contains("KubeProxyConfiguration"),
            "a join file gets no kube-proxy config: {cfg}"
        );
        // The `## template: jinja` header and an empty bootcmd are fine.
        assert!(steps.iter().all(|s| !s.description.contains("bootcmd")));
    }

    #[test]
    fn kubeadm_config_rewrite_applies_to_its_paths_only() {
        let cfg = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n";
        let yaml = format!(
            "write_files:\n\
             - {{path: /run/kubeadm/kubeadm-join-config.yaml, encoding: b64, content: '{b}'}}\n\
             - {{path: /etc/other.yaml, encoding: b64, content: '{b}'}}\n\
             - {{path: /run/kubeadm/kubeadm.yaml, encoding: b64, content: '{b}', append: true}}\n",
            b = b64(cfg.as_bytes()),
        );
        let steps = steps(&yaml);
        let content = |i: usize| String::from_utf8(steps[i].stdin.clone().unwrap()).unwrap();
        assert_eq!(steps[1].argv[3], "/run/kubeadm/kubeadm-join-config.yaml");
        assert!(
            content(1).contains("criSocket: unix:///var/run/containerd/containerd.sock"),
            "decoded, then rewritten: {}",
            content(1)
        );
        assert_eq!(content(3), cfg, "other paths are verbatim");
        assert_eq!(content(4), cfg, "an append is verbatim");

        let e = err(
            "write_files:\n  - path: /run/kubeadm/kubeadm.yaml\n    content: \"kind: [x\\n\"\n",
        );
        assert!(
            e.to_string().starts_with(
                "write_files[0] (/run/kubeadm/kubeadm.yaml): kubeadm config is not valid YAML"
            ),
            "{e}"
        );
    }

    #[test]
    fn keys_run_in_document_order() {
        let steps =
            steps("runcmd:\n  - [echo, first]\nwrite_files:\n  - path: /x\n    content: hi\n");
        assert_eq!(
            argvs(&steps),
            [
                vec!["echo", "first"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/x"]
            ]
        );
    }

    fn planned(yaml: &str) -> Planned {
        plan(yaml.as_bytes(), &NodeOptions::default()).unwrap()
    }

    /// The shape CABPK renders from a KubeadmConfig with `users`, `ntp`, `bootCommands`,
    /// `mounts`, `diskSetup`: refused as unsupported keys before.
    const CABPK_FULL: &str = r#"## template: jinja
#cloud-config

write_files:
-   path: /run/kubeadm/kubeadm-join-config.yaml
    owner: root:root
    permissions: '0640'
    content: |
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: JoinConfiguration
      discovery:
        bootstrapToken:
          apiServerEndpoint: 172.18.0.3:6443
          token: abcdef.0123456789abcdef
          unsafeSkipCAVerification: true
-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: "placeholder"
bootcmd:
  - "echo boot > /var/log/capd-order"
runcmd:
  - "echo run >> /var/log/capd-order"
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete
ntp:
  enabled: true
  servers:
    - time.example.com
users:
  - name: capi
    gecos: Cluster API
    groups: sudo, docker
    lock_passwd: true
    shell: /bin/bash
    sudo: ALL=(ALL) NOPASSWD:ALL
    ssh_authorized_keys:
      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyOne capi@example
disk_setup:
  /dev/sdb:
    table_type: gpt
    layout: true
    overwrite: false
fs_setup:
  - label: data
    filesystem: ext4
    device: /dev/sdb1
mounts:
  - - LABEL=data
    - /var/lib/data
"#;

    #[test]
    fn a_cabpk_config_with_users_ntp_bootcmd_and_mounts_plans() {
        let p = planned(CABPK_FULL);
        assert_eq!(p.skipped, ["ntp", "disk_setup", "fs_setup", "mounts"]);
        let d: Vec<&str> = p.steps.iter().map(|s| s.description.as_str()).collect();
        let at = |prefix: &str| {
            d.iter()
                .position(|x| x.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix:?} in {d:?}"))
        };
        // bootcmd before everything, users after the files and before runcmd.
        assert_eq!(at("shell script running echo"), 0, "{d:?}");
        assert!(at("write /run/kubeadm/kubeadm-join-config.yaml") < at("create user capi"));
        assert!(at("create user capi") < at("write the ssh authorized_keys of user capi"));
        assert!(
            at("write the ssh authorized_keys of user capi")
                < at("append /etc/sudoers.d/90-cloud-init-users")
        );
        let runcmd = d
            .iter()
            .rposition(|x| x.starts_with("shell script running echo"))
            .unwrap();
        assert!(
            at("append /etc/sudoers.d/90-cloud-init-users") < runcmd,
            "{d:?}"
        );
        // bootcmd is not runcmd: no kubeadm flag; runcmd's kubeadm join still gets it.
        assert_eq!(
            p.steps[0].argv,
            ["/bin/sh", "-c", "echo boot > /var/log/capd-order"]
        );
        assert!(p.steps.iter().any(|s| {
            s.argv
                .last()
                .is_some_and(|a| a.contains("kubeadm join --ignore-preflight-errors"))
        }));
        for s in &p.steps {
            assert!(
                !s.description.contains("0123456789abcdef"),
                "{}",
                s.description
            );
        }
    }

    #[test]
    fn bootcmd_runs_first_and_takes_runcmds_forms() {
        let p = planned("runcmd:\n  - [echo, run]\nbootcmd:\n  - echo boot\n  - [kubeadm, init]\n");
        assert_eq!(
            argvs(&p.steps),
            [
                vec!["/bin/sh", "-c", "echo boot"],
                vec!["kubeadm", "init"],
                vec!["echo", "run"]
            ]
        );
        assert!(p.skipped.is_empty());
        assert_eq!(
            err("bootcmd:\n  - {a: b}\n").to_string(),
            "bootcmd[0]: must be a string or a list, found a mapping"
        );
        assert_eq!(
            err("bootcmd: yes please\n").to_string(),
            "bootcmd: must be a list of commands, found a string"
        );
    }

    #[test]
    fn other_modules_are_accepted_and_named_as_skipped() {
        let p = planned(
            "#cloud-config\nwrite_files: []\nntp:\n  enabled: true\npackage_update: true\nruncmd: [[true]]\nfinal_message: done\n",
        );
        assert_eq!(argvs(&p.steps), [vec!["true"]]);
        assert_eq!(p.skipped, ["ntp", "package_update", "final_message"]);
        // Modules that ask for nothing are not worth a warning.
        let p = planned("bootcmd: []\nusers:\nmounts: {}\nntp:\nruncmd: [[true]]\n");
        assert_eq!((p.steps.len(), p.skipped.len()), (1, 0));
        // Only names are reported, never values.
        let p = planned("secret_module: hunter2-abcdef0123456789\n");
        assert_eq!(p.skipped, ["secret_module"]);
    }

    #[test]
    fn ignition_data_gets_a_hint() {
        let e = err(r#"{"ignition":{"version":"3.4.0"},"storage":{"files":[]}}"#);
        assert!(
            e.to_string()
                .contains("set the bootstrap Secret's format to \"ignition\""),
            "{e}"
        );
    }

    #[test]
    fn not_a_mapping_or_empty() {
        assert_eq!(
            err(""),
            BootstrapError::Empty {
                format: Format::CloudConfig
            }
        );
        assert_eq!(
            err("#cloud-config\n"),
            BootstrapError::Empty {
                format: Format::CloudConfig
            }
        );
        assert_eq!(
            err("{}"),
            BootstrapError::Empty {
                format: Format::CloudConfig
            }
        );
        let e = err("- a\n- b\n");
        assert!(
            e.to_string()
                .contains("must be a mapping at the top level, found a list"),
            "{e}"
        );
        let e = err("#!/bin/bash\nkubeadm init\n");
        assert!(
            e.to_string()
                .contains("shell-script user data is not supported"),
            "{e}"
        );
    }

    #[test]
    fn syntax_errors_name_the_position_not_the_content() {
        let e = err(
            "#cloud-config\nwrite_files:\n  - path: /x\n    content: \"-----BEGIN KEY----- secretvalue\n  runcmd: [\n",
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("cloud-config bootstrap data is not valid YAML: "),
            "{msg}"
        );
        assert!(msg.contains("line "), "{msg}");
        assert!(!msg.contains("secretvalue"), "{msg}");

        let e = commands(b"runcmd: [\xff]", &NodeOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("not valid UTF-8: invalid byte at offset 9"),
            "{e}"
        );
    }

    #[test]
    fn write_files_encodings() {
        let payload = b"line one\nline two\n";
        let yaml = format!(
            "write_files:\n\
             - {{path: /a, content: hello}}\n\
             - {{path: /b, encoding: b64, content: '{b}'}}\n\
             - {{path: /c, encoding: base64, content: '{b}'}}\n\
             - {{path: /d, encoding: gz+b64, content: '{g}'}}\n\
             - {{path: /e, encoding: gzip+base64, content: '{g}'}}\n\
             - {{path: /f, encoding: gz+base64, content: '{g}'}}\n\
             - {{path: /g, encoding: GZIP+B64, content: '{g}'}}\n\
             - {{path: /h, encoding: text/plain, content: plain}}\n\
             - {{path: /i}}\n",
            b = b64(payload),
            g = b64(&gzip(payload)),
        );
        let steps = steps(&yaml);
        let content = |p: &str| write_of(&steps, p).stdin.clone().unwrap();
        assert_eq!(content("/a"), b"hello");
        for p in ["/b", "/c", "/d", "/e", "/f", "/g"] {
            assert_eq!(content(p), payload, "{p}");
        }
        assert_eq!(content("/h"), b"plain");
        assert_eq!(content("/i"), b"");
    }

    #[test]
    fn wrapped_base64_content() {
        let b = b64(&gzip(&[b'x'; 500]));
        let wrapped: String = b
            .as_bytes()
            .chunks(20)
            .map(|c| format!("      {}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        let yaml =
            format!("write_files:\n  - path: /w\n    encoding: gz+b64\n    content: |\n{wrapped}");
        assert_eq!(
            write_of(&steps(&yaml), "/w").stdin.as_deref().unwrap(),
            &[b'x'; 500]
        );
    }

    #[test]
    fn write_files_bad_content() {
        let e = err(
            "write_files:\n  - path: /etc/secret.key\n    encoding: b64\n    content: 'c2VjcmV0*c2VjcmV0'\n",
        );
        let msg = e.to_string();
        assert_eq!(
            msg,
            "write_files[0] (/etc/secret.key): content is not valid base64 (invalid character at offset 8)"
        );
        let e = err(&format!(
            "write_files:\n  - path: /z\n    encoding: gz+b64\n    content: {}\n",
            b64(b"not gzip at all")
        ));
        assert!(
            e.to_string()
                .starts_with("write_files[0] (/z): content is not valid gzip"),
            "{e}"
        );
        assert!(!e.to_string().contains("not gzip at all"), "{e}");
        let e = err("write_files:\n  - path: /z\n    encoding: rot13\n    content: x\n");
        assert!(
            e.to_string().contains("unsupported encoding \"rot13\""),
            "{e}"
        );
    }

    #[test]
    fn write_files_entry_errors() {
        let e = err("write_files:\n  - content: orphan\n");
        assert_eq!(e.to_string(), "write_files[0]: missing path");
        let e = err("write_files:\n  - path: '   '\n");
        assert_eq!(e.to_string(), "write_files[0]: missing path");
        let e = err("write_files:\n  - {path: /a}\n  - just-a-string\n");
        assert_eq!(
            e.to_string(),
            "write_files[1]: must be a mapping, found a string"
        );
        let e = err("write_files: /etc/x\n");
        assert_eq!(
            e.to_string(),
            "write_files: must be a list of files, found a string"
        );
        let e = err("write_files:\n  - path: /a\n    source: {uri: 'https://x'}\n");
        assert!(
            e.to_string()
                .starts_with("write_files[0] (/a): unsupported keys: source"),
            "{e}"
        );
        let e = err("write_files:\n  - path: /a\n    content: [1, 2]\n");
        assert_eq!(
            e.to_string(),
            "write_files[0] (/a): content must be a string, found a list"
        );
        let e = err("write_files:\n  - path: /a\n    append: maybe\n");
        assert_eq!(
            e.to_string(),
            "write_files[0] (/a): append must be true or false, found a string"
        );
    }

    #[test]
    fn permissions_and_owner() {
        let steps = steps(
            "write_files:\n\
             - {path: ' /p/a ', permissions: '0600', owner: 'etcd:etcd'}\n\
             - {path: /p/b, permissions: 0640}\n\
             - {path: /p/c, permissions: '0644', owner: root:root}\n\
             - {path: /p/d, permissions: '755', owner: root}\n\
             - {path: /p/e, permissions: '0o750'}\n\
             - {path: /p/f, permissions: ''}\n",
        );
        assert_eq!(
            argvs(&steps),
            [
                vec!["mkdir", "-p", "/p"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/p/a"],
                vec!["chmod", "0600", "/p/a"],
                vec!["chown", "etcd:etcd", "/p/a"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/p/b"],
                vec!["chmod", "0640", "/p/b"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/p/c"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/p/d"],
                vec!["chmod", "0755", "/p/d"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/p/e"],
                vec!["chmod", "0750", "/p/e"],
                vec!["/bin/sh", "-c", "cat > \"$0\"", "/p/f"],
            ]
        );
        for bad in ["'0999'", "'rwx'", "'17777'", "'-644'", "0o750", "'+644'"] {
            let e = err(&format!(
                "write_files:\n  - {{path: /x, permissions: {bad}}}\n"
            ));
            assert!(e.to_string().contains("is not an octal mode"), "{bad}: {e}");
        }
    }

    #[test]
    fn append_uses_append_redirect() {
        let steps = steps(
            "write_files:\n  - {path: /etc/hosts, content: \"10.0.0.1 x\\n\", append: true}\n",
        );
        assert_eq!(
            steps[1].argv,
            ["/bin/sh", "-c", "cat >> \"$0\"", "/etc/hosts"]
        );
        assert_eq!(steps[1].description, "append /etc/hosts");
    }

    #[test]
    fn runcmd_forms() {
        let steps = steps(
            "runcmd:\n\
             - [ls, -l, /]\n\
             - 'echo \"a b\" | wc -c'\n\
             - [kubeadm, join, --config, /run/kubeadm/kubeadm-join-config.yaml]\n\
             - [kubeadm, version]\n\
             - [/usr/bin/kubeadm, init]\n\
             - [sysctl, -w, 'net.ipv4.ip_forward=1', 1, true]\n",
        );
        assert_eq!(
            argvs(&steps),
            [
                vec!["ls", "-l", "/"],
                vec!["/bin/sh", "-c", "echo \"a b\" | wc -c"],
                vec![
                    "kubeadm",
                    "join",
                    KUBEADM_IGNORE_PREFLIGHT_ERRORS,
                    "--config",
                    "/run/kubeadm/kubeadm-join-config.yaml"
                ],
                vec!["kubeadm", "version"],
                vec!["/usr/bin/kubeadm", "init", KUBEADM_IGNORE_PREFLIGHT_ERRORS],
                vec!["sysctl", "-w", "net.ipv4.ip_forward=1", "1", "true"],
            ]
        );
        assert_eq!(steps[0].description, "run ls");
    }

    #[test]
    fn runcmd_errors() {
        assert_eq!(
            err("runcmd: 'echo hi'\n").to_string(),
            "runcmd: must be a list of commands, found a string"
        );
        assert_eq!(
            err("runcmd:\n  - []\n").to_string(),
            "runcmd[0]: empty command"
        );
        assert_eq!(
            err("runcmd:\n  - [true]\n  -\n").to_string(),
            "runcmd[1]: must be a string or a list, found null"
        );
        assert_eq!(
            err("runcmd:\n  - {a: b}\n").to_string(),
            "runcmd[0]: must be a string or a list, found a mapping"
        );
        assert_eq!(
            err("runcmd:\n  - [a, [b]]\n").to_string(),
            "runcmd[0][1]: must be a string, found a list"
        );
    }

    #[test]
    fn kubeadm_flag_in_scripts() {
        assert_eq!(
            kubeadm_script("kubeadm init --config /x && echo ok"),
            format!("kubeadm init {KUBEADM_IGNORE_PREFLIGHT_ERRORS} --config /x && echo ok")
        );
        assert_eq!(
            kubeadm_script("kubeadm join"),
            format!("kubeadm join {KUBEADM_IGNORE_PREFLIGHT_ERRORS}")
        );
        // Only the first occurrence of each.
        assert_eq!(
            kubeadm_script("kubeadm init; kubeadm init"),
            format!("kubeadm init {KUBEADM_IGNORE_PREFLIGHT_ERRORS}; kubeadm init")
        );
        // Not inside a longer word.
        assert_eq!(
            kubeadm_script("kubeadm initialize; kubeadm init"),
            format!("kubeadm initialize; kubeadm init {KUBEADM_IGNORE_PREFLIGHT_ERRORS}")
        );
        assert_eq!(kubeadm_script("kubeadm reset -f"), "kubeadm reset -f");
    }

    #[test]
    fn secrets_in_runcmd_stay_out_of_descriptions() {
        let steps = steps(
            "runcmd:\n\
             - kubeadm join 172.18.0.3:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:1111111111111111111111111111111111111111111111111111111111111111\n\
             - [kubeadm, join, --token, abcdef.0123456789abcdef, --certificate-key, 2222222222222222222222222222222222222222222222222222222222222222]\n",
        );
        for s in &steps {
            assert!(
                !s.description.contains("0123456789abcdef"),
                "{}",
                s.description
            );
            assert!(!s.description.contains("1111111111"), "{}", s.description);
            assert!(!s.description.contains("2222222222"), "{}", s.description);
            assert!(s.description.contains("kubeadm"), "{}", s.description);
        }
        // The real argv is intact.
        assert!(steps[0].argv[2].contains("--token abcdef.0123456789abcdef"));
    }
}
