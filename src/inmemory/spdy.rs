//! SPDY/3.1 framing, the server half, as much as Kubernetes' port-forward uses: client-go's
//! SPDY stack (moby/spdystream) opens streams with SYN_STREAM, expects a SYN_REPLY to each,
//! sends DATA, closes its half with FIN, may reset a stream (RST_STREAM), pings, and says
//! GOAWAY. It sends no SETTINGS or WINDOW_UPDATE and ignores them (it has no flow control),
//! so none are sent here and the ones received are skipped.
//!
//! Header blocks are zlib-compressed with the SPDY/3 dictionary, one compression context per
//! direction for the whole connection (each block a sync flush): frames carrying headers must
//! be encoded in the order they are written, and decoded in the order they are read.
//!
//! Bounds: a control frame's payload at most [`MAX_CONTROL`], a header block at most
//! [`MAX_HEADER_BLOCK`] decompressed with at most [`MAX_HEADERS`] entries, a DATA frame at
//! most [`MAX_DATA`]. Anything over them, or malformed, is a [`SpdyError`] and the caller
//! closes the connection.
use std::sync::OnceLock;

use bytes::{BufMut, Bytes};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

pub const VERSION: u16 = 3;
/// The largest control frame payload read (SYN_STREAM headers from client-go are ~100 bytes).
pub const MAX_CONTROL: usize = 16 << 10;
/// The largest decompressed header block.
pub const MAX_HEADER_BLOCK: usize = 16 << 10;
pub const MAX_HEADERS: usize = 64;
/// The largest DATA frame read. spdystream writes each `Write` as one frame; its callers copy
/// with 32 KiB buffers.
pub const MAX_DATA: usize = 1 << 20;

const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes (SPDY/3 section 2.6.2).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
}

/// GOAWAY status codes.
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INTERNAL_ERROR: u32 = 2;
}

/// Header names (lower case) and values; a value with several parts keeps its NUL separators.
pub type Headers = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        id: u32,
        fin: bool,
        headers: Headers,
    },
    SynReply {
        id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        id: u32,
        status: u32,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        id: u32,
        fin: bool,
        headers: Headers,
    },
    Data {
        id: u32,
        fin: bool,
        data: Bytes,
    },
    /// SETTINGS, WINDOW_UPDATE, CREDENTIAL and unknown control frames: read and skipped.
    Ignored {
        kind: u16,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("reading: {0}")]
    Io(#[from] std::io::Error),
    #[error("SPDY version {0} (only 3 is spoken)")]
    Version(u16),
    #[error("a {what} of {len} bytes (at most {max})")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("header compression: {0}")]
    Compression(String),
    #[error("bad header block: {0}")]
    HeaderBlock(&'static str),
    #[error("bad frame: {0}")]
    Frame(&'static str),
}

/// The SPDY/3 header compression dictionary (SPDY/3 section 2.6.10.1): the length-prefixed
/// words, then the text of common values.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: &[&str] = &[
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const TAIL: &[&str] = &[
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
            "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently",
            "400 Bad Request401 Unauthorized403 Forbidden404 Not Found",
            "500 Internal Server Error501 Not Implemented503 Service Unavailable",
            "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
            "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
            "chunked,text/html,image/png,image/jpg,image/gif,application/xml,",
            "application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
            "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        ];
        let mut out = Vec::with_capacity(1423);
        for w in WORDS {
            out.put_u32(w.len() as u32);
            out.extend_from_slice(w.as_bytes());
        }
        for t in TAIL {
            out.extend_from_slice(t.as_bytes());
        }
        out
    })
}

/// The reading side's header decompression context.
pub struct Inflater(Decompress);

impl Default for Inflater {
    fn default() -> Self {
        Self(Decompress::new(true))
    }
}

