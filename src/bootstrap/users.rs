//! cloud-config `users`: the accounts CABPK writes from a KubeadmConfig's `users`, created in
//! the node as cloud-init's `users_groups` and `ssh` modules would, with the node's own
//! `useradd`/`usermod`/`groupadd`.
//!
//! Every value from the data reaches a command as its own argument (or on stdin), never inside
//! a script's text: the scripts below are fixed and read their inputs as `$0`, `$@` and stdin.
//! Names, groups, paths and sudo rules are checked here, so what would break `/etc/passwd`,
//! `/etc/group` or a sudoers line is refused with the entry named, before anything runs.
//!
//! What a kind-style node has no use for is skipped and named (see [`Users::skipped`]): the
//! distribution's `default` user (a kind node image defines none) and per-user keys we do not
//! honour (`ssh_import_id`, `snapuser`, `selinux_user`, ...).
use serde_yaml_ng::{Mapping, Value};

use super::BootstrapError;
use super::plan::{Plan, display_path, shorten};
use super::yaml::{key_name, kind, scalar};

/// Where cloud-init writes the sudo rules of the `users` it creates.
pub(crate) const SUDOERS_PATH: &str = "/etc/sudoers.d/90-cloud-init-users";

/// Create the user `$0` with the `useradd` options in `$@`, unless it exists (cloud-init leaves
/// an existing user in place and only adds what is asked below).
const CREATE_USER: &str = r#"id -u "$0" >/dev/null 2>&1 || exec useradd "$@" "$0""#;

/// Append stdin to the `authorized_keys` of user `$0`, in its home directory from the passwd
/// database, with the owner and modes sshd insists on.
const AUTHORIZED_KEYS: &str = r#"home=$(getent passwd "$0" | cut -d: -f6)
[ -n "$home" ] || { echo "user $0 has no home directory" >&2; exit 1; }
mkdir -p "$home/.ssh" && cat >> "$home/.ssh/authorized_keys" &&
chown "$0": "$home/.ssh" "$home/.ssh/authorized_keys" &&
chmod 0700 "$home/.ssh" && chmod 0600 "$home/.ssh/authorized_keys""#;

/// Keys of a user entry that are honoured.
const USER_KEYS: &[&str] = &[
    "name",
    "gecos",
    "groups",
    "homedir",
    "shell",
    "primary_group",
    "sudo",
    "ssh_authorized_keys",
    "lock_passwd",
    "passwd",
    "hashed_passwd",
    "no_create_home",
    "system",
    "uid",
    "inactive",
    "expiredate",
    "create_groups",
];

/// One account to create.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct User {
    pub name: String,
    pub gecos: Option<String>,
    pub homedir: Option<String>,
    pub shell: Option<String>,
    pub primary_group: Option<String>,
    pub groups: Vec<String>,
    pub sudo: Vec<String>,
    pub ssh_authorized_keys: Vec<String>,
    pub lock_passwd: bool,
    /// A crypt(3) hash (`passwd` / `hashed_passwd`), set with `useradd -p`.
    pub passwd: Option<String>,
    pub no_create_home: bool,
    pub system: bool,
    pub uid: Option<String>,
    pub inactive: Option<String>,
    pub expiredate: Option<String>,
}

/// The `users` of a cloud-config: what to create, and what is skipped.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Users {
    pub users: Vec<User>,
    /// `users[i].key` (or `users[i] (default)`) for what is accepted but not honoured.
    pub skipped: Vec<String>,
}

fn invalid(location: String, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::Invalid {
        location,
        reason: reason.into(),
    }
}

