//! Hiding secrets in command lines and command output before they reach a condition or a log.
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What a hidden secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// PEM blocks, including one whose END line is missing (output cut off, or a partial write).
static PEM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)-----BEGIN [^\r\n]*?-----.*?(?:-----END [^\r\n]*?-----|\z)").unwrap()
});

/// Flags whose value is a secret: `--token`, `--discovery-token`, `--tls-bootstrap-token`,
/// `--certificate-key`, `--password`, `--secret`… in both `--flag value` and `--flag=value` form.
static SECRET_FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(--(?:[a-z0-9]+-)*(?:token|password|secret)|--certificate-key)(=|[ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s"']+)"#,
    )
    .unwrap()
});

/// Discovery CA cert hashes (and any other sha256 digest).
static SHA256: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\bsha256:[0-9a-f]{64}\b").unwrap());

/// kubeadm bootstrap tokens `[a-z0-9]{6}.[a-z0-9]{16}`.
static BOOTSTRAP_TOKEN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b").unwrap());

/// Runs of 64 or more base64 (standard or URL-safe) characters: keys, certificates, encoded
/// payloads, hex certificate keys. Filtered by [`looks_like_encoded`] so long paths survive.
static LONG_BASE64: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_-]{64,}={0,2}").unwrap());

/// Random base64 has about one `/`, `-` or `_` per 32 characters; paths and hyphenated names have
/// one every few characters.
fn looks_like_encoded(run: &str) -> bool {
    let separators = run
        .bytes()
        .filter(|b| matches!(b, b'/' | b'-' | b'_'))
        .count();
    separators * 16 <= run.len()
}

/// Hide secrets in `text`: PEM blocks, the values of `--token`-like and `--certificate-key`
/// flags, `sha256:<hex>` hashes, bootstrap tokens and long base64 runs become [`REDACTED`].
pub fn redact(text: &str) -> String {
    let text = PEM.replace_all(text, "[redacted PEM block]");
    let text = SECRET_FLAG.replace_all(&text, |c: &Captures<'_>| {
        format!("{}{}{REDACTED}", &c[1], &c[2])
    });
    let text = SHA256.replace_all(&text, format!("sha256:{REDACTED}").as_str());
    let text = BOOTSTRAP_TOKEN.replace_all(&text, REDACTED);
    let text = LONG_BASE64.replace_all(&text, |c: &Captures<'_>| {
        if looks_like_encoded(&c[0]) {
            REDACTED.to_string()
        } else {
            c[0].to_string()
        }
    });
    text.into_owned()
}

/// The credential-like words of a bootstrap plan: a command's output may echo what the Secret
/// holds in a shape no pattern above knows (a password, an API key, a random name), so every
/// word of the plan's arguments and file content that looks like one is hidden in that output
/// too. "Looks like one": at least [`SECRET_WORD_MIN`] characters with both letters and digits,
/// so that program names, paths and flags stay readable.
#[derive(Debug, Default)]
pub struct SecretWords(std::collections::HashSet<String>);

/// Shorter words are too common to hide without hiding the output itself.
pub const SECRET_WORD_MIN: usize = 12;

/// Word boundaries, the same for the plan and the output, so `token=<word>` and `"<word>"` in
/// either split the same way.
fn is_boundary(c: char) -> bool {
    c.is_whitespace() || "\"'`,;:=()[]{}<>|&$".contains(c)
}

fn secret_like(word: &str) -> bool {
    word.len() >= SECRET_WORD_MIN
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().any(|b| b.is_ascii_alphabetic())
}

