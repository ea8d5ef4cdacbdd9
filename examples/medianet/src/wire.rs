//! A frame on a stream's TCP connection: a 24-byte header, then padding up to the frame's
//! size (the header is part of the frame's bytes, so sizes on the wire are the seed's).
//!
//! Header: magic `MNF1`, stream (u8), kind (u8), two zero bytes, frame index (u64 BE),
//! generation time (u64 BE, ns since the Unix epoch: sender and receiver clocks are assumed
//! synchronised, as on one host's namespaces).

use crate::workload::kind_of;

pub const MAGIC: &[u8; 4] = b"MNF1";
pub const HEADER: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub stream: u8,
    pub index: u64,
    pub gen_ns: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[..4].copy_from_slice(MAGIC);
        b[4] = self.stream;
        b[5] = kind_of(self.index).code();
        b[8..16].copy_from_slice(&self.index.to_be_bytes());
        b[16..24].copy_from_slice(&self.gen_ns.to_be_bytes());
        b
    }

    /// A header, or why not: wrong magic, or a kind that does not match the index.
    pub fn decode(b: &[u8; HEADER]) -> Result<Header, String> {
        if &b[..4] != MAGIC {
            return Err("not a MediaNet frame (bad magic)".into());
        }
        let index = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
        if b[5] != kind_of(index).code() {
            return Err(format!(
                "frame {index}: kind {} does not match its slot",
                b[5]
            ));
        }
        Ok(Header {
            stream: b[4],
            index,
            gen_ns: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
        })
    }

    /// Bytes of the whole frame, header included.
    pub fn frame_size(&self) -> usize {
        kind_of(self.index).size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let h = Header {
            stream: 2,
            index: 18,
            gen_ns: 123_456_789,
        };
        let b = h.encode();
        assert_eq!(Header::decode(&b), Ok(h));
        assert_eq!(h.frame_size(), 7_625);
        let mut bad = b;
        bad[0] = b'X';
        assert!(Header::decode(&bad).is_err());
        let mut bad = b;
        bad[5] = 0;
        assert!(Header::decode(&bad).unwrap_err().contains("kind"));
    }
}
