//! pcap and pcapng files (e.g. from tcpdump) as a stream of TCP segments, read in bounded memory.

use crate::decode::{decode, Decoded, Link};
use crate::Error;
use mgrp_estimate::wren::Segment;
use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};
use serde::Serialize;
use std::path::Path;

/// The reader's buffer: the largest record it can hold (a 256 KiB snap length fits).
const BUFFER: usize = 2 << 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FileStats {
    pub frames: u64,
    pub tcp: u64,
    pub not_tcp: u64,
    pub malformed: u64,
    /// Packets without a timestamp (pcapng simple packet blocks) or on an unknown interface.
    pub untimed: u64,
    /// The file ended inside a record: the records before it were read.
    pub truncated: bool,
    /// Frames whose timestamps went backwards (kept; the analysis tolerates it).
    pub out_of_order: u64,
}

struct Interface {
    link: Link,
    /// Timestamp units per second, and offset in seconds.
    units: u64,
    offset_s: i64,
}

pub struct PcapFile {
    reader: Box<dyn PcapReaderIterator>,
    st: State,
    done: bool,
}

/// Everything but the reader, so a block borrowed from the reader can update it.
struct State {
    path: String,
    /// Legacy pcap: one interface; pcapng: one per interface description block.
    ifaces: Vec<Interface>,
    stats: FileStats,
    last_ts: u64,
}

fn ns(units_value: u128, units: u64, offset_s: i64) -> u64 {
    let units = units.max(1) as u128;
    let whole = units_value / units;
    let frac = (units_value % units) * 1_000_000_000 / units;
    let s = (whole as i128 + offset_s as i128).max(0) as u128;
    (s * 1_000_000_000 + frac).min(u64::MAX as u128) as u64
}

impl PcapFile {
    pub fn open(path: &Path) -> Result<PcapFile, Error> {
        let p = path.display().to_string();
        let fail = |why: String| Error::File {
            path: p.clone(),
            why,
        };
        let f = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
        let reader = create_reader(BUFFER, f).map_err(|e| {
            fail(match e {
                PcapError::Eof => "empty file".into(),
                PcapError::HeaderNotRecognized => "not a pcap or pcapng file".into(),
                PcapError::Incomplete(_) => "file too short for a capture header".into(),
                other => format!("unreadable capture: {other:?}"),
            })
        })?;
        Ok(PcapFile {
            reader,
            st: State {
                path: p,
                ifaces: Vec::new(),
                stats: FileStats::default(),
                last_ts: 0,
            },
            done: false,
        })
    }

    pub fn stats(&self) -> FileStats {
        self.st.stats
    }