impl Inflater {
    /// Decompresses one header block and parses it.
    pub fn decode(&mut self, input: &[u8]) -> Result<Headers, SpdyError> {
        let z = |e: &dyn std::fmt::Display| SpdyError::Compression(e.to_string());
        let mut out = Vec::with_capacity(512);
        let mut pos = 0;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(SpdyError::TooLarge {
                        what: "header block",
                        len: out.len(),
                        max: MAX_HEADER_BLOCK,
                    });
                }
                out.reserve((MAX_HEADER_BLOCK - out.len()).min(out.capacity()));
            }
            let (in_before, out_before) = (self.0.total_in(), out.len());
            let result = self
                .0
                .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            pos += (self.0.total_in() - in_before) as usize;
            match result {
                Ok(Status::StreamEnd) => return Err(SpdyError::Compression("stream ended".into())),
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.0.set_dictionary(dictionary()).map_err(|e| z(&e))?;
                    continue;
                }
                Err(e) => return Err(z(&e)),
            }
            let progressed = self.0.total_in() > in_before || out.len() > out_before;
            if pos >= input.len() && out.len() < out.capacity() {
                break;
            }
            if !progressed {
                if pos < input.len() {
                    return Err(SpdyError::Compression("no progress".into()));
                }
                break;
            }
        }
        parse_block(&out)
    }
}

/// The writing side's header compression context.
pub struct Deflater(Compress);

impl Default for Deflater {
    fn default() -> Self {
        let mut z = Compress::new(Compression::default(), true);
        // Cannot fail on a fresh stream.
        let _ = z.set_dictionary(dictionary());
        Self(z)
    }
}

