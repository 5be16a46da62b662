//! A counting relay in front of the Docker Engine's socket. Every subject of the bench (both
//! managers and the floor) reaches the engine through it, so their Docker calls are counted by
//! one instrument, on the wire, rather than by what each chooses to report about itself.
//!
//! The relay forwards bytes as they come (it adds one local socket hop, the same for every
//! subject) and follows the client's side of each HTTP/1.1 connection just far enough to see
//! where one request ends and the next begins: headers, then a `Content-Length` or chunked body.
//! After a request that upgrades the connection (`docker exec` attaching its streams), the rest
//! of the connection is raw stream data and is no longer parsed.
use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    thread,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{UnixListener, UnixStream},
    sync::oneshot,
};

type Counts = Arc<Mutex<BTreeMap<String, u64>>>;

/// The name of the relay's one thread: its CPU is the relay's, and the bench counts it (see
/// `process::host_cpu`). The chattier a subject, the more the relay works for it.
pub const RELAY_THREAD: &str = "docker-relay";

/// The relay: listens on `path`, forwards to the engine's socket, on a thread of its own.
pub struct DockerCounter {
    pub path: PathBuf,
    counts: Counts,
    stop: Option<oneshot::Sender<()>>,
}

impl DockerCounter {
    pub fn start(path: PathBuf, engine: PathBuf) -> io::Result<Self> {
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let counts: Counts = Arc::default();
        let c = counts.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        thread::Builder::new()
            .name(RELAY_THREAD.into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = UnixListener::from_std(listener) else {
                        return;
                    };
                    let accept = async move {
                        while let Ok((client, _)) = listener.accept().await {
                            let (counts, engine) = (c.clone(), engine.clone());
                            // On this thread's runtime: every connection is relayed here.
                            tokio::spawn(async move {
                                if let Ok(upstream) = UnixStream::connect(&engine).await {
                                    relay(client, upstream, counts).await;
                                }
                            });
                        }
                    };
                    tokio::select! {
                        _ = accept => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            path,
            counts,
            stop: Some(stop),
        })
    }

