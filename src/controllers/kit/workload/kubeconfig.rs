//! The workload cluster's kubeconfig Secret, read as data and nothing more.
//!
//! Whoever can write `<cluster>-kubeconfig` in a namespace decides what this file says. A full
//! kubeconfig is a program, not data: an `exec` credential plugin or an `auth-provider` runs a
//! command in the manager, `tokenFile` and the `*-file` fields read the manager's own files (its
//! ServiceAccount token, which can read every Secret) and send them to whichever server the file
//! names. So the client is built from an allow-list of inline fields only, and its server must
//! be the control-plane endpoint of the cluster the Secret belongs to. Anything else is refused,
//! naming the field, never quoting a value. Pure: the rules are unit-tested and fuzzed.
use std::collections::BTreeSet;
use std::time::Duration;

use kube::{
    Config,
    config::{AuthInfo, Kubeconfig},
};
use rustls::pki_types::{CertificateDer, pem::PemObject};
use serde::Serialize;

/// CAPI's kubeconfig with its CA and an admin client certificate is about 6 KiB; a bound keeps a
/// hostile Secret (the API server allows 1 MiB) from reaching the YAML parser at full size.
pub const MAX_BYTES: usize = 64 * 1024;

/// The only keys a `users[].user` may carry: inline credentials.
const USER_KEYS: &[&str] = &["client-certificate-data", "client-key-data", "token"];
/// The only keys a `clusters[].cluster` may carry. `disable-compression` changes no trust.
const CLUSTER_KEYS: &[&str] = &[
    "server",
    "certificate-authority-data",
    "disable-compression",
];

/// Where the workload client must connect: the cluster's control-plane endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why a kubeconfig Secret is not used. Messages name fields and sizes, never values (the
/// server URL excepted: it is an address, not a credential, and bounded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no key \"value\"")]
    NoValue,
    #[error("the value is {0} bytes; a kubeconfig here may be at most {MAX_BYTES}")]
    TooLarge(usize),
    #[error("the value is not UTF-8")]
    NotUtf8,
    #[error("the value is not a kubeconfig")]
    NotKubeconfig,
    #[error("{0} is missing")]
    Missing(String),
    #[error(
        "{0} is not allowed: the workload client uses inline data only (server, certificate-authority-data, client-certificate-data, client-key-data, token)"
    )]
    Field(String),
    #[error("{0} is not valid")]
    Invalid(&'static str),
    #[error(
        "server {server} is not the cluster's control-plane endpoint https://{expected}: the workload client only talks to that endpoint"
    )]
    Server { server: String, expected: Endpoint },
}

/// A client configuration for the workload cluster from the Secret's `value`, if every field it
/// uses is inline data and its server is `expected`.
pub fn config(value: Option<&[u8]>, expected: &Endpoint) -> Result<Config, Refused> {
    let raw = value.ok_or(Refused::NoValue)?;
    if raw.len() > MAX_BYTES {
        return Err(Refused::TooLarge(raw.len()));
    }
    let text = std::str::from_utf8(raw).map_err(|_| Refused::NotUtf8)?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| Refused::NotKubeconfig)?;
    let (context, cluster_name, user_name) = current_context(&kubeconfig)?;

    // The user first: what runs a program or reads a file is named before anything else.
    let user = match user_name {
        Some(name) => {
            let user = kubeconfig
                .auth_infos
                .iter()
                .find(|u| u.name == name)
                .and_then(|u| u.auth_info.as_ref())
                .ok_or_else(|| Refused::Missing(format!("users[{name}]")))?;
            allowed_keys(user, USER_KEYS, &format!("users[{name}].user"))?;
            user.clone()
        }
        None => AuthInfo::default(),
    };
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| Refused::Missing(format!("clusters[{cluster_name}]")))?;
    let mut checked = cluster.clone();
    // `insecure-skip-tls-verify: false` is the default, spelled out: harmless.
    if checked.insecure_skip_tls_verify == Some(false) {
        checked.insecure_skip_tls_verify = None;
    }
    allowed_keys(
        &checked,
        CLUSTER_KEYS,
        &format!("clusters[{cluster_name}].cluster"),
    )?;
    let server = cluster
        .server
        .as_deref()
        .ok_or_else(|| Refused::Missing(format!("clusters[{cluster_name}].cluster.server")))?;
    let cluster_url = pinned_url(server, expected)?;
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .ok_or_else(|| {
            Refused::Missing(format!(
                "clusters[{cluster_name}].cluster.certificate-authority-data"
            ))
        })?;
    let root_cert = certificates(ca)?;

    if user.token.is_none() && user.client_certificate_data.is_none() {
        return Err(Refused::Missing(format!(
            "contexts[{context}]: a user with token or client-certificate-data"
        )));
    }
    if user.client_certificate_data.is_some() != user.client_key_data.is_some() {
        return Err(Refused::Invalid(
            "client-certificate-data without client-key-data (or the reverse)",
        ));
    }

    let mut config = Config::new(cluster_url);
    config.root_cert = Some(root_cert);
    config.disable_compression = cluster.disable_compression.unwrap_or(false);
    // Only the allowed fields are carried over: a fresh AuthInfo holds nothing that runs or reads.
    config.auth_info = AuthInfo {
        token: user.token,
        client_certificate_data: user.client_certificate_data,
        client_key_data: user.client_key_data,
        ..AuthInfo::default()
    };
    Ok(config)
}