impl Deflater {
    /// One compressed header block, ending on a sync flush as the reader expects.
    pub fn encode(&mut self, headers: &[(&str, &str)]) -> Result<Vec<u8>, SpdyError> {
        let mut block = Vec::new();
        block.put_u32(headers.len() as u32);
        for (k, v) in headers {
            block.put_u32(k.len() as u32);
            block.extend_from_slice(k.to_ascii_lowercase().as_bytes());
            block.put_u32(v.len() as u32);
            block.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut pos = 0;
        loop {
            if out.len() == out.capacity() {
                out.reserve(256);
            }
            let before = self.0.total_in();
            self.0
                .compress_vec(&block[pos..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Compression(e.to_string()))?;
            pos += (self.0.total_in() - before) as usize;
            // Done once all input is in and the flush left room to spare.
            if pos >= block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

fn parse_block(mut b: &[u8]) -> Result<Headers, SpdyError> {
    fn u32_at(b: &mut &[u8]) -> Result<usize, SpdyError> {
        let Some((head, rest)) = b.split_first_chunk::<4>() else {
            return Err(SpdyError::HeaderBlock("truncated"));
        };
        *b = rest;
        Ok(u32::from_be_bytes(*head) as usize)
    }
    fn string(b: &mut &[u8]) -> Result<String, SpdyError> {
        let len = u32_at(b)?;
        if len > b.len() {
            return Err(SpdyError::HeaderBlock("truncated"));
        }
        let (s, rest) = b.split_at(len);
        *b = rest;
        String::from_utf8(s.to_vec()).map_err(|_| SpdyError::HeaderBlock("not UTF-8"))
    }
    let count = u32_at(&mut b)?;
    if count > MAX_HEADERS {
        return Err(SpdyError::HeaderBlock("too many headers"));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = string(&mut b)?.to_ascii_lowercase();
        let value = string(&mut b)?;
        if name.is_empty() {
            return Err(SpdyError::HeaderBlock("an empty header name"));
        }
        headers.push((name, value));
    }
    if !b.is_empty() {
        return Err(SpdyError::HeaderBlock("bytes after the headers"));
    }
    Ok(headers)
}

/// The value of a header, by lower-case name.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn stream_id(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff
}

/// Reads one frame; `None` at a clean end of the connection between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    inflater: &mut Inflater,
) -> Result<Option<Frame>, SpdyError> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    r.read_exact(&mut head[1..]).await?;
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let fin = flags & FLAG_FIN != 0;
    if head[0] & 0x80 == 0 {
        if len > MAX_DATA {
            return Err(SpdyError::TooLarge {
                what: "DATA frame",
                len,
                max: MAX_DATA,
            });
        }
        let mut data = vec![0; len];
        r.read_exact(&mut data).await?;
        let id = stream_id(&head);
        if id == 0 {
            return Err(SpdyError::Frame("DATA on stream 0"));
        }
        return Ok(Some(Frame::Data {
            id,
            fin,
            data: data.into(),
        }));
    }
    let version = u16::from_be_bytes([head[0], head[1]]) & 0x7fff;
    let kind = u16::from_be_bytes([head[2], head[3]]);
    if version != VERSION {
        return Err(SpdyError::Version(version));
    }
    if len > MAX_CONTROL {
        return Err(SpdyError::TooLarge {
            what: "control frame",
            len,
            max: MAX_CONTROL,
        });
    }
    let mut p = vec![0; len];
    r.read_exact(&mut p).await?;
    let need = |n: usize| {
        if p.len() < n {
            Err(SpdyError::Frame("a control frame too short for its type"))
        } else {
            Ok(())
        }
    };
    let nonzero = |id: u32| {
        if id == 0 {
            Err(SpdyError::Frame("stream id 0"))
        } else {
            Ok(id)
        }
    };
    Ok(Some(match kind {
        SYN_STREAM => {
            // stream id, associated stream id, priority and slot, then the header block.
            need(10)?;
            Frame::SynStream {
                id: nonzero(stream_id(&p))?,
                fin,
                headers: inflater.decode(&p[10..])?,
            }
        }
        SYN_REPLY | HEADERS => {
            need(4)?;
            let id = nonzero(stream_id(&p))?;
            let headers = inflater.decode(&p[4..])?;
            if kind == SYN_REPLY {
                Frame::SynReply { id, fin, headers }
            } else {
                Frame::Headers { id, fin, headers }
            }
        }
        RST_STREAM => {
            need(8)?;
            Frame::RstStream {
                id: stream_id(&p),
                status: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
            }
        }
        PING => {
            need(4)?;
            Frame::Ping {
                id: u32::from_be_bytes([p[0], p[1], p[2], p[3]]),
            }
        }
        GOAWAY => {
            need(4)?;
            let status = if p.len() >= 8 {
                u32::from_be_bytes([p[4], p[5], p[6], p[7]])
            } else {
                goaway::OK
            };
            Frame::GoAway {
                last_good: stream_id(&p),
                status,
            }
        }
        SETTINGS | WINDOW_UPDATE => Frame::Ignored { kind },
        other => Frame::Ignored { kind: other },
    }))
}

fn pairs(h: &Headers) -> Vec<(&str, &str)> {
    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn control(out: &mut Vec<u8>, kind: u16, flags: u8, payload: &[u8]) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u8(flags);
    out.put_uint(payload.len() as u64, 3);
    out.extend_from_slice(payload);
}

/// Appends a frame's bytes to `out`. Frames with headers go through `deflater`, so they must
/// be encoded in the order they are sent.
pub fn write_frame(
    frame: &Frame,
    deflater: &mut Deflater,
    out: &mut Vec<u8>,
) -> Result<(), SpdyError> {
    let fin = |f: bool| if f { FLAG_FIN } else { 0 };
    match frame {
        Frame::SynStream {
            id,
            fin: f,
            headers,
        } => {
            let mut p = Vec::new();
            p.put_u32(*id & 0x7fff_ffff);
            p.put_u32(0);
            p.put_u16(0);
            p.extend(deflater.encode(&pairs(headers))?);
            control(out, SYN_STREAM, fin(*f), &p);
        }
        Frame::SynReply {
            id,
            fin: f,
            headers,
        }
        | Frame::Headers {
            id,
            fin: f,
            headers,
        } => {
            let kind = if matches!(frame, Frame::SynReply { .. }) {
                SYN_REPLY
            } else {
                HEADERS
            };
            let mut p = Vec::new();
            p.put_u32(*id & 0x7fff_ffff);
            p.extend(deflater.encode(&pairs(headers))?);
            control(out, kind, fin(*f), &p);
        }
        Frame::RstStream { id, status } => {
            let mut p = Vec::new();
            p.put_u32(*id & 0x7fff_ffff);
            p.put_u32(*status);
            control(out, RST_STREAM, 0, &p);
        }
        Frame::Ping { id } => control(out, PING, 0, &id.to_be_bytes()),
        Frame::GoAway { last_good, status } => {
            let mut p = Vec::new();
            p.put_u32(*last_good & 0x7fff_ffff);
            p.put_u32(*status);
            control(out, GOAWAY, 0, &p);
        }
        Frame::Data { id, fin: f, data } => {
            if data.len() > MAX_DATA {
                return Err(SpdyError::TooLarge {
                    what: "DATA frame",
                    len: data.len(),
                    max: MAX_DATA,
                });
            }
            out.put_u32(*id & 0x7fff_ffff);
            out.put_u8(fin(*f));
            out.put_uint(data.len() as u64, 3);
            out.extend_from_slice(data);
        }
        Frame::Ignored { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests;
