//! The fake API server's serving certificate, signed by the workload cluster's CA (the
//! `<cluster>-ca` Secret's `tls.crt`/`tls.key`), so that clients built from the cluster's
//! kubeconfig trust it.
//!
//! CAPI writes its CA keys as PKCS#1 (`RSA PRIVATE KEY`), and KCP's ECDSA option as SEC1
//! (`EC PRIVATE KEY`). rcgen over ring reads PKCS#8 only, so such a key is first wrapped into
//! PKCS#8 here (the DER framing only: the key itself is not touched). The serving key is an
//! ECDSA P-256 key made for each listener; upstream's fake uses one RSA key for all, and any of
//! these verifies the same way for a client.
use std::{net::IpAddr, sync::Arc};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::{
    ServerConfig,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, pem::PemObject},
};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("CA key: {0}")]
    Key(String),
    #[error("CA certificate: {0}")]
    Ca(String),
    #[error("serving certificate: {0}")]
    Leaf(#[from] rcgen::Error),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// DER length octets.
fn der_len(len: usize, out: &mut Vec<u8>) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    der_len(content.len(), &mut out);
    out.extend_from_slice(content);
    out
}

/// `PrivateKeyInfo { version 0, algorithm, OCTET STRING key }` (RFC 5208).
fn pkcs8(algorithm: &[u8], key: &[u8]) -> PrivatePkcs8KeyDer<'static> {
    let mut body = vec![0x02, 0x01, 0x00];
    body.extend(der(0x30, algorithm));
    body.extend(der(0x04, key));
    PrivatePkcs8KeyDer::from(der(0x30, &body))
}

/// rsaEncryption with NULL parameters.
const RSA: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];
/// id-ecPublicKey with the curve: P-256, then P-384.
const EC_P256: &[u8] = &[
    0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d,
    0x03, 0x01, 0x07,
];
const EC_P384: &[u8] = &[
    0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22,
];

/// A signing key from PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (P-256, P-384).
pub fn signing_key(pem: &[u8]) -> Result<KeyPair, CertError> {
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| CertError::Key(e.to_string()))?;
    let unreadable = |e: rcgen::Error| CertError::Key(e.to_string());
    match key {
        PrivateKeyDer::Pkcs8(k) => KeyPair::try_from(&k).map_err(unreadable),
        PrivateKeyDer::Pkcs1(k) => {
            KeyPair::try_from(&pkcs8(RSA, k.secret_pkcs1_der())).map_err(unreadable)
        }
        PrivateKeyDer::Sec1(k) => [EC_P256, EC_P384]
            .iter()
            .find_map(|alg| KeyPair::try_from(&pkcs8(alg, k.secret_sec1_der())).ok())
            .ok_or_else(|| CertError::Key("an EC key on a curve other than P-256 or P-384".into())),
        _ => Err(CertError::Key("an unknown key format".into())),
    }
}

/// The CA that signs leaves, from its PEM certificate and key.
pub(crate) fn issuer(
    ca_cert_pem: &[u8],
    ca_key_pem: &[u8],
) -> Result<Issuer<'static, KeyPair>, CertError> {
    let ca_key = signing_key(ca_key_pem)?;
    let ca_pem = std::str::from_utf8(ca_cert_pem).map_err(|e| CertError::Ca(e.to_string()))?;
    Issuer::from_ca_cert_pem(ca_pem, ca_key).map_err(|e| CertError::Ca(e.to_string()))
}

/// Valid from yesterday (clock skew) for a year, by calendar day, as upstream's leaves: a
/// short validity would trip KCP's certificate-expiry rollouts.
pub(crate) fn valid_for_a_year(params: &mut CertificateParams) {
    use chrono::Datelike;
    let day = chrono::Utc::now().date_naive() - chrono::Days::new(1);
    let ymd = |d: chrono::NaiveDate| rcgen::date_time_ymd(d.year(), d.month() as u8, d.day() as u8);
    params.not_before = ymd(day);
    params.not_after = ymd(day + chrono::Days::new(366));
}

/// A serving certificate for the fake API server (CN `kube-apiserver`, the SANs a client may
/// dial: localhost, the loopback addresses and `hosts`), signed by the CA, as rustls serves
/// it. ALPN offers HTTP/1.1 only: the API is served over HTTP/1.1 (the fake etcd's HTTP/2 is
/// reached through port-forward, with its own TLS).
pub fn serving_config(
    ca_cert_pem: &[u8],
    ca_key_pem: &[u8],
    hosts: &[String],
) -> Result<Arc<ServerConfig>, CertError> {
    let issuer = issuer(ca_cert_pem, ca_key_pem)?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    for h in hosts {
        let h = h.trim_start_matches('[').trim_end_matches(']');
        if !h.is_empty() && !names.iter().any(|n| n == h) {
            names.push(h.to_string());
        }
    }
    names.retain(|n| n.parse::<IpAddr>().is_ok() || !n.contains(['/', ' ']));
    let mut params = CertificateParams::new(names)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    valid_for_a_year(&mut params);
    let key = KeyPair::generate()?;
    let leaf = params.signed_by(&key, &issuer)?;
    let mut tls = ServerConfig::builder_with_provider(crate::webhook::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(tls))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const RSA_PKCS1: &[u8] = include_bytes!("testdata/ca-rsa-pkcs1.key");
    const EC_SEC1: &[u8] = include_bytes!("testdata/ca-ec-sec1.key");

    /// A TLS client that trusts `ca` (PEM) and offers `alpn`.
    pub(crate) fn tls_client(ca: &str, alpn: &[u8]) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(crate::webhook::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// A self-signed CA certificate for a key, as CAPI makes the cluster CA.
    pub(crate) fn ca_cert(key_pem: &[u8]) -> String {
        let key = signing_key(key_pem).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn capis_key_formats_are_read() {
        assert!(String::from_utf8_lossy(RSA_PKCS1).starts_with("-----BEGIN RSA PRIVATE KEY"));
        let rsa = signing_key(RSA_PKCS1).unwrap();
        assert_eq!(rsa.algorithm(), &rcgen::PKCS_RSA_SHA256);
        assert!(String::from_utf8_lossy(EC_SEC1).starts_with("-----BEGIN EC PRIVATE KEY"));
        let ec = signing_key(EC_SEC1).unwrap();
        assert_eq!(ec.algorithm(), &rcgen::PKCS_ECDSA_P256_SHA256);
        let pkcs8 = KeyPair::generate().unwrap().serialize_pem();
        assert!(signing_key(pkcs8.as_bytes()).is_ok());
    }

    #[test]
    fn a_serving_certificate_is_signed_by_either_ca() {
        for key in [RSA_PKCS1, EC_SEC1] {
            let ca = ca_cert(key);
            let config =
                serving_config(ca.as_bytes(), key, &["10.0.0.7".into(), "[::2]".into()]).unwrap();
            assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(signing_key(b"nonsense"), Err(CertError::Key(_))));
        let ca = ca_cert(RSA_PKCS1);
        assert!(matches!(
            serving_config(b"not a cert", RSA_PKCS1, &[]),
            Err(CertError::Ca(_))
        ));
        let wrong = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        assert!(serving_config(ca.as_bytes(), wrong.as_bytes(), &[]).is_err());
    }
}
