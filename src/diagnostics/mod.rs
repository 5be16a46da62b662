//! The diagnostics server: `/metrics` on `--diagnostics-address`, as a controller-runtime
//! manager serves it. By default HTTPS with a self-signed certificate made at start (in memory;
//! upstream CAPD has no flag for a certificate of its own here either, and scrapers of it skip
//! verification) and every request authenticated and authorised through the API server
//! (`auth.rs`); with `--insecure-diagnostics` plain HTTP for anyone who can reach it.
//! `/healthz` and `/readyz` stay on the health address (`http.rs`), where the kubelet probes.
mod auth;

use std::{future::Future, sync::Arc};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use kube::Client;
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

pub use auth::{Decision, Reviewer};

use crate::{telemetry::Metrics, webhook::TlsListener};

#[derive(Debug, thiserror::Error)]
pub enum DiagnosticsError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("self-signed certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}

#[derive(Clone)]
struct Diagnostics {
    metrics: Arc<Metrics>,
    /// None: `--insecure-diagnostics`.
    reviewer: Option<Arc<Reviewer>>,
}

/// Go-style `:8443` (what upstream's flag takes) means all interfaces.
pub fn listen_address(addr: &str) -> String {
    if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    }
}

/// Bind `addr` and serve `/metrics` until `shutdown`: plain when `insecure`, else HTTPS behind
/// token and access reviews made with `client`.
pub async fn start(
    addr: &str,
    insecure: bool,
    metrics: Arc<Metrics>,
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>, DiagnosticsError> {
    let addr = listen_address(addr);
    let tcp = TcpListener::bind(&addr)
        .await
        .map_err(|source| DiagnosticsError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let state = Diagnostics {
        metrics,
        reviewer: (!insecure).then(|| Arc::new(Reviewer::new(client))),
    };
    let router = Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(state);
    if insecure {
        warn!(%addr, "serving /metrics over plain HTTP without authentication (--insecure-diagnostics)");
        return Ok(tokio::spawn(
            axum::serve(tcp, router)
                .with_graceful_shutdown(shutdown)
                .into_future(),
        ));
    }
    let tls = self_signed_tls()?;
    info!(%addr, "serving /metrics over HTTPS to authenticated, authorised clients");
    let listener = TlsListener::spawn(tcp, TlsAcceptor::from(Arc::new(tls)));
    Ok(tokio::spawn(
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .into_future(),
    ))
}

/// A certificate for `localhost`, made now and kept in memory only.
fn self_signed_tls() -> Result<ServerConfig, DiagnosticsError> {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let cert = CertificateDer::from(generated.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        generated.signing_key.serialize_der(),
    ));
    let mut tls = ServerConfig::builder_with_provider(crate::webhook::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

async fn serve_metrics(State(d): State<Diagnostics>, headers: HeaderMap) -> Response {
    if let Some(reviewer) = &d.reviewer {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match reviewer.review(authorization).await {
            Ok(Decision::Allowed) => {}
            Ok(Decision::Unauthenticated) => {
                return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            }
            Ok(Decision::Forbidden) => {
                return (StatusCode::FORBIDDEN, "Forbidden\n").into_response();
            }
            Err(e) => {
                warn!(error = %e, "cannot review a metrics request");
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "authentication or authorisation failed\n",
                )
                    .into_response();
            }
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        d.metrics.render(),
    )
        .into_response()
}
