//! Content decoders: base64, gzip, `data:` URLs. Errors describe the problem, never the content.
use std::io::Read;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_PAD_INDIFFERENT, URL_SAFE_PAD_INDIFFERENT};
use flate2::read::MultiGzDecoder;

#[cfg(doc)]
use super::limits::MAX_DECODED_BYTES;
use super::limits::over_budget;

/// Decode base64, ignoring whitespace (wrapped lines) and tolerating missing padding.
pub(crate) fn base64(text: &[u8]) -> Result<Vec<u8>, String> {
    let compact: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    STANDARD_PAD_INDIFFERENT
        .decode(&compact)
        .or_else(|e| {
            // Accept the URL-safe alphabet too, but report the standard decoder's problem.
            URL_SAFE_PAD_INDIFFERENT.decode(&compact).map_err(|_| e)
        })
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(offset, _)
            | base64::DecodeError::InvalidLastSymbol { offset, .. } => {
                format!("content is not valid base64 (invalid character at offset {offset})")
            }
            base64::DecodeError::InvalidLength(_) => {
                "content is not valid base64 (invalid length)".to_string()
            }
            base64::DecodeError::InvalidPadding => {
                "content is not valid base64 (invalid padding)".to_string()
            }
        })
}

/// Decompress gzip (one or more members), to at most `limit` bytes: what is left of the plan's
/// budget for all files ([`MAX_DECODED_BYTES`]), so a bomb stops at the bound, not after it.
pub(crate) fn gunzip(data: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    MultiGzDecoder::new(data)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("content is not valid gzip ({e})"))?;
    if out.len() as u64 > limit {
        return Err(over_budget());
    }
    Ok(out)
}

/// Decode an RFC 2397 `data:` URL (`data:[<mediatype>][;base64],<data>`). Returns `Err` with a
/// reason for other schemes and malformed URLs. The scheme, but never the rest, may be quoted.
pub(crate) fn data_url(url: &str) -> Result<Vec<u8>, String> {
    let Some(rest) = strip_prefix_ignore_case(url.trim_start(), "data:") else {
        let scheme = url.split_once(':').map(|(s, _)| s).filter(|s| {
            !s.is_empty()
                && s.len() <= 16
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        });
        return Err(match scheme {
            Some(s) => format!(
                "contents source with scheme {s:?} is not supported (only data: URLs; the node cannot fetch remote content)"
            ),
            None => "contents source is not a data: URL".to_string(),
        });
    };
    let Some((meta, payload)) = rest.split_once(',') else {
        return Err("malformed data: URL (no ',' before the data)".to_string());
    };
    let is_base64 = meta
        .split(';')
        .any(|p| p.trim().eq_ignore_ascii_case("base64"));
    let bytes = percent_decode(payload)?;
    if is_base64 { base64(&bytes) } else { Ok(bytes) }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    if s.len() >= prefix.len()
        && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

fn percent_decode(s: &str) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| {
                std::str::from_utf8(h)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            });
            match hex {
                Some(b) => {
                    out.push(b);
                    i += 3;
                }
                None => {
                    return Err(format!(
                        "malformed data: URL (invalid percent-encoding at offset {i})"
                    ));
                }
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

#[cfg(test)]
pub(crate) fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_variants() {
        assert_eq!(base64(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64(b"aGVsbG8").unwrap(), b"hello", "missing padding");
        assert_eq!(base64(b"aGVs\n  bG8=\n").unwrap(), b"hello", "wrapped");
        assert_eq!(base64(b"-_8=").unwrap(), vec![0xfb, 0xff], "url-safe");
        let err = base64(b"aGV*bG8=").unwrap_err();
        assert!(
            err.contains("not valid base64") && err.contains("offset 3"),
            "{err}"
        );
        assert!(!err.contains("aGV"), "{err}");
    }

    #[test]
    fn gunzip_roundtrip_and_errors() {
        assert_eq!(gunzip(&gzip(b"hello world"), 100).unwrap(), b"hello world");
        let mut two = gzip(b"a");
        two.extend(gzip(b"b"));
        assert_eq!(gunzip(&two, 100).unwrap(), b"ab", "multi-member");
        let err = gunzip(b"plain text, not gzip", 100).unwrap_err();
        assert!(err.contains("not valid gzip"), "{err}");
        assert!(!err.contains("plain text"), "{err}");
    }

    #[test]
    fn gunzip_stops_at_its_limit() {
        let zeros = vec![0u8; 1000];
        assert_eq!(gunzip(&gzip(&zeros), 1000).unwrap().len(), 1000);
        let err = gunzip(&gzip(&zeros), 999).unwrap_err();
        assert!(err.contains("more than 16 MiB"), "{err}");
    }

    #[test]
    fn data_urls() {
        assert_eq!(
            data_url("data:,hello%20world%0A").unwrap(),
            b"hello world\n"
        );
        assert_eq!(data_url("data:;base64,aGVsbG8=").unwrap(), b"hello");
        assert_eq!(
            data_url("data:text/plain;charset=utf-8;base64,aGVsbG8=").unwrap(),
            b"hello"
        );
        assert_eq!(data_url("DATA:,x").unwrap(), b"x");
        assert_eq!(data_url("data:,").unwrap(), b"");
        assert_eq!(data_url("data:,a+b").unwrap(), b"a+b", "+ is not a space");
        let err = data_url("https://example.com/secret?token=abc").unwrap_err();
        assert!(
            err.contains("\"https\"") && !err.contains("example.com"),
            "{err}"
        );
        let err = data_url("data:,bad%zz").unwrap_err();
        assert!(err.contains("percent-encoding"), "{err}");
        let err = data_url("data:base64").unwrap_err();
        assert!(err.contains("malformed"), "{err}");
        let err = data_url("/etc/passwd").unwrap_err();
        assert!(err.contains("not a data: URL"), "{err}");
    }
}