impl SecretWords {
    /// The credential-like words of `texts` (argv words and stdin content of a plan's steps).
    pub fn collect<'a>(texts: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut words = std::collections::HashSet::new();
        for text in texts {
            for word in String::from_utf8_lossy(text).split(is_boundary) {
                if secret_like(word) {
                    words.insert(word.to_string());
                }
            }
        }
        SecretWords(words)
    }

    /// `text` with each of these words replaced by [`REDACTED`].
    pub fn hide(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut String| {
            if self.0.contains(word.as_str()) {
                out.push_str(REDACTED);
            } else {
                out.push_str(word);
            }
            word.clear();
        };
        for c in text.chars() {
            if is_boundary(c) {
                flush(&mut word, &mut out);
                out.push(c);
            } else {
                word.push(c);
            }
        }
        flush(&mut word, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_of_the_plan_are_hidden_in_output() {
        let words = SecretWords::collect([
            b"yes canary-5e1f0c9a77d4 | head".as_slice(),
            b"password=Hunter2Hunter2 /etc/kubernetes/admin.conf kubeadm".as_slice(),
        ]);
        let out = words.hide("got canary-5e1f0c9a77d4\nlogin \"Hunter2Hunter2\" from /etc/kubernetes/admin.conf by kubeadm v1.35.0");
        assert_eq!(
            out,
            "got [redacted]\nlogin \"[redacted]\" from /etc/kubernetes/admin.conf by kubeadm v1.35.0"
        );
        assert_eq!(SecretWords::default().hide("as is"), "as is");
    }

    const TOKEN: &str = "abcdef.0123456789abcdef";
    const HASH: &str = "sha256:3c5f0a8d9e7b6a5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c";
    const CERT_KEY: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn bootstrap_tokens() {
        let out = redact(&format!("token: {TOKEN}\nother text"));
        assert_eq!(out, "token: [redacted]\nother text");
        // Not a token: wrong shape.
        assert_eq!(redact("www.example.com"), "www.example.com");
        assert_eq!(redact("abcdef.0123"), "abcdef.0123");
    }

    #[test]
    fn token_flags_both_forms() {
        assert_eq!(
            redact("kubeadm join 10.0.0.1:6443 --token s3cr3t-value --v=5"),
            "kubeadm join 10.0.0.1:6443 --token [redacted] --v=5"
        );
        assert_eq!(
            redact("kubeadm join --token=s3cr3t-value"),
            "kubeadm join --token=[redacted]"
        );
        assert_eq!(
            redact("x --discovery-token 'abc def' --tls-bootstrap-token \"q w\""),
            "x --discovery-token [redacted] --tls-bootstrap-token [redacted]"
        );
        // Flags that merely start with "token" keep their values.
        assert_eq!(
            redact("kubeadm token create --ttl 0"),
            "kubeadm token create --ttl 0"
        );
        assert_eq!(redact("--token-ttl 24h"), "--token-ttl 24h");
        assert_eq!(
            redact("--discovery-token-unsafe-skip-ca-verification"),
            "--discovery-token-unsafe-skip-ca-verification"
        );
    }

    #[test]
    fn discovery_hashes() {
        let out = redact(&format!("--discovery-token-ca-cert-hash {HASH} done"));
        assert_eq!(out, "--discovery-token-ca-cert-hash sha256:[redacted] done");
        assert!(!out.contains("3c5f0a8d"));
    }

    #[test]
    fn certificate_keys() {
        assert_eq!(
            redact(&format!(
                "kubeadm join --control-plane --certificate-key {CERT_KEY}"
            )),
            "kubeadm join --control-plane --certificate-key [redacted]"
        );
        assert_eq!(
            redact(&format!("--certificate-key={CERT_KEY}")),
            "--certificate-key=[redacted]"
        );
        // As printed on its own line by `kubeadm init --upload-certs`.
        assert_eq!(
            redact(&format!(
                "[upload-certs] Using certificate key:\n{CERT_KEY}\n"
            )),
            "[upload-certs] Using certificate key:\n[redacted]\n"
        );
    }

    #[test]
    fn pem_blocks() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----";
        let out = redact(&format!("before\n{pem}\nafter"));
        assert_eq!(out, "before\n[redacted PEM block]\nafter");

        let two = redact(
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\nmid\n-----BEGIN EC PRIVATE KEY-----\nBBBB\n-----END EC PRIVATE KEY-----",
        );
        assert_eq!(two, "[redacted PEM block]\nmid\n[redacted PEM block]");

        // Cut off before the END line: everything after BEGIN is hidden.
        let cut = redact("error reading\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\nkqhkiG9w0");
        assert_eq!(cut, "error reading\n[redacted PEM block]");
    }

    #[test]
    fn long_base64_runs() {
        let b64 = "TUlJQ3lEQ0NBYkNnQXdJQkFnSUJBREFOQmdrcWhraUc5dzBCQVFzRkFEQVZNUk13RVFZRFZRUURFd3ByZFdKbGNtNWxkR1Z6TUI0WERUSTBNREV3TVRBd01EQXdNRm9YRFRNME1ERXlPVEF3TURBd01Gb3dGVEVUTUJFR0ExVUUK";
        assert_eq!(
            redact(&format!("content: {b64} end")),
            "content: [redacted] end"
        );
        // URL-safe base64 (a JWT segment).
        let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50Iiwia3ViZXJuZXRlcy5pby9zZXJ2aWNlYWNjb3VudC9uYW1lc3BhY2UiOiJkZWZhdWx0In0.c2lnbmF0dXJl";
        assert!(!redact(jwt).contains("eyJpc3MiOiJrdWJl"));
        // Shorter runs are kept.
        let short = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=";
        assert_eq!(redact(short), short);
    }

    #[test]
    fn ordinary_output_is_untouched() {
        let text = "[init] Using Kubernetes version: v1.31.0\n\
            [preflight] Running pre-flight checks\n\
            error execution phase preflight: [preflight] Some fatal errors occurred:\n\
            \t[ERROR Port-6443]: Port 6443 is in use\n\
            /usr/lib/x86_64-linux-gnu/systemd/system-generators/some-long-generator-name-here-x\n\
            kube-controller-manager-my-cluster-control-plane-abcde-xyz12-and-more-words";
        assert_eq!(redact(text), text);
    }

    #[test]
    fn redaction_is_idempotent() {
        let text = format!("--token {TOKEN} {HASH} {CERT_KEY}");
        let once = redact(&text);
        assert_eq!(redact(&once), once);
        assert!(!once.contains("0123456789abcdef"));
    }
}
