//! The last bytes of an output stream: what an exec keeps of stdout and stderr, whatever the
//! command prints. A failing command that prints megabytes must not cost the manager megabytes;
//! its last lines (the error, and the bootstrap script's marker line) are what anybody reads.
use std::collections::VecDeque;

/// How much of each exec output stream is kept: the last 64 KiB. Enough for the bootstrap
/// script's marker line and the [`TAIL_LINES`](crate::bootstrap::TAIL_LINES) lines a failure
/// shows, and for every file the manager reads back from a container (haproxy.cfg, a progress
/// count), with room to spare.
pub const EXEC_OUTPUT_TAIL: usize = 64 * 1024;

/// A byte buffer that keeps only the last `cap` bytes pushed into it.
#[derive(Debug)]
pub struct TailBuffer {
    buf: VecDeque<u8>,
    cap: usize,
    dropped: u64,
}

impl TailBuffer {
    pub fn new(cap: usize) -> Self {
        TailBuffer {
            buf: VecDeque::new(),
            cap,
            dropped: 0,
        }
    }

    /// Append `data`, dropping the oldest bytes beyond the bound (and never holding more than
    /// the bound, even for a moment: a chunk larger than the bound is cut before it is copied).
    pub fn push(&mut self, data: &[u8]) {
        let data = match data.len().checked_sub(self.cap) {
            Some(skip) if skip > 0 => {
                self.dropped += skip as u64;
                &data[skip..]
            }
            _ => data,
        };
        let excess = (self.buf.len() + data.len()).saturating_sub(self.cap);
        if excess > 0 {
            self.buf.drain(..excess);
            self.dropped += excess as u64;
        }
        self.buf.extend(data);
    }

    /// How many bytes were dropped from the front.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The kept bytes, oldest first.
    pub fn into_vec(self) -> Vec<u8> {
        Vec::from(self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_below_the_bound() {
        let mut t = TailBuffer::new(10);
        t.push(b"abc");
        t.push(b"");
        t.push(b"defg");
        assert_eq!((t.len(), t.dropped()), (7, 0));
        assert_eq!(t.into_vec(), b"abcdefg");
    }

    #[test]
    fn keeps_the_last_bytes_across_chunks() {
        let mut t = TailBuffer::new(5);
        t.push(b"abcd");
        t.push(b"efg");
        assert_eq!(t.dropped(), 2);
        t.push(b"h");
        assert_eq!(t.dropped(), 3);
        assert_eq!(t.into_vec(), b"defgh");
    }

    #[test]
    fn a_chunk_larger_than_the_bound_keeps_its_own_end() {
        let mut t = TailBuffer::new(4);
        t.push(b"xy");
        t.push(b"0123456789");
        assert_eq!((t.len(), t.dropped()), (4, 8));
        assert_eq!(t.into_vec(), b"6789");
    }

    #[test]
    fn megabytes_in_small_chunks_stay_within_the_bound() {
        let mut t = TailBuffer::new(EXEC_OUTPUT_TAIL);
        let line: Vec<u8> = b"0123456789abcdef\n".to_vec();
        for _ in 0..(12 << 20) / line.len() {
            t.push(&line);
            assert!(t.len() <= EXEC_OUTPUT_TAIL);
        }
        let total = ((12 << 20) / line.len() * line.len()) as u64;
        assert_eq!(t.dropped() + t.len() as u64, total);
        let kept = t.into_vec();
        assert_eq!(kept.len(), EXEC_OUTPUT_TAIL);
        assert!(kept.ends_with(b"abcdef\n"));
    }
}
