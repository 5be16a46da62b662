//! Building [`Step`]s: file writes, permissions, commands, and their safe descriptions.
use std::collections::HashSet;

use super::Step;
use super::limits::Decoded;

/// An ordered list of steps under construction.
#[derive(Default)]
pub(crate) struct Plan {
    steps: Vec<Step>,
    /// Directories already created by an earlier `mkdir -p` in this plan, so a run of files in one
    /// directory makes it once. Forgotten after any command, which could have removed them.
    made_dirs: HashSet<String>,
    /// What is left of the decoded file content all files of the plan may add up to.
    pub(crate) decoded: Decoded,
}

impl Plan {
    pub(crate) fn into_steps(self) -> Vec<Step> {
        self.steps
    }

    /// `mkdir -p <dir>` unless `dir` is `/` or was just made.
    pub(crate) fn mkdir_p(&mut self, dir: &str) {
        if dir == "/" || dir.is_empty() || self.made_dirs.contains(dir) {
            return;
        }
        self.made_dirs.insert(dir.to_string());
        self.steps.push(Step {
            argv: vec!["mkdir".into(), "-p".into(), dir.into()],
            stdin: None,
            description: format!("mkdir -p {}", display_path(dir)),
        });
    }

    /// Make the parent directory, then write (or append) `content` to the absolute `path`. The
    /// path is passed to the shell as `$0`, never interpolated into the script.
    pub(crate) fn write_file(&mut self, path: &str, content: Vec<u8>, append: bool) {
        self.mkdir_p(parent(path));
        let (script, verb) = if append {
            (r#"cat >> "$0""#, "append")
        } else {
            (r#"cat > "$0""#, "write")
        };
        self.steps.push(Step {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into(), path.into()],
            stdin: Some(content),
            description: format!("{verb} {}", display_path(path)),
        });
    }

    /// `chmod <mode as 4 octal digits> <path>`.
    pub(crate) fn chmod(&mut self, path: &str, mode: u32) {
        let mode = format!("{mode:04o}");
        self.steps.push(Step {
            description: format!("chmod {mode} {}", display_path(path)),
            argv: vec!["chmod".into(), mode, path.into()],
            stdin: None,
        });
    }

    /// `chown <owner> <path>`.
    pub(crate) fn chown(&mut self, path: &str, owner: &str) {
        self.steps.push(Step {
            argv: vec!["chown".into(), owner.into(), path.into()],
            stdin: None,
            description: format!("chown {} {}", display_path(owner), display_path(path)),
        });
    }

    /// A command exec'd as is; described by its program only (see [`describe_argv`]).
    pub(crate) fn command(&mut self, argv: Vec<String>) {
        self.made_dirs.clear();
        self.steps.push(Step {
            description: describe_argv(&argv),
            argv,
            stdin: None,
        });
    }

    /// Any command, with a description built by the caller from names only (never content).
    pub(crate) fn step(&mut self, argv: Vec<String>, stdin: Option<Vec<u8>>, description: String) {
        self.made_dirs.clear();
        self.steps.push(Step {
            argv,
            stdin,
            description: display_path(&description),
        });
    }

    /// `/bin/sh -c <script>`; described by the program it starts with (see [`describe_script`]).
    pub(crate) fn shell(&mut self, script: String) {
        self.made_dirs.clear();
        self.steps.push(Step {
            description: describe_script(&script),
            argv: vec!["/bin/sh".into(), "-c".into(), script],
            stdin: None,
        });
    }
}

/// Validate and normalize a file path from bootstrap data: trimmed, absolute (a relative path is
/// taken relative to `/`, the working directory of cloud-init), not a directory, no NUL.
pub(crate) fn normalize_path(raw: &str) -> Result<String, String> {
    let path = raw.trim();
    if path.is_empty() {
        return Err("missing path".into());
    }
    if path.contains('\0') {
        return Err("path contains a NUL character".into());
    }
    if path.ends_with('/') {
        return Err(format!(
            "path {} names a directory, not a file",
            display_path(path)
        ));
    }
    Ok(if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    })
}

/// The directory part of an absolute path (`/` for `/file`).
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// A path (or other name) made safe to print: control characters replaced, length bounded.
pub(crate) fn display_path(path: &str) -> String {
    let clean: String = path
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    shorten(&clean, 200)
}

/// Cut `s` to at most `max` characters, marking the cut with `…`.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `run <program>`. Arguments are never shown: a secret can take any shape (`TOKEN=…`, an
/// `Authorization:` header, a positional password), and a redactor only knows the shapes it
/// lists. The step number and the redacted output tail say the rest.
pub(crate) fn describe_argv(argv: &[String]) -> String {
    format!("run {}", program(argv.first().map(String::as_str)))
}

/// `shell script running <program>`: the first word that is not a variable assignment.
pub(crate) fn describe_script(script: &str) -> String {
    let first = script
        .split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
        .find(|w| !w.is_empty() && !w.contains('='));
    format!("shell script running {}", program(first))
}

