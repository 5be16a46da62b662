//! An OCI runtime shim for Docker Engines that ask runc for capabilities the host cannot grant.
//!
//! Debian's Engine 20.10 gives a `--privileged` container (and `docker exec --privileged`) every
//! capability up to the kernel's last one, whatever the host's bounding set holds; where that set
//! lacks one (this project's CI VMs lack `CAP_SYS_RESOURCE`), runc fails with "unable to apply
//! caps: operation not permitted". Registered as dockerd's default runtime, this program removes
//! from the OCI spec exactly the capabilities the bounding set lacks, in all five sets, and then
//! execs runc with the original arguments. Everything else in the spec is left untouched.
//!
//! The spec is the bundle's `config.json` for `create` and `run` (`--bundle`/`-b`, default the
//! working directory) and the `--process`/`-p` file for `exec`. runc's global flags come before the
//! subcommand and some take a value, so they are skipped by name.
//!
//! Podman's Docker API asks for more than the capabilities: every container gets RLIMIT_NOFILE and
//! RLIMIT_NPROC hard limits of 1048576, above what the runtime's own process holds (conmon runs
//! with RLIMIT_NPROC lowered to `kernel.pid_max`), and raising a hard limit needs the same missing
//! CAP_SYS_RESOURCE ("error setting rlimits for ready process: ... operation not permitted"). So,
//! on such a host, each rlimit of the spec is also lowered to this process's own hard limit: what
//! the container would have inherited anyway, and what Docker gives (it sets no rlimits unless
//! asked).
//!
//! Nothing here can make a container start that runc would refuse for another reason: a spec that
//! cannot be read or parsed is passed through unchanged, and runc reports on it.
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Capability names by number, as in `linux/capability.h` (0 ..= 40).
const CAPABILITIES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The five capability sets of an OCI process.
const SETS: [&str; 5] = [
    "bounding",
    "effective",
    "inheritable",
    "permitted",
    "ambient",
];

/// runc's global flags that take a value (`runc --help`); the others are booleans.
const GLOBAL_FLAGS_WITH_VALUE: [&str; 5] = ["root", "log", "log-format", "criu", "rootless"];

/// OCI rlimit names and their rows in `/proc/<pid>/limits`.
const RLIMITS: [(&str, &str); 16] = [
    ("RLIMIT_CPU", "Max cpu time"),
    ("RLIMIT_FSIZE", "Max file size"),
    ("RLIMIT_DATA", "Max data size"),
    ("RLIMIT_STACK", "Max stack size"),
    ("RLIMIT_CORE", "Max core file size"),
    ("RLIMIT_RSS", "Max resident set"),
    ("RLIMIT_NPROC", "Max processes"),
    ("RLIMIT_NOFILE", "Max open files"),
    ("RLIMIT_MEMLOCK", "Max locked memory"),
    ("RLIMIT_AS", "Max address space"),
    ("RLIMIT_LOCKS", "Max file locks"),
    ("RLIMIT_SIGPENDING", "Max pending signals"),
    ("RLIMIT_MSGQUEUE", "Max msgqueue size"),
    ("RLIMIT_NICE", "Max nice priority"),
    ("RLIMIT_RTPRIO", "Max realtime priority"),
    ("RLIMIT_RTTIME", "Max realtime timeout"),
];

/// Where runc is looked for unless `CAPD_RUNC` names it.
const RUNC_CANDIDATES: [&str; 3] = ["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"];

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let (Some(spec), Some(missing)) = (spec_file(&text), missing_from_bounding_set())
        && !missing.is_empty()
        && let Err(e) = rewrite(&spec, &missing, &own_hard_limits())
    {
        // Not fatal: runc reads the spec next and reports what is wrong with it.
        eprintln!("capd-runc-shim: leaving {} unchanged: {e}", spec.display());
    }
    let runc = std::env::var_os("CAPD_RUNC")
        .map(PathBuf::from)
        .or_else(|| {
            RUNC_CANDIDATES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| PathBuf::from("runc"));
    let err = Command::new(&runc).arg0("runc").args(&args).exec();
    eprintln!("capd-runc-shim: cannot exec {}: {err}", runc.display());
    std::process::exit(127);
}

/// Names of the known capabilities that the bounding set in `/proc/self/status` lacks, or `None`
/// when it cannot be read (then nothing is changed).
fn missing_from_bounding_set() -> Option<Vec<&'static str>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok().map(missing_capabilities)
}

/// This process's hard limits by OCI name (`None`: unlimited), from `/proc/self/limits`; empty
/// when it cannot be read (then no rlimit is changed).
fn own_hard_limits() -> Vec<(&'static str, Option<u64>)> {
    std::fs::read_to_string("/proc/self/limits")
        .map(|t| hard_limits(&t))
        .unwrap_or_default()
}