/// The Secret's `value` with the server of `clusters[cluster]` set to `server`, or `None` when
/// it already is. An in-memory cluster's endpoint moves with the manager's address; the
/// kubeconfig CAPI wrote names the old one, and CAPI never rewrites it. Everything else in the
/// file is kept as written. It is only reserialized, never used, so no field is refused here.
pub fn with_server(
    value: Option<&[u8]>,
    cluster: &str,
    server: &str,
) -> Result<Option<Vec<u8>>, Refused> {
    use serde_yaml_ng::Value;
    let raw = value.ok_or(Refused::NoValue)?;
    if raw.len() > MAX_BYTES {
        return Err(Refused::TooLarge(raw.len()));
    }
    let text = std::str::from_utf8(raw).map_err(|_| Refused::NotUtf8)?;
    let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|_| Refused::NotKubeconfig)?;
    let missing = || Refused::Missing(format!("clusters[{}].cluster", shorten(cluster)));
    let entry = doc
        .get_mut("clusters")
        .and_then(Value::as_sequence_mut)
        .ok_or_else(missing)?
        .iter_mut()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(cluster))
        .and_then(|c| c.get_mut("cluster"))
        .and_then(Value::as_mapping_mut)
        .ok_or_else(missing)?;
    if entry.get("server").and_then(Value::as_str) == Some(server) {
        return Ok(None);
    }
    entry.insert("server".into(), server.into());
    let out = serde_yaml_ng::to_string(&doc).map_err(|_| Refused::NotKubeconfig)?;
    Ok(Some(out.into_bytes()))
}

/// With request timeouts: a workload request sits on a reconcile's path.
pub fn with_timeouts(mut config: Config, timeout: Duration) -> Config {
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config
}

/// The context in use (`current-context`, or the only one) and its cluster and user names.
fn current_context(k: &Kubeconfig) -> Result<(String, String, Option<String>), Refused> {
    let named = match k.current_context.as_deref() {
        Some(name) if !name.is_empty() => k.contexts.iter().find(|c| c.name == name),
        _ if k.contexts.len() == 1 => k.contexts.first(),
        _ => None,
    }
    .ok_or_else(|| Refused::Missing("current-context".into()))?;
    let context = named
        .context
        .as_ref()
        .ok_or_else(|| Refused::Missing(format!("contexts[{}].context", named.name)))?;
    allowed_keys(
        context,
        &["cluster", "user", "namespace"],
        &format!("contexts[{}].context", named.name),
    )?;
    Ok((
        named.name.clone(),
        context.cluster.clone(),
        context.user.clone(),
    ))
}

/// Refuse any key of `section` that is not in `allowed`, naming the first one (in key order, so
/// the message is stable). Unknown keys count: a newer client might act on them.
fn allowed_keys(section: &impl Serialize, allowed: &[&str], at: &str) -> Result<(), Refused> {
    let value = serde_json::to_value(section).map_err(|_| Refused::NotKubeconfig)?;
    let keys: BTreeSet<&str> = value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k.as_str())
                .collect()
        })
        .unwrap_or_default();
    match keys.into_iter().find(|k| !allowed.contains(k)) {
        Some(key) => Err(Refused::Field(format!("{at}.{}", shorten(key)))),
        None => Ok(()),
    }
}

/// `server` parsed, if it is `https://<expected>` (an optional trailing `/`, nothing more).
fn pinned_url(server: &str, expected: &Endpoint) -> Result<http::Uri, Refused> {
    let wrong = || Refused::Server {
        server: shorten(server),
        expected: expected.clone(),
    };
    let uri: http::Uri = server.parse().map_err(|_| wrong())?;
    let authority = uri.authority().ok_or_else(wrong)?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let same = uri.scheme_str() == Some("https")
        && host.eq_ignore_ascii_case(&expected.host)
        && authority.port_u16().unwrap_or(443) == expected.port
        && !authority.as_str().contains('@')
        && matches!(uri.path(), "" | "/")
        && uri.query().is_none();
    if same { Ok(uri) } else { Err(wrong()) }
}

