//! SPDY/3.1 framing: round trips through our own encoder, frames as Go's spdystream (the
//! framer client-go uses) writes them, and malformed input.
use super::*;

/// Written by moby/spdystream v0.5.1's framer (the one client-go uses), as client-go's
/// port-forward opens a request: SYN_STREAM 1 (error stream) with headers port, requestid,
/// streamtype, DATA 1 with FIN (the error stream closed at once, as KCP does), SYN_STREAM 3
/// (data stream), DATA 3 "hello", PING 1. Captured by hand with a small Go program.
const GO_FRAMES: &str = "800300010000003e0000000100000000000078f9e3c6a7c202253a48f95b044eea46c6e6960c0c0c9c4590f8ca04a5634603704a2c294a4dcc851636aca9a0a800000000ffff0000000101000000800300010000001600000003000000000000225333a8a44a04000000ffff000000030000000568656c6c6f800300060000000400000001";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn sorted(mut h: Headers) -> Headers {
    h.sort();
    h
}

fn hs(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn read_all(bytes: &[u8]) -> Result<Vec<Frame>, SpdyError> {
    let mut r = bytes;
    let mut inflater = Inflater::default();
    let mut frames = Vec::new();
    while let Some(f) = read_frame(&mut r, &mut inflater).await? {
        frames.push(f);
    }
    Ok(frames)
}

#[test]
fn the_dictionary_is_spdy3s() {
    // zlib identifies a preset dictionary by its Adler-32; the peer's must match.
    assert_eq!(dictionary().len(), 1423);
    let mut z = Compress::new(Compression::default(), true);
    assert_eq!(z.set_dictionary(dictionary()).unwrap(), 0xe3c6_a7c2);
}

#[tokio::test]
async fn frames_written_by_go_are_read() {
    let frames = read_all(&unhex(GO_FRAMES)).await.unwrap();
    assert_eq!(frames.len(), 5);
    let Frame::SynStream {
        id: 1,
        fin: false,
        headers,
    } = &frames[0]
    else {
        panic!("{:?}", frames[0]);
    };
    assert_eq!(
        sorted(headers.clone()),
        hs(&[
            ("port", "2379"),
            ("requestid", "0"),
            ("streamtype", "error")
        ])
    );
    assert_eq!(
        frames[1],
        Frame::Data {
            id: 1,
            fin: true,
            data: Bytes::new()
        }
    );
    // The second header block continues the first's compression context.
    let Frame::SynStream { id: 3, headers, .. } = &frames[2] else {
        panic!("{:?}", frames[2]);
    };
    assert_eq!(header(headers, "streamtype"), Some("data"));
    assert_eq!(header(headers, "port"), Some("2379"));
    assert_eq!(
        frames[3],
        Frame::Data {
            id: 3,
            fin: false,
            data: Bytes::from_static(b"hello")
        }
    );
    assert_eq!(frames[4], Frame::Ping { id: 1 });
}

#[tokio::test]
async fn every_frame_round_trips() {
    let frames = vec![
        Frame::SynStream {
            id: 5,
            fin: true,
            headers: hs(&[("streamtype", "data"), ("port", "6443")]),
        },
        Frame::SynReply {
            id: 5,
            fin: false,
            headers: vec![],
        },
        Frame::Headers {
            id: 5,
            fin: true,
            headers: hs(&[("x", "a\0b")]),
        },
        Frame::Data {
            id: 5,
            fin: true,
            data: Bytes::from(vec![7u8; 70_000]),
        },
        Frame::RstStream {
            id: 5,
            status: rst::CANCEL,
        },
        Frame::Ping { id: 2 },
        Frame::GoAway {
            last_good: 5,
            status: goaway::OK,
        },
        Frame::SynReply {
            id: 7,
            fin: true,
            headers: hs(&[("a", "1"), ("b", "2")]),
        },
    ];
    let mut deflater = Deflater::default();
    let mut out = Vec::new();
    for f in &frames {
        write_frame(f, &mut deflater, &mut out).unwrap();
    }
    assert_eq!(read_all(&out).await.unwrap(), frames);
}

#[tokio::test]
async fn skipped_and_malformed_frames() {
    // SETTINGS with one entry is read and skipped.
    let settings = unhex("80030004000000080000000100000000");
    assert_eq!(
        read_all(&settings).await.unwrap(),
        [Frame::Ignored { kind: 4 }]
    );
    // SPDY/2 is refused.
    let v2 = unhex("800200060000000400000001");
    assert!(matches!(read_all(&v2).await, Err(SpdyError::Version(2))));
    // A control frame over the limit is refused before its payload is read.
    let huge = unhex("8003000100ffffff");
    assert!(matches!(
        read_all(&huge).await,
        Err(SpdyError::TooLarge { .. })
    ));
    let big_data = unhex("0000000100ffffff");
    assert!(matches!(
        read_all(&big_data).await,
        Err(SpdyError::TooLarge { .. })
    ));
    // Truncated frames are I/O errors, not hangs or panics.
    let go = unhex(GO_FRAMES);
    for cut in [3, 9, 20, 69, 75] {
        assert!(read_all(&go[..cut]).await.is_err(), "{cut}");
    }
    // A header block that is not zlib.
    let garbage = unhex("80030001000000100000000100000000000001020304050607");
    assert!(matches!(
        read_all(&garbage[..24]).await,
        Err(SpdyError::Compression(_))
    ));
    // A SYN_STREAM too short for its fields, and stream id 0.
    let short = unhex("80030001000000020000");
    assert!(matches!(read_all(&short).await, Err(SpdyError::Frame(_))));
    let zero = unhex("0000000000000000");
    assert!(matches!(read_all(&zero).await, Err(SpdyError::Frame(_))));
}

#[test]
fn header_blocks_are_bounded() {
    // Too many headers.
    let mut deflater = Deflater::default();
    let many: Vec<(String, String)> = (0..MAX_HEADERS + 1)
        .map(|i| (format!("h{i}"), String::new()))
        .collect();
    let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let block = deflater.encode(&pairs).unwrap();
    assert!(matches!(
        Inflater::default().decode(&block),
        Err(SpdyError::HeaderBlock(_))
    ));
    // A block that inflates past the limit (a compression bomb) stops at the limit.
    let mut deflater = Deflater::default();
    let big = "x".repeat(MAX_HEADER_BLOCK * 4);
    let block = deflater.encode(&[("a", &big)]).unwrap();
    assert!(block.len() < 2048);
    assert!(matches!(
        Inflater::default().decode(&block),
        Err(SpdyError::TooLarge { .. })
    ));
    // A count that promises more than the block holds.
    let mut deflater = Deflater::default();
    let mut raw = Vec::new();
    raw.put_u32(3);
    raw.put_u32(1);
    raw.push(b'a');
    let mut z = Vec::with_capacity(256);
    deflater
        .0
        .compress_vec(&raw, &mut z, FlushCompress::Sync)
        .unwrap();
    assert!(matches!(
        Inflater::default().decode(&z),
        Err(SpdyError::HeaderBlock("truncated"))
    ));
}