/// The hard limits of a `/proc/<pid>/limits` text. Its columns are aligned, not delimited, and
/// the row names hold spaces: each row is found by its name, and the hard limit is the second
/// word after it.
fn hard_limits(text: &str) -> Vec<(&'static str, Option<u64>)> {
    RLIMITS
        .iter()
        .filter_map(|(oci, row)| {
            let line = text.lines().find(|l| l.starts_with(row))?;
            let hard = line[row.len()..].split_whitespace().nth(1)?;
            let hard = match hard {
                "unlimited" => None,
                n => Some(n.parse().ok()?),
            };
            Some((*oci, hard))
        })
        .collect()
}

/// The known capabilities whose bit is clear in `bounding`.
fn missing_capabilities(bounding: u64) -> Vec<&'static str> {
    CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding & (1u64 << bit) == 0)
        .map(|(_, name)| *name)
        .collect()
}

/// The spec file runc is about to read, from its command line (without argv[0]): the bundle's
/// `config.json` for `create`/`run`, the `--process` file for `exec`; `None` for any other
/// subcommand (and for `exec` without a process file, whose capabilities come from flags).
fn spec_file(args: &[String]) -> Option<PathBuf> {
    let mut rest = args.iter();
    let sub = loop {
        let arg = rest.next()?;
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            break arg.as_str();
        };
        if !flag.contains('=') && GLOBAL_FLAGS_WITH_VALUE.contains(&flag) {
            rest.next()?;
        }
    };
    let rest: Vec<&String> = rest.collect();
    match sub {
        "create" | "run" => Some(
            flag_value(&rest, "bundle", "b")
                .map(PathBuf::from)
                .or_else(|| std::env::current_dir().ok())?
                .join("config.json"),
        ),
        "exec" => flag_value(&rest, "process", "p").map(PathBuf::from),
        _ => None,
    }
}

/// The value of `--long`/`-short` in `args`, written `--long v`, `--long=v`, `-short v` or `-short=v`
/// (runc's flag library accepts one or two dashes for either name).
fn flag_value<'a>(args: &[&'a String], long: &str, short: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg.as_str() == "--" {
            return None;
        }
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (flag, None),
        };
        if name == long || name == short {
            return match inline {
                Some(v) => Some(v),
                None => it.next().map(|v| v.as_str()),
            };
        }
    }
    None
}

/// Removes `missing` from every capability set of the spec at `path`: a bundle's `config.json`
/// (sets under `process.capabilities`) or a process file (sets under `capabilities`); when
/// CAP_SYS_RESOURCE is missing, also lowers its rlimits to `hard` (see [`clamp_rlimits`]). The
/// file is replaced atomically and only when something changed.
fn rewrite(
    path: &Path,
    missing: &[&str],
    hard: &[(&'static str, Option<u64>)],
) -> Result<(), String> {
    let raw = std::fs::read(path).map_err(|e| e.to_string())?;
    let mut spec: Value = serde_json::from_slice(&raw).map_err(|e| e.to_string())?;
    let stripped = strip(&mut spec, missing);
    let clamped = missing.contains(&"CAP_SYS_RESOURCE") && clamp_rlimits(&mut spec, hard);
    if !stripped && !clamped {
        return Ok(());
    }
    let out = serde_json::to_vec(&spec).map_err(|e| e.to_string())?;
    let tmp = path.with_extension("capd-runc-shim.tmp");
    std::fs::write(&tmp, out).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })
}

/// Removes `missing` from the five capability sets of an OCI spec or process; true if any was
/// present.
fn strip(spec: &mut Value, missing: &[&str]) -> bool {
    let caps = match spec.pointer_mut("/process/capabilities") {
        Some(c) => c,
        None => match spec.get_mut("capabilities") {
            Some(c) => c,
            None => return false,
        },
    };
    let mut changed = false;
    for set in SETS {
        if let Some(Value::Array(list)) = caps.get_mut(set) {
            let before = list.len();
            list.retain(|c| !c.as_str().is_some_and(|c| missing.contains(&c)));
            changed |= list.len() != before;
        }
    }
    changed
}