    /// Calls so far, by operation (`POST /containers/{id}/start`).
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().expect("counts lock").clone()
    }

    /// `unix://` address for `DOCKER_HOST`.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for DockerCounter {
    fn drop(&mut self) {
        // Ends the accept loop; the runtime, dropped with it, ends the connections.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn relay(client: UnixStream, upstream: UnixStream, counts: Counts) {
    let (mut cr, mut cw) = client.into_split();
    let (mut ur, mut uw) = upstream.into_split();
    let up = async move {
        let mut parser = RequestParser::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let ops = parser.feed(&buf[..n]);
            if !ops.is_empty() {
                let mut c = counts.lock().expect("counts lock");
                for op in ops {
                    *c.entry(op).or_default() += 1;
                }
            }
            if uw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = uw.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut ur, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// Where the client side of one connection is.
#[derive(Debug, Default)]
enum State {
    /// Reading a request line and headers (up to the empty line).
    #[default]
    Head,
    /// This many body bytes left.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// This many bytes of chunk data left.
    ChunkData(u64),
    /// The CRLF after a chunk's data: this many bytes left.
    ChunkEnd(u8),
    /// Trailer lines after the last chunk, up to the empty line.
    Trailer,
    /// The connection was upgraded: raw stream from here on.
    Raw,
}

/// Splits a client's byte stream into HTTP/1.1 requests; see the module comment.
#[derive(Debug, Default)]
pub struct RequestParser {
    state: State,
    line: Vec<u8>,
    /// The request being read upgrades the connection once its body is through.
    then_raw: bool,
}

/// Request heads longer than this are not HTTP from a Docker client: stop parsing.
const MAX_HEAD: usize = 64 * 1024;

impl RequestParser {
    /// Feeds the next bytes; returns the operations of the requests whose heads completed.
    pub fn feed(&mut self, mut data: &[u8]) -> Vec<String> {
        let mut ops = Vec::new();
        while !data.is_empty() {
            match self.state {
                State::Raw => break,
                State::Head => {
                    let (done, rest) = take_until(&mut self.line, data, b"\r\n\r\n");
                    data = rest;
                    if done {
                        let head = parse_head(&self.line);
                        self.line.clear();
                        match head {
                            Some(h) => {
                                ops.push(h.op);
                                self.then_raw = h.upgrade;
                                self.state = match h.body {
                                    BodyKind::Chunked => State::ChunkSize,
                                    BodyKind::Length(0) => self.after_body(),
                                    BodyKind::Length(n) => State::Body(n),
                                };
                            }
                            None => self.state = State::Raw,
                        }
                    } else if self.line.len() > MAX_HEAD {
                        self.state = State::Raw;
                    }
                }
                State::Body(n) | State::ChunkData(n) => {
                    let take = n.min(data.len() as u64);
                    data = &data[take as usize..];
                    let left = n - take;
                    self.state = match (&self.state, left) {
                        (State::Body(_), 0) => self.after_body(),
                        (State::Body(_), l) => State::Body(l),
                        (_, 0) => State::ChunkEnd(2),
                        (_, l) => State::ChunkData(l),
                    };
                }
                State::ChunkEnd(k) => {
                    let take = (k as usize).min(data.len());
                    data = &data[take..];
                    let left = k - take as u8;
                    self.state = if left == 0 {
                        State::ChunkSize
                    } else {
                        State::ChunkEnd(left)
                    };
                }
                State::ChunkSize => {
                    let (done, rest) = take_until(&mut self.line, data, b"\r\n");
                    data = rest;
                    if done {
                        let text = String::from_utf8_lossy(&self.line[..self.line.len() - 2]);
                        let size = text.split(';').next().unwrap_or("").trim();
                        let size = u64::from_str_radix(size, 16);
                        self.line.clear();
                        self.state = match size {
                            Ok(0) => State::Trailer,
                            Ok(n) => State::ChunkData(n),
                            Err(_) => State::Raw,
                        };
                    }
                }
                State::Trailer => {
                    let (done, rest) = take_until(&mut self.line, data, b"\r\n");
                    data = rest;
                    if done {
                        let empty = self.line.len() == 2;
                        self.line.clear();
                        if empty {
                            self.state = self.after_body();
                        }
                    }
                }
            }
        }
        ops
    }

    fn after_body(&self) -> State {
        if self.then_raw {
            State::Raw
        } else {
            State::Head
        }
    }
}

/// Appends bytes of `data` to `buf` until `buf` ends with `end`; returns whether it does and
/// the bytes not taken.
fn take_until<'a>(buf: &mut Vec<u8>, data: &'a [u8], end: &[u8]) -> (bool, &'a [u8]) {
    for (i, b) in data.iter().enumerate() {
        buf.push(*b);
        if buf.ends_with(end) {
            return (true, &data[i + 1..]);
        }
    }
    (false, &[])
}

enum BodyKind {
    Length(u64),
    Chunked,
}

struct Head {
    op: String,
    body: BodyKind,
    upgrade: bool,
}

fn parse_head(head: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut request = lines.next()?.split(' ');
    let (method, target) = (request.next()?, request.next()?);
    let mut body = BodyKind::Length(0);
    let mut upgrade = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => body = BodyKind::Length(value.parse().ok()?),
            "transfer-encoding" if value.eq_ignore_ascii_case("chunked") => {
                body = BodyKind::Chunked
            }
            "upgrade" => upgrade = true,
            _ => {}
        }
    }
    Some(Head {
        op: format!("{method} {}", operation_path(target)),
        body,
        upgrade,
    })
}

/// The path of a request with the API version, the query and object ids taken out:
/// `/v1.41/containers/3f2a/start?x=1` → `/containers/{id}/start`.
pub fn operation_path(target: &str) -> String {
    let path = target.split('?').next().unwrap_or(target);
    let mut segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segs
        .first()
        .is_some_and(|s| s.starts_with('v') && s[1..].contains('.'))
    {
        segs.remove(0);
    }
    let Some(&kind) = segs.first() else {
        return "/".into();
    };
    const COLLECTION_VERBS: [&str; 3] = ["create", "json", "prune"];
    match kind {
        // Image names contain slashes: everything between the kind and the last segment.
        "images" if segs.len() > 2 => format!("/images/{{name}}/{}", segs[segs.len() - 1]),
        "containers" | "exec" | "networks" | "volumes"
            if segs.len() > 1 && !COLLECTION_VERBS.contains(&segs[1]) =>
        {
            let mut out = format!("/{kind}/{{id}}");
            for s in &segs[2..] {
                out.push('/');
                out.push_str(s);
            }
            out
        }
        _ => format!("/{}", segs.join("/")),
    }
}