    /// The next TCP segment; frames that are not TCP or do not decode are counted and skipped.
    /// `Ok(None)` at the end of the file. An unsupported link type or a corrupt record is an
    /// error (what was read before it stands).
    pub fn next_segment(&mut self) -> Result<Option<Segment>, Error> {
        let mut stalled = false;
        while !self.done {
            let (consumed, out) = match self.reader.next() {
                Ok((off, block)) => {
                    stalled = false;
                    (off, self.st.block(block)?)
                }
                Err(PcapError::Eof) => {
                    self.done = true;
                    return Ok(None);
                }
                Err(PcapError::UnexpectedEof) => {
                    // The file ends inside a record: it was cut short.
                    self.st.stats.truncated = true;
                    self.done = true;
                    return Ok(None);
                }
                Err(PcapError::Incomplete(_)) => {
                    if self.reader.reader_exhausted() {
                        // Data left that is not a whole record: the file was cut short.
                        self.st.stats.truncated = !self.reader.data().is_empty();
                        self.done = true;
                        return Ok(None);
                    }
                    if stalled {
                        return Err(self.st.err(format!(
                            "a record larger than {} MiB (corrupt length?)",
                            BUFFER >> 20
                        )));
                    }
                    if let Err(e) = self.reader.refill() {
                        let why = format!("read failed: {e:?}");
                        return Err(self.st.err(why));
                    }
                    stalled = true;
                    continue;
                }
                Err(e) => {
                    let why = format!(
                        "corrupt record after {} frames: {e:?}",
                        self.st.stats.frames
                    );
                    self.done = true;
                    return Err(self.st.err(why));
                }
            };
            self.reader.consume(consumed);
            if let Some(s) = out {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }
}

impl State {
    fn err(&self, why: impl Into<String>) -> Error {
        Error::File {
            path: self.path.clone(),
            why: why.into(),
        }
    }

    fn frame(&mut self, iface: usize, ts_ns: u64, data: &[u8]) -> Option<Segment> {
        self.stats.frames += 1;
        let Some(link) = self.ifaces.get(iface).map(|i| i.link) else {
            self.stats.untimed += 1;
            return None;
        };
        if ts_ns < self.last_ts {
            self.stats.out_of_order += 1;
        }
        self.last_ts = self.last_ts.max(ts_ns);
        match decode(link, data, ts_ns) {
            Decoded::Tcp(s) => {
                self.stats.tcp += 1;
                Some(s)
            }
            Decoded::NotTcp => {
                self.stats.not_tcp += 1;
                None
            }
            Decoded::Malformed => {
                self.stats.malformed += 1;
                None
            }
        }
    }

    fn block(&mut self, block: PcapBlockOwned) -> Result<Option<Segment>, Error> {
        match block {
            PcapBlockOwned::LegacyHeader(h) => {
                let link = Link::from_linktype(h.network.0)?;
                let units = if h.is_nanosecond_precision() {
                    1_000_000_000
                } else {
                    1_000_000
                };
                self.ifaces = vec![Interface {
                    link,
                    units,
                    offset_s: 0,
                }];
                Ok(None)
            }
            PcapBlockOwned::Legacy(b) => {
                let units = self.ifaces.first().map_or(1_000_000, |i| i.units);
                let ts =
                    b.ts_sec as u64 * 1_000_000_000 + b.ts_usec as u64 * (1_000_000_000 / units);
                let len = (b.caplen as usize).min(b.data.len());
                Ok(self.frame(0, ts, &b.data[..len]))
            }
            PcapBlockOwned::NG(Block::SectionHeader(_)) => {
                // A new section restarts interface numbering.
                self.ifaces.clear();
                Ok(None)
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                let link = Link::from_linktype(idb.linktype.0)?;
                let units = idb.ts_resolution().ok_or_else(|| {
                    self.err(format!("bad timestamp resolution {}", idb.if_tsresol))
                })?;
                self.ifaces.push(Interface {
                    link,
                    units,
                    offset_s: idb.ts_offset(),
                });
                Ok(None)
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                let i = epb.if_id as usize;
                let Some(iface) = self.ifaces.get(i) else {
                    self.stats.frames += 1;
                    self.stats.untimed += 1;
                    return Ok(None);
                };
                let raw = ((epb.ts_high as u128) << 32) | epb.ts_low as u128;
                let ts = ns(raw, iface.units, iface.offset_s);
                let len = (epb.caplen as usize).min(epb.data.len());
                Ok(self.frame(i, ts, &epb.data[..len]))
            }
            PcapBlockOwned::NG(Block::SimplePacket(_)) => {
                self.stats.frames += 1;
                self.stats.untimed += 1;
                Ok(None)
            }
            PcapBlockOwned::NG(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::tests::frame;

    /// A legacy pcap with nanosecond timestamps, little-endian.
    pub(crate) fn pcap_ns(frames: &[(u64, Vec<u8>)], linktype: u32) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend(0xa1b23c4du32.to_le_bytes());
        f.extend(2u16.to_le_bytes());
        f.extend(4u16.to_le_bytes());
        f.extend([0u8; 8]);
        f.extend(65535u32.to_le_bytes());
        f.extend(linktype.to_le_bytes());
        for (ts, data) in frames {
            f.extend(((ts / 1_000_000_000) as u32).to_le_bytes());
            f.extend(((ts % 1_000_000_000) as u32).to_le_bytes());
            f.extend((data.len() as u32).to_le_bytes());
            f.extend((data.len() as u32 + 1000).to_le_bytes());
            f.extend(data);
        }
        f
    }

    /// A file in the temp dir, removed when dropped (also when an assertion fails).
    struct TempFile(std::path::PathBuf);

    impl std::ops::Deref for TempFile {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn write(name: &str, bytes: &[u8]) -> TempFile {
        let p = std::env::temp_dir().join(format!("mgrp-capture-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        TempFile(p)
    }

    fn read_all(p: &Path) -> (Vec<Segment>, FileStats, Option<Error>) {
        let mut f = match PcapFile::open(p) {
            Ok(f) => f,
            Err(e) => return (Vec::new(), FileStats::default(), Some(e)),
        };
        let mut out = Vec::new();
        loop {
            match f.next_segment() {
                Ok(Some(s)) => out.push(s),
                Ok(None) => return (out, f.stats(), None),
                Err(e) => return (out, f.stats(), Some(e)),
            }
        }
    }

    #[test]
    fn nanosecond_pcap_round_trip() {
        let bytes = pcap_ns(
            &[
                (1_700_000_000_123_456_789, frame(1448, None)),
                (1_700_000_000_123_556_789, frame(0, None)),
            ],
            1,
        );
        let p = write("ns.pcap", &bytes);
        let (segs, stats, err) = read_all(&p);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[0].ts_ns, 1_700_000_000_123_456_789);
        assert_eq!(segs[1].ts_ns - segs[0].ts_ns, 100_000);
        assert_eq!((stats.frames, stats.tcp, stats.truncated), (2, 2, false));
    }

    #[test]
    fn bad_files_are_errors_or_counted() {
        let good = pcap_ns(
            &[
                (1_000, frame(100, None)),
                (2_000, vec![0xde, 0xad, 0xbe, 0xef]),
            ],
            1,
        );
        // Cut inside the last record: what came before is read, the cut is reported.
        let p = write("cut.pcap", &good[..good.len() - 2]);
        let (segs, stats, err) = read_all(&p);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(segs.len(), 1);
        assert!(stats.truncated);
        // The junk frame is counted as malformed, not fatal.
        let p2 = write("junk.pcap", &good);
        let (_, stats, _) = read_all(&p2);
        assert_eq!(stats.malformed, 1);
        // Not a capture at all, empty, and an unsupported link type.
        let p3 = write("text.pcap", b"hello, this is not a capture file at all");
        let (_, _, err) = read_all(&p3);
        assert!(err.unwrap().to_string().contains("not a pcap"));
        let p4 = write("empty.pcap", b"");
        assert!(read_all(&p4).2.unwrap().to_string().contains("empty"));
        let p5 = write("link.pcap", &pcap_ns(&[(1, frame(1, None))], 147));
        assert!(read_all(&p5)
            .2
            .unwrap()
            .to_string()
            .contains("link type 147"));
        // A record claiming 4 GiB.
        let mut huge = pcap_ns(&[(1, frame(1, None))], 1);
        huge[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let p6 = write("huge.pcap", &huge);
        let (_, _, err) = read_all(&p6);
        assert!(err.is_some());
        // Every truncation of a good file: never a panic.
        for n in 0..good.len() {
            let p = write("each.pcap", &good[..n]);
            let _ = read_all(&p);
        }
    }
}
