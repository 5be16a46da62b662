//! The conversion webhook: `POST /convert` over TLS, as the API server calls it for objects
//! read or written as `v1beta1`. Conversion itself is [`crate::api::conversion`]; this file is
//! the server: certificates (reloaded when cert-manager rotates them), TLS, the review.
//!
//! Every replica serves it, leader or not: the API server calls whichever Pod the Service picks.
use std::{
    future::Future,
    io,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, Request},
    http::StatusCode,
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::post,
};
use kube::core::{
    Status,
    conversion::{ConversionRequest, ConversionResponse, ConversionReview},
};
use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore, mpsc},
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::conversion;

/// File names in the certificate directory by default: those of a cert-manager
/// (kubernetes.io/tls) Secret (`--webhook-cert-name`/`--webhook-key-name` change them).
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";
/// How often the files are checked for a rotated certificate.
const RELOAD_EVERY: Duration = Duration::from_secs(10);
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest ConversionReview accepted. The API server converts a list in one review (all of a
/// page's items that need it: apiextensions-apiserver's webhook converter), so a review is not
/// bounded by the 3 MiB request limit of one object. Clients page lists by 500 (client-go's
/// reflectors, kubectl), and our objects are a few KiB: 8 MiB holds such a page several times
/// over, or five objects at etcd's 1.5 MiB limit. Larger bodies get 413 after at most this much
/// was read.
pub const MAX_BODY: usize = 8 << 20;
/// Reviews read and converted at once; more wait (within [`REQUEST_TIMEOUT`]). With
/// [`MAX_BODY`], bounds the memory the webhook can take to a few times 16 MiB.
pub const MAX_IN_FLIGHT: usize = 2;
/// Connections held at once (handshaking, idle or busy); more wait in the kernel's accept queue.
/// The API server keeps a few connections per webhook.
const MAX_CONNECTIONS: usize = 32;
/// The whole request, from its headers to the answer, waiting for a slot included: the API
/// server gives up on a conversion webhook after 30 s anyway.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error("serving certificate: {0}")]
    Tls(#[from] rustls::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: io::Error },
}

/// What the server presents and accepts: the certificate's file names in its directory, and the
/// TLS versions and TLS 1.2 cipher suites it offers (upstream's `--webhook-cert-name`,
/// `--webhook-key-name`, `--tls-min-version`, `--tls-cipher-suites`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTls {
    pub cert_name: String,
    pub key_name: String,
    /// Offer TLS 1.3 only (else 1.2 and 1.3: rustls has nothing older).
    pub tls13_only: bool,
    /// The TLS 1.2 suites offered; `None`: rustls's defaults. TLS 1.3 suites are always all
    /// offered, as Go does whatever its cipher-suite list says.
    pub tls12_suites: Option<Vec<rustls::CipherSuite>>,
}

impl Default for ServerTls {
    fn default() -> Self {
        Self {
            cert_name: CERT_FILE.into(),
            key_name: KEY_FILE.into(),
            tls13_only: false,
            tls12_suites: None,
        }
    }
}

impl ServerTls {
    /// The process's crypto provider, less the TLS 1.2 suites not asked for.
    fn provider(&self) -> Arc<CryptoProvider> {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(keep) = &self.tls12_suites {
            provider.cipher_suites.retain(|s| {
                matches!(s, rustls::SupportedCipherSuite::Tls13(_)) || keep.contains(&s.suite())
            });
        }
        Arc::new(provider)
    }

    fn versions(&self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
        if self.tls13_only {
            TLS13_ONLY
        } else {
            rustls::DEFAULT_VERSIONS
        }
    }
}

/// Serve the webhook on `addr` with the certificate in `cert_dir`, until `shutdown` resolves.
/// `Ok(None)` when the directory holds no certificate: conversion is then off (logged), and the
/// manager runs on: it only ever reads and writes v1beta2.
pub async fn start(
    addr: &str,
    cert_dir: &Path,
    server_tls: &ServerTls,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<tokio::task::JoinHandle<io::Result<()>>>, WebhookError> {
    let files = CertFiles::new(cert_dir, server_tls);
    if !files.cert.exists() && !files.key.exists() {
        info!(
            cert_dir = %cert_dir.display(),
            "conversion webhook off: no {}/{}; v1beta1 requests fail until a certificate is mounted and the manager restarted",
            server_tls.cert_name, server_tls.key_name
        );
        return Ok(None);
    }
    let resolver = Arc::new(Reloading {
        current: RwLock::new(Arc::new(files.load()?)),
    });
    tokio::spawn(reload(files, resolver.clone()));
    let mut tls = ServerConfig::builder_with_provider(server_tls.provider())
        .with_protocol_versions(server_tls.versions())?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|source| WebhookError::Bind {
            addr: addr.into(),
            source,
        })?;
    info!(%addr, cert_dir = %cert_dir.display(), "serving the conversion webhook (/convert)");
    let listener = TlsListener::spawn(tcp, TlsAcceptor::from(Arc::new(tls)));
    Ok(Some(tokio::spawn(
        axum::serve(listener, router())
            .with_graceful_shutdown(shutdown)
            .into_future(),
    )))
}