/// The CA bundle: base64 of one or more PEM certificates, as DER.
fn certificates(data: &str) -> Result<Vec<Vec<u8>>, Refused> {
    use base64::Engine as _;
    let invalid = || Refused::Invalid("certificate-authority-data");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| invalid())?;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|_| invalid())?;
    if certs.is_empty() {
        return Err(invalid());
    }
    Ok(certs)
}

/// A name or address from the Secret, bounded for a condition message.
fn shorten(s: &str) -> String {
    crate::api::conditions::truncate(s, 120)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// A self-signed certificate, PEM (any valid one will do: only parsing is checked here).
    fn ca_pem() -> String {
        let cert = rcgen::generate_simple_self_signed(vec!["kubernetes".into()]).unwrap();
        cert.cert.pem()
    }

    fn endpoint() -> Endpoint {
        Endpoint {
            host: "172.18.0.3".into(),
            port: 6443,
        }
    }

    /// CAPI's shape: one cluster, one admin user with a client certificate, one context.
    fn kubeconfig(cluster_extra: &str, user: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster:
    server: https://172.18.0.3:6443
    certificate-authority-data: {ca}
{cluster_extra}
contexts:
- name: c1-admin@c1
  context:
    cluster: c1
    user: c1-admin
current-context: c1-admin@c1
users:
- name: c1-admin
  user:
{user}
"#,
            ca = b64(&ca_pem()),
        )
    }

    const CERT_USER: &str = "    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n";

    fn parse(text: &str) -> Result<Config, Refused> {
        config(Some(text.as_bytes()), &endpoint())
    }

    #[test]
    fn capi_kubeconfig_is_accepted_with_only_inline_credentials() {
        let c = parse(&kubeconfig("", CERT_USER)).unwrap();
        assert_eq!(c.cluster_url.to_string(), "https://172.18.0.3:6443/");
        assert_eq!(c.root_cert.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            c.auth_info.client_certificate_data.as_deref(),
            Some("Y2VydA==")
        );
        assert!(c.auth_info.exec.is_none() && c.auth_info.token_file.is_none());
        let token = parse(&kubeconfig("", "    token: abc.def\n")).unwrap();
        assert!(token.auth_info.token.is_some());
    }

    /// Finding 1 of issue 25: each of these ran a command, read a file of the manager's or
    /// trusted another server before.
    #[test]
    fn programs_files_and_other_trust_are_refused_by_field() {
        let exec = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch /tmp/pwned\"]\n";
        let cases = [
            ("", exec, "users[c1-admin].user.exec"),
            (
                "",
                "    auth-provider:\n      name: oidc\n      config: {cmd-path: /bin/sh}\n",
                "users[c1-admin].user.auth-provider",
            ),
            (
                "",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
                "users[c1-admin].user.tokenFile",
            ),
            (
                "",
                "    client-certificate: /etc/kubernetes/pki/ca.crt\n    client-key: /etc/kubernetes/pki/ca.key\n",
                "users[c1-admin].user.client-certificate",
            ),
            (
                "",
                "    token: t\n    as: system:admin\n",
                "users[c1-admin].user.as",
            ),
            (
                "",
                "    username: admin\n    password: hunter2\n",
                "users[c1-admin].user.password",
            ),
            (
                "",
                "    token: t\n    future-field: 1\n",
                "users[c1-admin].user.future-field",
            ),
            (
                "    insecure-skip-tls-verify: true\n",
                CERT_USER,
                "clusters[c1].cluster.insecure-skip-tls-verify",
            ),
            (
                "    proxy-url: http://10.0.0.1:3128\n",
                CERT_USER,
                "clusters[c1].cluster.proxy-url",
            ),
            (
                "    certificate-authority: /etc/ssl/ca.pem\n",
                CERT_USER,
                "clusters[c1].cluster.certificate-authority",
            ),
        ];
        for (cluster, user, field) in cases {
            let err = parse(&kubeconfig(cluster, user)).unwrap_err();
            assert_eq!(err, Refused::Field(field.into()), "{cluster}{user}");
            let message = err.to_string();
            assert!(
                !message.contains("hunter2") && !message.contains("/bin/sh"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_server_is_pinned_to_the_control_plane_endpoint() {
        let good = kubeconfig("", CERT_USER);
        for server in [
            "https://10.9.9.9:6443",
            "https://172.18.0.3:6444",
            "http://172.18.0.3:6443",
            "https://172.18.0.3:6443/api/../../evil",
            "https://user:pw@172.18.0.3:6443",
            "https://172.18.0.3",
            "172.18.0.3:6443",
        ] {
            let text = good.replace("https://172.18.0.3:6443", server);
            match parse(&text) {
                Err(Refused::Server { expected, .. }) => assert_eq!(expected, endpoint()),
                other => panic!("{server}: {other:?}"),
            }
        }
        let slash = good.replace("https://172.18.0.3:6443", "https://172.18.0.3:6443/");
        assert!(parse(&slash).is_ok());
        let v6 = Endpoint {
            host: "fd00::3".into(),
            port: 6443,
        };
        let text = good.replace("https://172.18.0.3:6443", "https://[fd00::3]:6443");
        assert!(config(Some(text.as_bytes()), &v6).is_ok());
    }

    #[test]
    fn missing_or_malformed_parts_are_named() {
        assert_eq!(config(None, &endpoint()).unwrap_err(), Refused::NoValue);
        let big = vec![b'a'; MAX_BYTES + 1];
        assert_eq!(
            config(Some(&big), &endpoint()).unwrap_err(),
            Refused::TooLarge(MAX_BYTES + 1)
        );
        assert_eq!(
            config(Some(b"\xff\xfe"), &endpoint()).unwrap_err(),
            Refused::NotUtf8
        );
        assert_eq!(
            parse("token: s3cr3t-not-a-kubeconfig: [").unwrap_err(),
            Refused::NotKubeconfig
        );
        let no_ca = kubeconfig("", CERT_USER).replace("certificate-authority-data", "x-ca");
        assert!(matches!(parse(&no_ca), Err(Refused::Field(f)) if f.ends_with("x-ca")));
        let bad_ca = kubeconfig("", CERT_USER);
        let start = bad_ca.find("certificate-authority-data: ").unwrap() + 28;
        let end = start + bad_ca[start..].find('\n').unwrap();
        let bad_ca = format!("{}{}{}", &bad_ca[..start], b64("not pem"), &bad_ca[end..]);
        assert_eq!(
            parse(&bad_ca).unwrap_err(),
            Refused::Invalid("certificate-authority-data")
        );
        let no_user = kubeconfig("", "    {}\n");
        assert!(matches!(parse(&no_user), Err(Refused::Missing(_))));
        let half = kubeconfig("", "    client-certificate-data: Y2VydA==\n");
        assert!(matches!(parse(&half), Err(Refused::Invalid(_))));
    }

    #[test]
    fn a_moved_endpoint_rewrites_only_the_named_clusters_server() {
        let text = kubeconfig("", CERT_USER);
        let out = with_server(Some(text.as_bytes()), "c1", "https://10.244.0.9:20001")
            .unwrap()
            .expect("the server differs: a new value");
        let moved = Kubeconfig::from_yaml(std::str::from_utf8(&out).unwrap()).unwrap();
        let before = Kubeconfig::from_yaml(&text).unwrap();
        let cluster = moved.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://10.244.0.9:20001"));
        // The CA, the user and the context are the same data as before.
        let old = before.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.certificate_authority_data,
            old.certificate_authority_data
        );
        let as_yaml = |k: &str| -> serde_yaml_ng::Value { serde_yaml_ng::from_str(k).unwrap() };
        let (mut moved_doc, before_doc) =
            (as_yaml(std::str::from_utf8(&out).unwrap()), as_yaml(&text));
        moved_doc["clusters"][0]["cluster"]["server"] =
            before_doc["clusters"][0]["cluster"]["server"].clone();
        assert_eq!(moved_doc, before_doc, "all but the server is kept");
        // Written again with the same server: nothing to write.
        assert_eq!(
            with_server(Some(&out), "c1", "https://10.244.0.9:20001"),
            Ok(None)
        );
    }

    #[test]
    fn a_kubeconfig_without_the_cluster_or_not_yaml_is_refused_without_quoting_it() {
        let text = kubeconfig("", CERT_USER);
        assert_eq!(
            with_server(Some(text.as_bytes()), "other", "https://h:1"),
            Err(Refused::Missing("clusters[other].cluster".into()))
        );
        assert_eq!(
            with_server(Some(b"token: s3cret: ["), "c1", "https://h:1"),
            Err(Refused::NotKubeconfig)
        );
        assert_eq!(
            with_server(None, "c1", "https://h:1"),
            Err(Refused::NoValue)
        );
        let big = vec![b'a'; MAX_BYTES + 1];
        assert_eq!(
            with_server(Some(&big), "c1", "https://h:1"),
            Err(Refused::TooLarge(MAX_BYTES + 1))
        );
        assert_eq!(
            with_server(Some(&[0xff, 0xfe]), "c1", "https://h:1"),
            Err(Refused::NotUtf8)
        );
    }
}
