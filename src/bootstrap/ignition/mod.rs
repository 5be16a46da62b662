//! The Ignition subset CAPD supports (spec v2.x and v3.x): files, directories, links and systemd
//! units, with inline (`data:` URL) content only.
use serde_json::{Map, Value};

use super::cloud_config::parser_message;
use super::plan::{Plan, display_path, normalize_path, shorten};
use super::{BootstrapError, Format, NodeOptions, Step, decode, kubeadm, limits};

mod json;
mod storage;
mod systemd;

use json::*;
use storage::{directory, file, link};
use systemd::units;

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
        Err(json_err) => match match std::str::from_utf8(data) {
            // YAML aliases could expand far past the text (JSON has none): refused before
            // anything is built.
            Ok(text) => limits::check_yaml_expansion(FORMAT, text)?
                .and_then(|()| serde_yaml_ng::from_str::<Value>(text).map_err(|e| e.to_string())),
            Err(_) => serde_yaml_ng::from_slice::<Value>(data).map_err(|e| e.to_string()),
        } {
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
                    ("YAML", yaml_err)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::decode::{b64, gzip};
    use storage::kubeadm_sh;

    const V2: &str = include_str!("../testdata/cabpk-ignition-v2.json");

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