pub fn router() -> Router {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    Router::new()
        .route("/convert", post(convert))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            let slots = slots.clone();
            bounded(slots, request, next)
        }))
}

/// One request: a slot first (the body is read only with one), everything within
/// [`REQUEST_TIMEOUT`] (a client sending its body slowly is cut off).
async fn bounded(slots: Arc<Semaphore>, request: Request, next: Next) -> Response {
    let run = async {
        // Never closed: the semaphore lives as long as the router.
        let _slot = slots.acquire_owned().await;
        next.run(request).await
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, run).await {
        Ok(response) => response,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, "request not completed in time").into_response(),
    }
}

/// Answer one ConversionReview: all objects converted, or the first error for all of them
/// (the API server accepts nothing partial).
pub fn review(review: ConversionReview) -> ConversionReview {
    let request = match ConversionRequest::from_review(review) {
        Ok(r) => r,
        Err(_) => {
            return ConversionResponse::invalid(Status::failure(
                "ConversionReview without a request",
                "BadRequest",
            ))
            .into_review();
        }
    };
    let desired = request.desired_api_version.clone();
    let converted: Result<Vec<_>, _> = request
        .objects
        .iter()
        .cloned()
        .map(|o| conversion::convert(o, &desired))
        .collect();
    let response = ConversionResponse::for_request(request);
    match converted {
        Ok(objects) => {
            debug!(to = %desired, objects = objects.len(), "converted");
            response.success(objects)
        }
        Err(e) => {
            warn!(to = %desired, error = %e, "conversion failed");
            response.failure(Status::failure(&e.to_string(), "ConversionFailed"))
        }
    }
    .into_review()
}

async fn convert(Json(body): Json<ConversionReview>) -> Json<ConversionReview> {
    let span = info_span!(
        "convert",
        uid = body.request.as_ref().map(|r| r.uid.as_str()).unwrap_or("")
    );
    // Conversion is pure CPU over at most MAX_BODY: off the async workers.
    let reviewed = tokio::task::spawn_blocking(move || span.in_scope(|| review(body)))
        .instrument(info_span!("convert_wait"))
        .await
        .unwrap_or_else(|e| {
            ConversionResponse::invalid(Status::failure(&e.to_string(), "InternalError"))
                .into_review()
        });
    Json(reviewed)
}

/// One crypto provider for the whole process: bollard's TLS may have enabled another one, and
/// rustls refuses to guess.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

struct CertFiles {
    cert: PathBuf,
    key: PathBuf,
}

impl CertFiles {
    fn new(dir: &Path, names: &ServerTls) -> Self {
        Self {
            cert: dir.join(&names.cert_name),
            key: dir.join(&names.key_name),
        }
    }

    fn read(path: &Path) -> Result<Vec<u8>, WebhookError> {
        std::fs::read(path).map_err(|source| WebhookError::Read {
            path: path.into(),
            source,
        })
    }

