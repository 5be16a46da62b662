//! `--tls-min-version` and `--tls-cipher-suites` (upstream's names and values, Go's
//! `crypto/tls` spelling) turned into what our rustls webhook server offers.
use crate::webhook::ServerTls;

/// TLS 1.3 suites by Go's names: Go offers them all whatever `--tls-cipher-suites` says, and so
/// do we.
const TLS13_NAMES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The server's TLS settings and the warnings to log once (values upstream accepts that rustls
/// cannot honour exactly, always in the stricter direction).
pub fn server_tls(
    cert_name: &str,
    key_name: &str,
    min_version: &str,
    cipher_suites: &[String],
) -> Result<(ServerTls, Vec<String>), String> {
    let mut warnings = Vec::new();
    let mut tls13_only = match min_version {
        "VersionTLS13" => true,
        "VersionTLS12" | "" => false,
        "VersionTLS10" | "VersionTLS11" => {
            warnings.push(format!(
                "--tls-min-version={min_version}: the webhook server offers TLS 1.2 at the least"
            ));
            false
        }
        other => {
            return Err(format!(
                "--tls-min-version={other:?} is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13"
            ));
        }
    };
    let names: Vec<&str> = cipher_suites
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    let tls12_suites = if names.is_empty() {
        None
    } else {
        let offered = rustls::crypto::ring::default_provider().cipher_suites;
        let mut keep = Vec::new();
        for name in names {
            if TLS13_NAMES.contains(&name) {
                continue;
            }
            match offered
                .iter()
                .map(|s| s.suite())
                .find(|s| format!("{s:?}") == name)
            {
                Some(suite) => keep.push(suite),
                // Go knows more (CBC, RSA key exchange, 3DES): refusing them is stricter.
                None if name.starts_with("TLS_") => warnings.push(format!(
                    "--tls-cipher-suites: {name} is not offered by this webhook server (rustls has only AEAD suites with ECDHE)"
                )),
                None => return Err(format!("--tls-cipher-suites: unknown cipher suite {name:?}")),
            }
        }
        // Nothing left for TLS 1.2 (only suites rustls lacks were named): serve TLS 1.3 only
        // rather than a TLS 1.2 without suites.
        if keep.is_empty() && !tls13_only {
            warnings.push(
                "--tls-cipher-suites: no TLS 1.2 suite left; the webhook server offers TLS 1.3 only"
                    .into(),
            );
            tls13_only = true;
        }
        Some(keep)
    };
    Ok((
        ServerTls {
            cert_name: cert_name.to_string(),
            key_name: key_name.to_string(),
            tls13_only,
            tls12_suites,
        },
        warnings,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_defaults_are_rustls_defaults() {
        let (tls, warnings) = server_tls("tls.crt", "tls.key", "VersionTLS12", &[]).unwrap();
        assert_eq!(tls, ServerTls::default());
        assert!(warnings.is_empty());
    }

    #[test]
    fn versions_and_suites_by_go_names() {
        let (tls, _) = server_tls("c", "k", "VersionTLS13", &[]).unwrap();
        assert!(tls.tls13_only);
        let suites = [
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_string(),
            "TLS_AES_128_GCM_SHA256".to_string(),
            "TLS_RSA_WITH_AES_128_CBC_SHA".to_string(),
        ];
        let (tls, warnings) = server_tls("c", "k", "VersionTLS10", &suites).unwrap();
        assert_eq!(
            tls.tls12_suites,
            Some(vec![
                rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
            ])
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        let (tls, _) = server_tls("c", "k", "", &suites[2..]).unwrap();
        assert!(tls.tls13_only, "no TLS 1.2 suite left");
        assert!(server_tls("c", "k", "TLS1.2", &[]).is_err());
        assert!(server_tls("c", "k", "", &["fast".to_string()]).is_err());
    }
}
