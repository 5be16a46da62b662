//! A Unix-socket proxy in front of the real Docker socket that a test can switch off and on,
//! to make the engine "unavailable" for one manager without touching the shared daemon.
use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
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
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (u, o, conns) = (up.clone(), overloaded.clone(), connections.clone());
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
                let handle = tokio::spawn(async move {
                    if let Ok(mut upstream) = UnixStream::connect("/var/run/docker.sock").await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
                conns.lock().unwrap().push(handle);
            }
        });
        Self {
            path,
            up,
            overloaded,
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

    /// Accept connections but answer every request with 503 (cutting the open ones first).
    pub fn overloaded(&self) {
        self.down();
        self.overloaded.store(true, Ordering::SeqCst);
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for DockerProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.down();
        let _ = std::fs::remove_file(&self.path);
    }
}