/// Lowers each rlimit of an OCI spec or process (`process.rlimits` or `rlimits`: `type`, `hard`,
/// `soft`) to the hard limit `hard` gives for its type; true if any was above it. A type not in
/// `hard`, or unlimited there, is left as asked.
fn clamp_rlimits(spec: &mut Value, hard: &[(&str, Option<u64>)]) -> bool {
    let list = match spec.pointer_mut("/process/rlimits") {
        Some(l) => l,
        None => match spec.get_mut("rlimits") {
            Some(l) => l,
            None => return false,
        },
    };
    let Value::Array(list) = list else {
        return false;
    };
    let mut changed = false;
    for rl in list {
        let Some(limit) = rl
            .get("type")
            .and_then(Value::as_str)
            .and_then(|t| hard.iter().find(|(name, _)| *name == t))
            .and_then(|(_, h)| *h)
        else {
            continue;
        };
        for key in ["hard", "soft"] {
            if rl
                .get(key)
                .and_then(Value::as_u64)
                .is_some_and(|v| v > limit)
            {
                rl[key] = Value::from(limit);
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// A spec written by Docker Engine 20.10 for `docker run --privileged --cgroupns=private`,
    /// and a process file it wrote for `docker exec --privileged`, captured on a CI host.
    const DOCKER_PRIVILEGED_SPEC: &str = include_str!("../testdata/docker-privileged-config.json");
    const DOCKER_EXEC_PROCESS: &str = include_str!("../testdata/docker-exec-process.json");

    fn sets(v: &Value, prefix: &str) -> Vec<Vec<String>> {
        SETS.iter()
            .filter_map(|s| v.pointer(&format!("{prefix}/{s}")))
            .map(|l| serde_json::from_value(l.clone()).unwrap())
            .collect()
    }

    #[test]
    fn bounding_set_of_this_project_ci_host_lacks_only_sys_resource() {
        assert_eq!(
            missing_capabilities(0x0000_01ff_feff_ffff),
            ["CAP_SYS_RESOURCE"]
        );
        assert!(missing_capabilities(0x0000_01ff_ffff_ffff).is_empty());
        assert_eq!(
            missing_capabilities(0x0000_00ff_ffff_ffff),
            ["CAP_CHECKPOINT_RESTORE"]
        );
    }

    #[test]
    fn docker_privileged_spec_loses_only_the_missing_capability_in_all_sets() {
        let mut spec: Value = serde_json::from_str(DOCKER_PRIVILEGED_SPEC).unwrap();
        let before = sets(&spec, "/process/capabilities");
        assert!(
            before
                .iter()
                .any(|s| s.iter().any(|c| c == "CAP_SYS_RESOURCE"))
        );
        assert!(strip(&mut spec, &["CAP_SYS_RESOURCE"]));
        let after = sets(&spec, "/process/capabilities");
        assert_eq!(before.len(), after.len(), "no set added or dropped");
        for (b, a) in before.iter().zip(&after) {
            let expected: Vec<&String> = b.iter().filter(|c| *c != "CAP_SYS_RESOURCE").collect();
            assert_eq!(a.iter().collect::<Vec<_>>(), expected);
        }
        // Everything but the capability lists is untouched.
        let mut original: Value = serde_json::from_str(DOCKER_PRIVILEGED_SPEC).unwrap();
        let mut stripped = spec.clone();
        original["process"]["capabilities"] = Value::Null;
        stripped["process"]["capabilities"] = Value::Null;
        assert_eq!(original, stripped);
        // A second pass finds nothing to do.
        assert!(!strip(&mut spec, &["CAP_SYS_RESOURCE"]));
    }

    #[test]
    fn docker_exec_process_file_is_stripped() {
        let mut proc: Value = serde_json::from_str(DOCKER_EXEC_PROCESS).unwrap();
        assert!(strip(&mut proc, &["CAP_SYS_RESOURCE"]));
        for set in sets(&proc, "/capabilities") {
            assert!(!set.iter().any(|c| c == "CAP_SYS_RESOURCE"));
            assert!(set.iter().any(|c| c == "CAP_SYS_ADMIN"), "others kept");
        }
    }

    #[test]
    fn all_five_sets_are_stripped() {
        let mut v = serde_json::json!({"process": {"capabilities": {}}});
        for set in SETS {
            v["process"]["capabilities"][set] = serde_json::json!(["CAP_KILL", "CAP_SYS_RESOURCE"]);
        }
        assert!(strip(&mut v, &["CAP_SYS_RESOURCE"]));
        assert_eq!(sets(&v, "/process/capabilities"), vec![vec!["CAP_KILL"]; 5]);
    }

    #[test]
    fn spec_without_capabilities_is_left_alone() {
        let mut v: Value = serde_json::from_str(r#"{"process":{"args":["sh"]}}"#).unwrap();
        assert!(!strip(&mut v, &["CAP_SYS_RESOURCE"]));
    }

    #[test]
    fn finds_the_spec_after_global_flags() {
        // The command line dockerd's containerd shim uses.
        let a = args(
            "--root /var/run/docker/runtime-runc/moby --log /run/x/log.json --log-format json \
             --systemd-cgroup create --bundle /run/b1 --pid-file /run/b1/init.pid abc",
        );
        assert_eq!(spec_file(&a), Some(PathBuf::from("/run/b1/config.json")));
        let a = args("--root=/r --debug run -b=/run/b2 id");
        assert_eq!(spec_file(&a), Some(PathBuf::from("/run/b2/config.json")));
        let a = args("-root /r exec --process /tmp/proc.json --detach id");
        assert_eq!(spec_file(&a), Some(PathBuf::from("/tmp/proc.json")));
        let a = args("exec -p=/tmp/p.json id");
        assert_eq!(spec_file(&a), Some(PathBuf::from("/tmp/p.json")));
    }

    #[test]
    fn create_without_bundle_uses_the_working_directory() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            spec_file(&args("--root /r create id")),
            Some(cwd.join("config.json"))
        );
    }

    #[test]
    fn other_subcommands_and_exec_without_process_file_change_nothing() {
        for a in [
            "--root /r start id",
            "--root /r delete --force id",
            "state id",
            "exec id sh",
            "--version",
            "",
            "--root",
        ] {
            assert_eq!(spec_file(&args(a)), None, "{a}");
        }
        // A value after `--` belongs to the container's command, not to runc.
        assert_eq!(spec_file(&args("exec id -- -p /x")), None);
    }

    #[test]
    fn rewrite_replaces_the_file_only_when_needed() {
        let dir = std::env::temp_dir().join(format!("capd-runc-shim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.json");
        std::fs::write(&path, DOCKER_PRIVILEGED_SPEC).unwrap();
        rewrite(&path, &["CAP_SYS_RESOURCE"], &[]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("CAP_SYS_RESOURCE"));
        assert!(text.contains("CAP_SYS_ADMIN"));
        // Unparseable input is reported, not clobbered.
        std::fs::write(&path, "not json").unwrap();
        assert!(rewrite(&path, &["CAP_SYS_RESOURCE"], &[]).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not json");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `/proc/self/limits` as read inside a conmon of Podman 4.3 on a CI host.
    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max stack size            8388608              unlimited            bytes     
Max processes             32768                32768                processes 
Max open files            20000                20000                files     
Max nice priority         0                    0                    
";

    #[test]
    fn hard_limits_are_read_by_row_name() {
        assert_eq!(
            hard_limits(LIMITS),
            vec![
                ("RLIMIT_CPU", None),
                ("RLIMIT_STACK", None),
                ("RLIMIT_NPROC", Some(32768)),
                ("RLIMIT_NOFILE", Some(20000)),
                ("RLIMIT_NICE", Some(0)),
            ]
        );
        assert!(hard_limits("garbage").is_empty());
    }

    #[test]
    fn podman_rlimits_are_lowered_to_what_the_runtime_holds() {
        // What Podman's Docker API writes for every container.
        let mut spec = serde_json::json!({"process": {"rlimits": [
            {"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576},
            {"type": "RLIMIT_NPROC", "hard": 1048576, "soft": 1024},
            {"type": "RLIMIT_STACK", "hard": 1048576, "soft": 1048576},
            {"type": "RLIMIT_BOGUS", "hard": 5, "soft": 5},
        ]}});
        assert!(clamp_rlimits(&mut spec, &hard_limits(LIMITS)));
        assert_eq!(
            spec["process"]["rlimits"],
            serde_json::json!([
                {"type": "RLIMIT_NOFILE", "hard": 20000, "soft": 20000},
                {"type": "RLIMIT_NPROC", "hard": 32768, "soft": 1024},
                {"type": "RLIMIT_STACK", "hard": 1048576, "soft": 1048576},
                {"type": "RLIMIT_BOGUS", "hard": 5, "soft": 5},
            ])
        );
        assert!(
            !clamp_rlimits(&mut spec, &hard_limits(LIMITS)),
            "nothing left to do"
        );
        // An exec's process file holds its rlimits at the top level.
        let mut proc =
            serde_json::json!({"rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1}]});
        assert!(clamp_rlimits(&mut proc, &hard_limits(LIMITS)));
        assert_eq!(proc["rlimits"][0]["hard"], 20000);
        // Docker's spec has none.
        let mut docker: Value = serde_json::from_str(DOCKER_PRIVILEGED_SPEC).unwrap();
        let before = docker.clone();
        assert!(!clamp_rlimits(&mut docker, &hard_limits(LIMITS)));
        assert_eq!(docker, before);
    }
}