/// A program name, if it looks like one: a lower-case word, possibly a path, with at most one
/// digit (`kubeadm`, `/usr/bin/k3s`, `update-ca-certificates`). Anything else could be data (a
/// token, `s3cr3t`) and is shown as "a command".
fn program(word: Option<&str>) -> String {
    let Some(w) = word else {
        return "a command".to_string();
    };
    let (dir, name) = w.rsplit_once('/').unwrap_or(("", w));
    let plain_dir = dir.chars().all(|c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.' | '/')
    });
    let plain_name = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.'))
        && name.chars().filter(char::is_ascii_digit).count() <= 1;
    if w.len() <= 64 && plain_dir && plain_name {
        w.to_string()
    } else {
        "a command".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(normalize_path("  /etc/x \n").unwrap(), "/etc/x");
        assert_eq!(normalize_path("etc/x").unwrap(), "/etc/x");
        assert_eq!(normalize_path("   ").unwrap_err(), "missing path");
        assert!(normalize_path("/etc/").unwrap_err().contains("directory"));
        assert!(normalize_path("/a\0b").is_err());
        assert_eq!(parent("/etc/kubernetes/pki/ca.crt"), "/etc/kubernetes/pki");
        assert_eq!(parent("/x"), "/");
        assert_eq!(display_path("/a\nb"), "/a?b");
    }

    #[test]
    fn write_steps_pass_path_as_argument() {
        let mut plan = Plan::default();
        let weird = "/tmp/$(reboot) \"x\"";
        plan.write_file(weird, b"data".to_vec(), false);
        plan.write_file("/tmp/y", b"more".to_vec(), true);
        let steps = plan.into_steps();
        assert_eq!(steps.len(), 3, "mkdir once for /tmp: {steps:?}");
        assert_eq!(steps[0].argv, ["mkdir", "-p", "/tmp"]);
        assert_eq!(steps[1].argv, ["/bin/sh", "-c", "cat > \"$0\"", weird]);
        assert_eq!(steps[1].stdin.as_deref(), Some(&b"data"[..]));
        assert_eq!(steps[1].description, format!("write {weird}"));
        assert_eq!(steps[2].argv, ["/bin/sh", "-c", "cat >> \"$0\"", "/tmp/y"]);
        assert_eq!(steps[2].description, "append /tmp/y");
    }

    #[test]
    fn commands_forget_made_dirs() {
        let mut plan = Plan::default();
        plan.write_file("/a/x", vec![], false);
        plan.command(vec!["rm".into(), "-rf".into(), "/a".into()]);
        plan.write_file("/a/y", vec![], false);
        let mkdirs = plan
            .into_steps()
            .iter()
            .filter(|s| s.argv[0] == "mkdir")
            .count();
        assert_eq!(mkdirs, 2);
    }

    #[test]
    fn chmod_is_four_octal_digits() {
        let mut plan = Plan::default();
        plan.chmod("/x", 0o600);
        plan.chmod("/y", 0o4755);
        plan.chown("/x", "etcd:etcd");
        let steps = plan.into_steps();
        assert_eq!(steps[0].argv, ["chmod", "0600", "/x"]);
        assert_eq!(steps[0].description, "chmod 0600 /x");
        assert_eq!(steps[1].argv, ["chmod", "4755", "/y"]);
        assert_eq!(steps[2].argv, ["chown", "etcd:etcd", "/x"]);
        assert_eq!(steps[2].description, "chown etcd:etcd /x");
    }

    #[test]
    fn descriptions() {
        let argv: Vec<String> = ["kubeadm", "join", "--token", "abcdef.0123456789abcdef"]
            .map(String::from)
            .to_vec();
        assert_eq!(describe_argv(&argv), "run kubeadm");
        assert_eq!(describe_argv(&["/usr/bin/k3s".into()]), "run /usr/bin/k3s");
        assert_eq!(describe_argv(&[]), "run a command");
        let mut plan = Plan::default();
        plan.shell("false".into());
        plan.shell("echo \"hi\"\nkubeadm join --token abcdef.0123456789abcdef".into());
        plan.shell("A=1 B=2\tsystemctl restart kubelet".into());
        let steps = plan.into_steps();
        assert_eq!(steps[0].description, "shell script running false");
        assert_eq!(steps[1].description, "shell script running echo");
        assert_eq!(steps[2].description, "shell script running systemctl");
    }

    /// Secrets come in shapes no redactor can list; a step's description must not carry any of
    /// its arguments, only the program.
    #[test]
    fn descriptions_never_show_arguments_whatever_their_shape() {
        const SECRET: &str = "s3cr3tvalue";
        let commands: [&[&str]; 4] = [
            &[
                "curl",
                "-H",
                "Authorization: Bearer s3cr3tvalue",
                "https://x",
            ],
            &["env", "TOKEN=s3cr3tvalue", "kubeadm", "init"],
            &["mysql", "--password=s3cr3tvalue"],
            &["login", "admin", "s3cr3tvalue"],
        ];
        let scripts = [
            ("TOKEN=s3cr3tvalue kubeadm init", "kubeadm"),
            ("export X_SECRET=s3cr3tvalue; run-it", "export"),
            (
                "curl -H 'Authorization: Bearer s3cr3tvalue' https://x",
                "curl",
            ),
            ("echo token=s3cr3tvalue > /etc/token", "echo"),
            ("s3cr3tvalue", "a command"),
        ];
        let mut plan = Plan::default();
        for argv in commands {
            plan.command(argv.iter().map(|a| a.to_string()).collect());
        }
        for (script, _) in scripts {
            plan.shell(script.to_string());
        }
        let steps = plan.into_steps();
        for (step, argv) in steps.iter().zip(commands) {
            assert!(!step.description.contains(SECRET), "{}", step.description);
            assert_eq!(step.description, format!("run {}", argv[0]));
        }
        for (step, (_, program)) in steps[commands.len()..].iter().zip(scripts) {
            assert!(!step.description.contains(SECRET), "{}", step.description);
            assert_eq!(step.description, format!("shell script running {program}"));
        }
    }

    #[test]
    fn shorten_counts_characters() {
        assert_eq!(shorten("héllo", 5), "héllo");
        assert_eq!(shorten("héllo!", 5), "héll…");
    }
}
