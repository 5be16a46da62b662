//! Unary gRPC over an HTTP/2 request, enough for the fake etcd: one length-prefixed protobuf
//! message in, one out, the status in trailers. No streaming calls, no compression (grpc-go
//! sends uncompressed messages unless a compressor is configured, and etcd's client configures
//! none), no deadlines beyond the server's own.
use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The largest request message read: etcd's requests here are a few bytes.
pub const MAX_MESSAGE: usize = 64 << 10;

/// gRPC status codes used here (grpc's `codes` package numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidArgument = 3,
    NotFound = 5,
    FailedPrecondition = 9,
    Unimplemented = 12,
    Internal = 13,
}

/// A failed call: its code and message, sent as `grpc-status` and `grpc-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub message: String,
}

impl Status {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The message of a request body: exactly one uncompressed length-prefixed message.
pub fn unframe(body: &[u8]) -> Result<&[u8], Status> {
    let invalid = |why: &str| Status::new(Code::InvalidArgument, format!("grpc: {why}"));
    let [flag, a, b, c, d, rest @ ..] = body else {
        return Err(invalid("the request holds no complete message"));
    };
    if *flag != 0 {
        return Err(Status::new(
            Code::Unimplemented,
            "grpc: compressed messages are not supported",
        ));
    }
    let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    if len != rest.len() {
        return Err(invalid("the request is not exactly one message"));
    }
    Ok(rest)
}

/// One length-prefixed, uncompressed message.
pub fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(5 + len);
    out.put_u8(0);
    out.put_u32(len as u32);
    // Cannot fail: the buffer has room for the whole message.
    let _ = message.encode(&mut out);
    out.freeze()
}

/// `grpc-message` is percent-encoded: printable ASCII but `%` as is, everything else `%XX`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn base(status_headers: Option<HeaderMap>) -> http::response::Builder {
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/grpc");
    if let Some(h) = status_headers {
        for (k, v) in &h {
            builder = builder.header(k, v);
        }
    }
    builder
}

fn status_headers(code: u32, message: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from(code));
    if !message.is_empty()
        && let Ok(v) = HeaderValue::from_str(&percent_encode(message))
    {
        h.insert("grpc-message", v);
    }
    h
}

/// A successful answer: the message (as [`frame`] makes it), then the trailers
/// `grpc-status: 0`.
pub fn ok_framed(framed: Bytes) -> Response<Body> {
    let frames = [
        Ok(Frame::data(framed)),
        Ok(Frame::trailers(status_headers(0, ""))),
    ];
    let body = StreamBody::new(futures::stream::iter(frames)).boxed_unsync();
    base(None).body(body).unwrap_or_default()
}

/// A failed call as a "trailers-only" answer: the status in the one HEADERS frame.
pub fn error(status: &Status) -> Response<Body> {
    let headers = status_headers(status.code as u32, &status.message);
    let body = http_body_util::Empty::new().boxed_unsync();
    base(Some(headers)).body(body).unwrap_or_default()
}

/// The status of an answer made by [`ok`] or [`error`], read back (tests, and the etcd
/// module's own checks).
#[cfg(test)]
pub fn parse_status(headers: &HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Some((code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_and_unframed() {
        let msg = super::super::etcd::proto::MoveLeaderRequest { target_id: 42 };
        let framed = frame(&msg);
        assert_eq!(framed[0], 0);
        assert_eq!(
            u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize,
            framed.len() - 5
        );
        let inner = unframe(&framed).unwrap();
        let back: super::super::etcd::proto::MoveLeaderRequest =
            prost::Message::decode(inner).unwrap();
        assert_eq!(back.target_id, 42);
    }

    #[test]
    fn bad_frames_are_statuses() {
        assert_eq!(unframe(b"").unwrap_err().code, Code::InvalidArgument);
        assert_eq!(unframe(&[0, 0, 0]).unwrap_err().code, Code::InvalidArgument);
        assert_eq!(
            unframe(&[0, 0, 0, 0, 9, 1]).unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(
            unframe(&[0, 0, 0, 0, 1, 1, 2]).unwrap_err().code,
            Code::InvalidArgument
        );
        assert_eq!(
            unframe(&[1, 0, 0, 0, 0]).unwrap_err().code,
            Code::Unimplemented
        );
        assert_eq!(unframe(&[0, 0, 0, 0, 0]).unwrap(), b"");
    }

    #[test]
    fn an_error_is_trailers_only_with_an_encoded_message() {
        let r = error(&Status::new(Code::NotFound, "100% gone\n"));
        assert_eq!(
            parse_status(r.headers()),
            Some((5, "100%25 gone%0A".to_string()))
        );
        assert_eq!(r.headers()["content-type"], "application/grpc");
    }
}
