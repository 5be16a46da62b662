//! A Unix-socket proxy in front of the real Docker socket that a test can switch off and on,
//! to make the engine "unavailable" for one manager without touching the shared daemon.
use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use tokio::{
    net::{UnixListener, UnixStream},
    task::JoinHandle,
};

pub struct DockerProxy {
    pub path: PathBuf,
    up: Arc<AtomicBool>,
    /// Answer every request with HTTP 503 instead of forwarding it.
    overloaded: Arc<AtomicBool>,
    /// Milliseconds every chunk a client sends waits before it is forwarded (a slow engine).
    latency_ms: Arc<AtomicU64>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl DockerProxy {
    pub fn start(id: &str) -> Self {
        let path = std::env::temp_dir().join(format!("capd-rs-docker-{id}.sock"));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind proxy socket");
        let up = Arc::new(AtomicBool::new(true));
        let overloaded = Arc::new(AtomicBool::new(false));
        let latency_ms = Arc::new(AtomicU64::new(0));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (u, o, conns) = (up.clone(), overloaded.clone(), connections.clone());
        let latency = latency_ms.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !u.load(Ordering::SeqCst) {
                    // Down: a connection that is accepted and dropped, like a dead engine.
                    drop(client);
                    continue;
                }
                if o.load(Ordering::SeqCst) {
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut request = [0u8; 8192];
                        let _ = client.read(&mut request).await;
                        let body = r#"{"message":"engine overloaded"}"#;
                        let response = format!(
                            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = client.write_all(response.as_bytes()).await;
                    });
                    continue;
                }
                let latency = latency.clone();
                let handle = tokio::spawn(async move {
                    if let Ok(upstream) = UnixStream::connect("/var/run/docker.sock").await {
                        forward(client, upstream, latency).await;
                    }
                });
                conns.lock().unwrap().push(handle);
            }
        });
        Self {
            path,
            up,
            overloaded,
            latency_ms,
            connections,
            accept,
        }
    }

    pub fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Refuse new connections and cut the open ones (kept-alive HTTP connections included).
    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    pub fn up(&self) {
        self.overloaded.store(false, Ordering::SeqCst);
        self.up.store(true, Ordering::SeqCst);
    }

    /// Delay every request (each chunk a client sends) by `latency`; zero turns it off.
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// Accept connections but answer every request with 503 (cutting the open ones first).
    pub fn overloaded(&self) {
        self.down();
        self.overloaded.store(true, Ordering::SeqCst);
        self.up.store(true, Ordering::SeqCst);
    }
}

/// Copy both ways; what the client sends waits `latency` first (read at each chunk, so it can
/// be switched on and off under open connections).
async fn forward(client: UnixStream, upstream: UnixStream, latency: Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut upstream_rx, mut upstream_tx) = upstream.into_split();
    let requests = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let delay = latency.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            }
            if upstream_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = upstream_tx.shutdown().await;
    };
    let responses = async move {
        let _ = tokio::io::copy(&mut upstream_rx, &mut client_tx).await;
        let _ = client_tx.shutdown().await;
    };
    futures::join!(requests, responses);
}

impl Drop for DockerProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.down();
        let _ = std::fs::remove_file(&self.path);
    }
}