/// A user or group name `useradd` and the passwd/group files take: a letter or `_` first, then
/// letters, digits, `_`, `.`, `-`, an optional `$` last (Samba machine accounts), at most 32.
fn valid_name(name: &str) -> bool {
    let body = name.strip_suffix('$').unwrap_or(name);
    let mut chars = body.chars();
    name.len() <= 32
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A field of a passwd line: no `:` and no control characters (a newline would add a line).
fn valid_field(s: &str) -> bool {
    !s.contains(':') && !s.chars().any(char::is_control)
}

/// Parse the `users` value: a list of names or mappings (or one comma-separated string).
pub(crate) fn parse(value: &Value) -> Result<Users, BootstrapError> {
    let mut out = Users::default();
    let entries: Vec<Value> = match value {
        Value::Null => return Ok(out),
        Value::Sequence(items) => items.clone(),
        Value::String(s) => s
            .split(',')
            .map(|n| Value::String(n.trim().to_string()))
            .filter(|v| v.as_str().is_some_and(|n| !n.is_empty()))
            .collect(),
        other => {
            return Err(invalid(
                "users".into(),
                format!("must be a list of users, found {}", kind(other)),
            ));
        }
    };
    for (i, entry) in entries.iter().enumerate() {
        let user = match entry {
            Value::String(name) if name.trim() == "default" => {
                out.skipped.push(format!("users[{i}] (default)"));
                continue;
            }
            Value::String(name) => User {
                name: name.trim().to_string(),
                lock_passwd: true,
                ..User::default()
            },
            Value::Mapping(m) => user(i, m, &mut out.skipped)?,
            other => {
                return Err(invalid(
                    format!("users[{i}]"),
                    format!("must be a name or a mapping, found {}", kind(other)),
                ));
            }
        };
        if !valid_name(&user.name) {
            return Err(invalid(
                format!("users[{i}]"),
                format!(
                    "name {:?} is not a valid user name (letters, digits, _ . -, starting with a letter or _, at most 32)",
                    shorten(&display_path(&user.name), 40)
                ),
            ));
        }
        out.users.push(user);
    }
    Ok(out)
}

fn user(i: usize, m: &Mapping, skipped: &mut Vec<String>) -> Result<User, BootstrapError> {
    let loc = |what: &str| format!("users[{i}].{what}");
    let text = |key: &str| -> Result<Option<String>, BootstrapError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => scalar(v)
                .map(|s| Some(s.trim().to_string()).filter(|s| !s.is_empty()))
                .ok_or_else(|| invalid(loc(key), format!("must be a string, found {}", kind(v)))),
        }
    };
    let field = |key: &str| -> Result<Option<String>, BootstrapError> {
        let v = text(key)?;
        if v.as_deref().is_some_and(|s| !valid_field(s)) {
            return Err(invalid(loc(key), "must not hold ':' or control characters"));
        }
        Ok(v)
    };
    let flag = |key: &str, default: bool| -> Result<bool, BootstrapError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(invalid(
                loc(key),
                format!("must be true or false, found {}", kind(v)),
            )),
        }
    };
    // A list of strings, or one string split on `sep` (cloud-init's `groups: a, b`).
    let list = |key: &str, sep: Option<char>| -> Result<Vec<String>, BootstrapError> {
        let items: Vec<String> = match m.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => vec![],
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|v| {
                    scalar(v).ok_or_else(|| {
                        invalid(
                            loc(key),
                            format!("entries must be strings, found {}", kind(v)),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                let s = scalar(v).ok_or_else(|| {
                    invalid(
                        loc(key),
                        format!("must be a string or a list, found {}", kind(v)),
                    )
                })?;
                match sep {
                    Some(sep) => s.split(sep).map(str::to_string).collect(),
                    None => vec![s],
                }
            }
        };
        Ok(items
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect())
    };

    for key in m.keys() {
        if !key.as_str().is_some_and(|k| USER_KEYS.contains(&k)) {
            skipped.push(format!("users[{i}].{}", key_name(key)));
        }
    }
    let name = text("name")?.ok_or_else(|| invalid(format!("users[{i}]"), "missing name"))?;
    let groups = list("groups", Some(','))?;
    let primary_group = text("primary_group")?;
    for g in groups.iter().chain(primary_group.as_ref()) {
        if !valid_name(g) {
            return Err(invalid(
                loc("groups"),
                format!(
                    "{:?} is not a valid group name",
                    shorten(&display_path(g), 40)
                ),
            ));
        }
    }
    let sudo = list("sudo", None)?;
    if sudo.iter().any(|r| r.chars().any(char::is_control)) {
        return Err(invalid(loc("sudo"), "a rule must be one line"));
    }
    let ssh_authorized_keys = list("ssh_authorized_keys", None)?;
    if ssh_authorized_keys.iter().any(|k| k.contains(['\n', '\r'])) {
        return Err(invalid(
            loc("ssh_authorized_keys"),
            "a key must be one line",
        ));
    }
    for path in ["homedir", "shell"] {
        if text(path)?.is_some_and(|p| !p.starts_with('/')) {
            return Err(invalid(loc(path), "must be an absolute path"));
        }
    }
    // cloud-init creates missing groups unless told not to; we always do (a missing group would
    // fail the useradd), so the flag is only checked.
    flag("create_groups", true)?;
    Ok(User {
        name,
        gecos: field("gecos")?,
        homedir: field("homedir")?,
        shell: field("shell")?,
        primary_group,
        groups,
        sudo,
        ssh_authorized_keys,
        lock_passwd: flag("lock_passwd", true)?,
        passwd: match field("hashed_passwd")? {
            Some(p) => Some(p),
            None => field("passwd")?,
        },
        no_create_home: flag("no_create_home", false)?,
        system: flag("system", false)?,
        uid: field("uid")?,
        inactive: field("inactive")?,
        expiredate: field("expiredate")?,
    })
}

/// The steps that create `users`, in order: groups, account, membership, password lock, sudo
/// rules, authorized keys.
pub(crate) fn apply(plan: &mut Plan, users: &Users) {
    let mut sudoers = Vec::new();
    for u in &users.users {
        for g in u.primary_group.iter().chain(&u.groups) {
            plan.step(
                vec!["groupadd".into(), "-f".into(), g.clone()],
                None,
                format!("groupadd -f {g}"),
            );
        }
        let mut argv: Vec<String> = vec![
            "/bin/sh".into(),
            "-c".into(),
            CREATE_USER.into(),
            u.name.clone(),
        ];
        argv.push(if u.no_create_home { "-M" } else { "-m" }.into());
        let mut opt = |flag: &str, v: &Option<String>| {
            if let Some(v) = v {
                argv.push(flag.into());
                argv.push(v.clone());
            }
        };
        opt("-d", &u.homedir);
        opt("-s", &u.shell);
        opt("-c", &u.gecos);
        opt("-g", &u.primary_group);
        opt("-u", &u.uid);
        opt("-f", &u.inactive);
        opt("-e", &u.expiredate);
        opt("-p", &u.passwd);
        if u.system {
            argv.push("-r".into());
        }
        plan.step(argv, None, format!("create user {}", u.name));
        if !u.groups.is_empty() {
            plan.step(
                vec![
                    "usermod".into(),
                    "-a".into(),
                    "-G".into(),
                    u.groups.join(","),
                    u.name.clone(),
                ],
                None,
                format!("add user {} to {}", u.name, u.groups.join(",")),
            );
        }
        if u.lock_passwd {
            plan.step(
                vec!["usermod".into(), "-L".into(), u.name.clone()],
                None,
                format!("lock the password of user {}", u.name),
            );
        }
        for rule in &u.sudo {
            sudoers.extend_from_slice(format!("{} {rule}\n", u.name).as_bytes());
        }
        if !u.ssh_authorized_keys.is_empty() {
            let mut keys = u.ssh_authorized_keys.join("\n").into_bytes();
            keys.push(b'\n');
            plan.step(
                vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    AUTHORIZED_KEYS.into(),
                    u.name.clone(),
                ],
                Some(keys),
                format!("write the ssh authorized_keys of user {}", u.name),
            );
        }
    }
    if !sudoers.is_empty() {
        plan.write_file(SUDOERS_PATH, sudoers, true);
        plan.chmod(SUDOERS_PATH, 0o440);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(yaml: &str) -> Result<Users, BootstrapError> {
        parse(&serde_yaml_ng::from_str::<Value>(yaml).unwrap())
    }

    fn steps(yaml: &str) -> Vec<crate::bootstrap::Step> {
        let mut plan = Plan::default();
        apply(&mut plan, &users(yaml).unwrap());
        plan.into_steps()
    }

    #[test]
    fn a_full_user_becomes_groups_account_sudo_and_keys() {
        let s = steps(
            "- name: capi\n  gecos: Cluster API\n  groups: [adm, docker]\n  shell: /bin/bash\n  sudo: ALL=(ALL) NOPASSWD:ALL\n  ssh_authorized_keys: [ssh-ed25519 AAAA one, ssh-rsa BBBB two]\n",
        );
        let argv: Vec<Vec<&str>> = s
            .iter()
            .map(|s| s.argv.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(argv[0], ["groupadd", "-f", "adm"]);
        assert_eq!(argv[1], ["groupadd", "-f", "docker"]);
        assert_eq!(
            argv[2],
            [
                "/bin/sh",
                "-c",
                CREATE_USER,
                "capi",
                "-m",
                "-s",
                "/bin/bash",
                "-c",
                "Cluster API"
            ]
        );
        assert_eq!(argv[3], ["usermod", "-a", "-G", "adm,docker", "capi"]);
        assert_eq!(
            argv[4],
            ["usermod", "-L", "capi"],
            "lock_passwd defaults to true"
        );
        assert_eq!(argv[5], ["/bin/sh", "-c", AUTHORIZED_KEYS, "capi"]);
        assert_eq!(
            s[5].stdin.as_deref(),
            Some(&b"ssh-ed25519 AAAA one\nssh-rsa BBBB two\n"[..]),
            "keys travel on stdin"
        );
        assert_eq!(argv[6], ["mkdir", "-p", "/etc/sudoers.d"]);
        assert_eq!(argv[7], ["/bin/sh", "-c", "cat >> \"$0\"", SUDOERS_PATH]);
        assert_eq!(
            s[7].stdin.as_deref(),
            Some(&b"capi ALL=(ALL) NOPASSWD:ALL\n"[..])
        );
        assert_eq!(argv[8], ["chmod", "0440", SUDOERS_PATH]);
        assert_eq!(s.len(), 9);
    }

    #[test]
    fn minimal_forms_and_what_is_skipped() {
        let u = users("[alice, default, {name: bob, lock_passwd: false, ssh_import_id: [gh:bob], snapuser: x}]").unwrap();
        assert_eq!(
            u.users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
            ["alice", "bob"]
        );
        assert_eq!(
            u.skipped,
            [
                "users[1] (default)",
                "users[2].ssh_import_id",
                "users[2].snapuser"
            ]
        );
        assert!(u.users[0].lock_passwd && !u.users[1].lock_passwd);
        assert_eq!(users("alice, bob").unwrap().users.len(), 2);
        // A hashed password goes to useradd -p; no sudo file without rules.
        let s = steps("- {name: carol, passwd: '$6$salt$hash', sudo: false, no_create_home: true}");
        assert_eq!(
            s[0].argv[3..],
            ["carol", "-M", "-p", "$6$salt$hash"].map(String::from)
        );
        assert!(!s.iter().any(|s| s.argv.iter().any(|a| a == SUDOERS_PATH)));
        assert!(
            s.iter().all(|s| !s.description.contains("$6$")),
            "the hash is not described"
        );
    }

    #[test]
    fn what_would_break_passwd_group_or_sudoers_is_refused() {
        let e = |yaml: &str| users(yaml).unwrap_err().to_string();
        assert!(e("- name: 'root:x:0'").contains("not a valid user name"));
        assert!(e("- name: '-rf'").contains("not a valid user name"));
        assert!(e("- {gecos: x}").contains("users[0]: missing name"));
        assert!(e("- {name: a, groups: 'ok, bad name'}").contains("not a valid group name"));
        assert!(e("- {name: a, gecos: 'x:y'}").contains("users[0].gecos"));
        assert!(e("- {name: a, shell: bash}").contains("absolute path"));
        assert!(e("- {name: a, sudo: \"ALL\\nroot ALL\"}").contains("one line"));
        assert!(e("- {name: a, ssh_authorized_keys: [\"k1\\nk2\"]}").contains("one line"));
        assert!(e("- 3").contains("must be a name or a mapping"));
        assert!(e("{a: b}").contains("must be a list of users"));
    }
}
