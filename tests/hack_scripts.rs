//! The hack/ scripts' shared behaviour, run with the real bash (no plane or Docker needed).
use std::process::Command;

/// Under `set -e`, a failing pipeline whose stderr was discarded used to end a script without a
/// word (e.g. reading the docker0 address where that bridge does not exist).
#[test]
fn an_early_exit_names_what_failed() {
    let script = r#"
        source hack/lib.sh
        address() { ip -4 -o addr show dev capd-rs-no-such-device 2>/dev/null | awk '{print $4}'; }
        a=$(address)
        echo "not reached"
    "#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env(
            "CAPD_RS_CACHE",
            std::env::temp_dir().join("capd-rs-hack-test"),
        )
        .output()
        .expect("bash runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "the script stops");
    assert!(!stdout.contains("not reached"), "{stdout}");
    assert!(
        stderr.contains("ERROR")
            && stderr.contains("a=$(address)")
            && stderr.contains("failed (exit 1)"),
        "the failing command and its status are named: {stderr:?}"
    );
}