/// Total calls in a snapshot.
pub fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}

/// `after - before`, per operation (operations with no calls in between left out).
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(op, n)| {
            let d = n - before.get(op).copied().unwrap_or(0);
            (d > 0).then(|| (op.clone(), d))
        })
        .collect()
}

/// Whether `path` is a socket that accepts connections.
pub async fn reachable(path: &Path) -> bool {
    UnixStream::connect(path).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_lose_versions_queries_and_ids() {
        assert_eq!(
            operation_path("/v1.41/containers/3f2a/start?x=1"),
            "/containers/{id}/start"
        );
        assert_eq!(
            operation_path("/v1.44/containers/create?name=n1"),
            "/containers/create"
        );
        assert_eq!(operation_path("/containers/json?all=1"), "/containers/json");
        assert_eq!(operation_path("/v1.41/exec/ab12/json"), "/exec/{id}/json");
        assert_eq!(operation_path("/v1.41/networks/kind"), "/networks/{id}");
        assert_eq!(operation_path("/v1.41/networks/create"), "/networks/create");
        assert_eq!(
            operation_path("/v1.41/images/capd-rs/node:light/json"),
            "/images/{name}/json"
        );
        assert_eq!(operation_path("/_ping"), "/_ping");
        assert_eq!(operation_path("/v1.41/version"), "/version");
    }

    #[test]
    fn pipelined_requests_with_bodies_count_once_each_across_reads() {
        let stream = b"POST /v1.41/containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 11\r\n\r\n{\"Image\":1}GET /v1.41/containers/c1/json HTTP/1.1\r\nHost: d\r\n\r\nDELETE /v1.41/containers/c1?force=1 HTTP/1.1\r\n\r\n";
        // Every split point: the count must not depend on how the bytes arrive.
        for cut in 0..stream.len() {
            let mut p = RequestParser::default();
            let mut ops = p.feed(&stream[..cut]);
            ops.extend(p.feed(&stream[cut..]));
            assert_eq!(
                ops,
                [
                    "POST /containers/create",
                    "GET /containers/{id}/json",
                    "DELETE /containers/{id}"
                ],
                "split at {cut}"
            );
        }
    }

    #[test]
    fn chunked_bodies_and_trailers_are_skipped() {
        let stream = b"POST /v1.41/exec/e1/start HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nPOST\r\n3;x=y\r\n /x\r\n0\r\nT: v\r\n\r\nGET /_ping HTTP/1.1\r\n\r\n";
        let mut p = RequestParser::default();
        let ops: Vec<String> = stream.iter().flat_map(|b| p.feed(&[*b])).collect();
        assert_eq!(ops, ["POST /exec/{id}/start", "GET /_ping"]);
    }

    #[test]
    fn an_upgraded_connection_is_raw_after_the_body() {
        // An exec attach: the body, then stdin bytes that look like a request.
        let stream = b"POST /v1.41/exec/e1/start HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 2\r\n\r\n{}GET /fake HTTP/1.1\r\n\r\n";
        let mut p = RequestParser::default();
        assert_eq!(p.feed(stream), ["POST /exec/{id}/start"]);
        assert!(p.feed(b"POST /more HTTP/1.1\r\n\r\n").is_empty());
    }

    #[test]
    fn deltas_leave_out_operations_without_calls() {
        let before = BTreeMap::from([("GET /_ping".to_string(), 2), ("GET /version".into(), 1)]);
        let after = BTreeMap::from([
            ("GET /_ping".to_string(), 5),
            ("GET /version".into(), 1),
            ("POST /containers/create".into(), 3),
        ]);
        let d = delta(&before, &after);
        assert_eq!(
            d,
            BTreeMap::from([
                ("GET /_ping".to_string(), 3),
                ("POST /containers/create".into(), 3)
            ])
        );
        assert_eq!(total(&d), 6);
    }
}