    fn load(&self) -> Result<CertifiedKey, WebhookError> {
        let pem = |path: &Path, what: String| WebhookError::Pem {
            path: path.into(),
            what,
        };
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&Self::read(&self.cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| pem(&self.cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(pem(&self.cert, "no certificate in the file".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(&Self::read(&self.key)?)
            .map_err(|e| pem(&self.key, e.to_string()))?;
        Ok(CertifiedKey::from_der(chain, key, &provider())?)
    }

    /// When either file last changed (a Secret volume swaps both through one symlink).
    fn changed_at(&self) -> Option<SystemTime> {
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        mtime(&self.cert).max(mtime(&self.key))
    }
}

/// The certificate presented to every client: the last one that loaded.
#[derive(Debug)]
struct Reloading {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.clone())
    }
}

/// Pick up a rotated certificate. A half-written pair fails to load and is retried at the next
/// tick; the old certificate stays in use meanwhile.
async fn reload(files: CertFiles, to: Arc<Reloading>) {
    let mut seen = files.changed_at();
    let mut tick = tokio::time::interval(RELOAD_EVERY);
    loop {
        tick.tick().await;
        let now = files.changed_at();
        if now == seen {
            continue;
        }
        match files.load() {
            Ok(key) => {
                if let Ok(mut current) = to.current.write() {
                    *current = Arc::new(key);
                }
                seen = now;
                info!(cert = %files.cert.display(), "conversion webhook certificate reloaded");
            }
            Err(e) => {
                warn!(error = %e, "rotated webhook certificate not loaded yet; keeping the old one")
            }
        }
    }
}

/// TLS connections, handshaken concurrently (a slow or idle client delays no one) and handed to
/// axum as they complete. The diagnostics server (`diagnostics.rs`) listens the same way.
pub(crate) struct TlsListener {
    ready: mpsc::Receiver<(Counted, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub(crate) fn spawn(tcp: TcpListener, acceptor: TlsAcceptor) -> Self {
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
        let (tx, ready) = mpsc::channel(64);
        let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::spawn(async move {
            loop {
                // Never closed: the semaphore lives as long as this loop.
                let Ok(permit) = connections.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        warn!(error = %e, "TLS accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, handed) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let counted = Counted {
                                io: tls,
                                _permit: permit,
                            };
                            let _ = handed.send((counted, peer)).await;
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => debug!(%peer, "TLS handshake timed out"),
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Self { ready, local }
    }
}

/// A connection that holds one of the [`MAX_CONNECTIONS`] places until it is dropped.
pub(crate) struct Counted {
    io: TlsStream<tokio::net::TcpStream>,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Counted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop only ends once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn review_of(objects: Vec<serde_json::Value>, to: &str) -> ConversionReview {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "r-1", "desiredAPIVersion": to, "objects": objects}
        }))
        .unwrap()
    }

    #[test]
    fn converts_every_object_and_echoes_the_uid() {
        let dm = |n: &str| {
            json!({"apiVersion": conversion::V1BETA1, "kind": "DockerMachine",
                                  "metadata": {"name": n}, "spec": {"customImage": "kindest/node:v1.35.4"}})
        };
        let out = review(review_of(vec![dm("a"), dm("b")], conversion::V1BETA2));
        let response = out.response.unwrap();
        assert_eq!(response.uid, "r-1");
        assert!(response.result.is_success());
        let names: Vec<_> = response
            .converted_objects
            .iter()
            .map(|o| (o["apiVersion"].clone(), o["metadata"]["name"].clone()))
            .collect();
        assert_eq!(
            names,
            [
                (json!(conversion::V1BETA2), json!("a")),
                (json!(conversion::V1BETA2), json!("b"))
            ]
        );
    }

    #[test]
    fn one_bad_object_fails_the_review_with_its_reason() {
        let bad = json!({"apiVersion": conversion::V1BETA1, "kind": "DockerMachine",
                         "metadata": {"name": "m1"}, "spec": {"extraMounts": 3}});
        let response = review(review_of(vec![bad], conversion::V1BETA2))
            .response
            .unwrap();
        assert!(response.result.is_failure());
        assert!(response.result.message.contains("DockerMachine m1"));
        assert!(response.converted_objects.is_empty());
    }

    /// A request body that yields 1 MiB chunks (forever, or never: `pending`), counting how many
    /// were pulled and how many bodies were started.
    fn body(
        pulled: Arc<std::sync::atomic::AtomicUsize>,
        started: Arc<std::sync::atomic::AtomicUsize>,
        pending: bool,
    ) -> axum::body::Body {
        use std::sync::atomic::Ordering::SeqCst;
        let chunks = futures::stream::unfold(false, move |first_done| {
            let (pulled, started) = (pulled.clone(), started.clone());
            async move {
                if !first_done {
                    started.fetch_add(1, SeqCst);
                }
                if pending {
                    std::future::pending::<()>().await;
                }
                pulled.fetch_add(1, SeqCst);
                Some((Ok::<_, io::Error>(vec![b' '; 1 << 20]), true))
            }
        });
        axum::body::Body::from_stream(chunks)
    }

    fn post_convert(body: axum::body::Body) -> Request {
        axum::http::Request::post("/convert")
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }

    #[tokio::test]
    async fn a_body_over_the_limit_gets_413_without_being_read_whole() {
        use tower::Service;
        let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut app = router();
        let response = app
            .call(post_convert(body(pulled.clone(), started, false)))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let pulled = pulled.load(std::sync::atomic::Ordering::SeqCst);
        // At most 8 MiB and the chunk that crossed it (64 MiB were read before the bound).
        assert!(pulled <= 9, "{pulled} MiB read of an endless body");
    }

    #[tokio::test(start_paused = true)]
    async fn slow_requests_beyond_the_limit_wait_and_all_time_out() {
        use tower::Service;
        let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = router();
        let slow: Vec<_> = (0..MAX_IN_FLIGHT + 3)
            .map(|_| {
                let mut app = app.clone();
                let request = post_convert(body(pulled.clone(), started.clone(), true));
                tokio::spawn(async move { app.call(request).await.unwrap().status() })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            started.load(std::sync::atomic::Ordering::SeqCst),
            MAX_IN_FLIGHT,
            "only the slots' requests are being read; the others wait"
        );
        for s in slow {
            assert_eq!(s.await.unwrap(), StatusCode::REQUEST_TIMEOUT);
        }
    }

    #[test]
    fn a_missing_certificate_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("capd-webhook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(CERT_FILE), "not a pem").unwrap();
        let err = CertFiles::new(&dir, &ServerTls::default())
            .load()
            .unwrap_err()
            .to_string();
        assert!(err.contains("tls.crt"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
