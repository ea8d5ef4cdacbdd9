//! `mgrp passive`: available bandwidth from the host's own TCP traffic (Wren), live on an
//! interface or offline from a pcap/pcapng file. No probes are sent.

use crate::say;
use anyhow::{bail, Result};
use clap::Args;
use mgrp_capture::feed::{feed_wren, FeedError};
use mgrp_capture::file::{FileStats, PcapFile};
use mgrp_capture::live::{LiveCapture, LiveStats};
use mgrp_estimate::wren::{PassiveEstimate, Segment, Wren, WrenCounters, WrenParams};
use mgrp_testbed::units::fmt_rate;
use serde::Serialize;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["iface", "pcap"])))]
pub struct PassiveArgs {
    /// Capture live on this interface (run it in the namespace that owns the interface).
    #[arg(long)]
    iface: Option<String>,
    /// Analyse this pcap or pcapng file instead.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Two-sided: the same traffic captured at the receiver; its arrival times replace the ACKs
    /// (one-way delays and receive rates instead of RTTs and ACK rates).
    #[arg(long, requires = "pcap")]
    peer_pcap: Option<PathBuf>,
    /// Only flows matching this pcap filter (tcpdump syntax, e.g. "host 198.18.3.2").
    #[arg(long)]
    flow: Option<String>,
    /// Only data sent from these addresses (default live: the interface's own addresses;
    /// offline: every sender in the file).
    #[arg(long, value_delimiter = ',')]
    local: Vec<IpAddr>,
    /// Estimate window.
    #[arg(long, default_value = "1s", value_parser = crate::testbed_cmd::duration)]
    window: Duration,
    /// Stop a live capture after this long (default: until Ctrl-C).
    #[arg(long, value_parser = crate::testbed_cmd::duration)]
    duration: Option<Duration>,
    /// Also write what was captured live to this pcap file (nanosecond timestamps).
    #[arg(long)]
    write: Option<PathBuf>,
    /// |ACK rate − ISR| / ISR a train may show and still count (Wren: 0.005).
    #[arg(long, default_value_t = 0.005)]
    rate_tolerance: f64,
    /// Shortest train, in segments (Wren: 7).
    #[arg(long, default_value_t = 7)]
    min_train: usize,
    /// Also print every judged train.
    #[arg(long)]
    trains: bool,
    /// JSON lines: one per estimate (and train), a summary last.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Summary<'a> {
    summary: bool,
    source: &'a str,
    estimates: usize,
    analysis: WrenCounters,
    file: Option<FileStats>,
    capture: Option<LiveStats>,
    /// Capture loss: dropped / (received + dropped), live only.
    capture_loss: Option<f64>,
    elapsed_s: f64,
    segments_per_s: f64,
}

struct Printer {
    json: bool,
    trains: bool,
    count: usize,
}

impl Printer {
    fn estimate(&mut self, e: &PassiveEstimate) -> Result<()> {
        self.count += 1;
        if self.json {
            say!("{}", serde_json::to_string(e)?);
            return Ok(());
        }
        let t = e.window_start_ns as f64 / 1e9;
        say!(
            "{t:>16.3}  {} → {}  A ≥ {}{}  (trains {}: {} lower bounds, {} rising; min RTT {:.2} ms)",
            e.src,
            e.dst,
            fmt_rate(e.value_bps),
            e.high_bps
                .map(|h| format!(", < {}", fmt_rate(h)))
                .unwrap_or_default(),
            e.trains,
            e.lower_bounds,
            e.increasing,
            e.rtt_min_ns as f64 / 1e6
        );
        Ok(())
    }

    fn drain(&mut self, w: &mut Wren, now_ns: u64) -> Result<()> {
        if self.trains {
            for t in w.take_trains() {
                if self.json {
                    say!("{}", serde_json::to_string(&t)?);
                } else {
                    say!(
                        "  train {} → {}  {} segs ({} acked)  ISR {}  ACK rate {}  {:?}",
                        t.path.0,
                        t.path.1,
                        t.segments,
                        t.acked,
                        fmt_rate(t.isr_bps),
                        fmt_rate(t.ack_rate_bps),
                        t.verdict
                    );
                }
            }
        } else {
            // Judged trains are only for --trains; drop them so they do not pile up.
            w.take_trains();
        }
        for e in w.poll_estimates(now_ns) {
            self.estimate(&e)?;
        }
        Ok(())
    }
}

pub fn run(a: PassiveArgs) -> Result<()> {
    if !(0.0..1.0).contains(&a.rate_tolerance) {
        bail!("--rate-tolerance must be in [0, 1)");
    }
    if !(3..=10_000).contains(&a.min_train) {
        bail!("--min-train must be 3..=10000");
    }
    if a.window < Duration::from_millis(10) || a.window > Duration::from_secs(3600) {
        bail!("--window must be between 10ms and 1h");
    }
    let mut params = WrenParams {
        rate_tolerance: a.rate_tolerance,
        min_train: a.min_train,
        window_ns: a.window.as_nanos() as u64,
        ..WrenParams::default()
    };
    if a.peer_pcap.is_some() {
        params = params.two_sided();
    }
    let mut out = Printer {
        json: a.json,
        trains: a.trains,
        count: 0,
    };
    crate::signals::catch_signals();
    if let Some(path) = &a.pcap {
        if a.write.is_some() || a.duration.is_some() {
            bail!("--write and --duration are for live capture (--iface)");
        }
        return offline(&a, path, params, &mut out);
    }
    let iface = a.iface.as_deref().expect("clap requires --iface or --pcap");
    live(&a, iface, params, &mut out)
}

/// A compiled pcap filter applied to file frames, so `--flow` means the same offline and live.
struct FileFilter(pcap::BpfProgram);

fn offline(
    a: &PassiveArgs,
    path: &std::path::Path,
    p: WrenParams,
    out: &mut Printer,
) -> Result<()> {
    let mut file = PcapFile::open(path)?;
    let mut wren = Wren::new(p).with_local(a.local.clone());
    let filter = match &a.flow {
        Some(f) => Some(compile_filter(f)?),
        None => None,
    };
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut last_poll = 0u64;
    // Polling per segment would cost more than the analysis: every 10 ms of trace.
    let mut feed = |wren: &mut Wren, out: &mut Printer, s: &Segment| -> Result<()> {
        n += 1;
        wren.handle_segment(s);
        if s.ts_ns >= last_poll + 10_000_000 {
            last_poll = s.ts_ns;
            out.drain(wren, s.ts_ns)?;
        }
        Ok(())
    };
    let (source, result) = match &a.peer_pcap {
        Some(peer) => {
            let mine = read_all(&mut file, filter.as_ref())?;
            let theirs = read_all(&mut PcapFile::open(peer)?, filter.as_ref())?;
            for s in mgrp_estimate::wren::merge_two_sided(&mine, &theirs) {
                feed(&mut wren, out, &s)?;
            }
            (format!("{} + {}", path.display(), peer.display()), Ok(()))
        }
        None => {
            let mut k = 0u64;
            let result = loop {
                match file.next_segment() {
                    Ok(Some(s)) if filter.as_ref().is_none_or(|f| f.matches(&s)) => {
                        feed(&mut wren, out, &s)?
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
                k += 1;
                if k % 65_536 == 0 && crate::signals::interrupted() {
                    break Ok(());
                }
            };
            (path.display().to_string(), result)
        }
    };
    out.drain(&mut wren, u64::MAX)?;
    let secs = t0.elapsed().as_secs_f64();
    let stats = file.stats();
    summary(
        out,
        &Summary {
            summary: true,
            source: &source,
            estimates: out.count,
            analysis: wren.counters(),
            file: Some(stats),
            capture: None,
            capture_loss: None,
            elapsed_s: secs,
            segments_per_s: n as f64 / secs.max(1e-9),
        },
    )?;
    if stats.truncated {
        eprintln!("mgrp: warning: {} ends inside a record (truncated capture); the records before it were analysed", path.display());
    }
    result.map_err(Into::into)
}

/// Every (matching) segment of a file, for the two-sided merge; bounded.
fn read_all(file: &mut PcapFile, filter: Option<&FileFilter>) -> Result<Vec<Segment>> {
    const MAX: usize = 20_000_000;
    let mut v = Vec::new();
    while let Some(s) = file.next_segment()? {
        if filter.is_none_or(|f| f.matches(&s)) {
            if v.len() >= MAX {
                bail!("two-sided analysis holds both captures in memory: more than {MAX} segments; cut the captures shorter");
            }
            v.push(s);
        }
    }
    Ok(v)
}

fn live(a: &PassiveArgs, iface: &str, p: WrenParams, out: &mut Printer) -> Result<()> {
    let mut cap = LiveCapture::open(iface, a.flow.as_deref(), a.write.as_deref())?;
    let local = if a.local.is_empty() {
        mgrp_capture::live::interface_addrs(iface)?
    } else {
        a.local.clone()
    };
    if local.is_empty() {
        bail!("{iface} has no IP address: pass --local to say which sender to analyse");
    }
    if !a.json {
        eprintln!(
            "capturing TCP on {iface} (data from {}); Ctrl-C to stop",
            local
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut wren = Wren::new(p).with_local(local);
    let t0 = Instant::now();
    let end = a.duration.map(|d| t0 + d);
    let stop = || crate::signals::interrupted() || end.is_some_and(|e| Instant::now() >= e);
    let every = Duration::from_millis(50);
    let n = feed_wren(&mut cap, &mut wren, every, stop, |w, _, poll| {
        out.drain(w, poll.now_ns)
    })
    .map_err(|e| match e {
        FeedError::Capture(e) => anyhow::Error::from(e),
        FeedError::Poll(e) => e,
    })?;
    cap.flush()?;
    out.drain(&mut wren, u64::MAX)?;
    let stats = cap.stats();
    let secs = t0.elapsed().as_secs_f64();
    let seen = stats.received + stats.dropped;
    summary(
        out,
        &Summary {
            summary: true,
            source: iface,
            estimates: out.count,
            analysis: wren.counters(),
            file: None,
            capture: Some(stats),
            capture_loss: (seen > 0).then(|| stats.dropped as f64 / seen as f64),
            elapsed_s: secs,
            segments_per_s: n as f64 / secs.max(1e-9),
        },
    )
}

fn summary(out: &Printer, s: &Summary) -> Result<()> {
    if out.json {
        say!("{}", serde_json::to_string(s)?);
        return Ok(());
    }
    let c = &s.analysis;
    say!(
        "\n{}: {} estimates from {} data segments; trains {} ({} lower bounds, {} rising, {} rate mismatch, {} too few ACKs, {} with retransmissions), {} runs too short",
        s.source,
        s.estimates,
        c.data_segments,
        c.trains,
        c.trains_lower_bound,
        c.trains_increasing,
        c.trains_rate_mismatch,
        c.trains_too_few_acks,
        c.trains_with_retransmissions,
        c.short_runs
    );
    if c.super_segments > 0 {
        say!(
            "  {} TSO/GSO super-segments: spacing inside them is invisible to the capture",
            c.super_segments
        );
    }
    if let Some(f) = &s.file {
        say!(
            "  file: {} frames, {} TCP, {} not TCP, {} malformed{}; analysed at {:.2} M segments/s",
            f.frames,
            f.tcp,
            f.not_tcp,
            f.malformed,
            if f.truncated { ", truncated" } else { "" },
            s.segments_per_s / 1e6
        );
    }
    if let Some(l) = &s.capture {
        say!(
            "  capture: {} frames, {} dropped by the kernel ({:.3}% loss)",
            l.received,
            l.dropped,
            s.capture_loss.unwrap_or(0.0) * 100.0
        );
    }
    Ok(())
}

fn compile_filter(expr: &str) -> Result<FileFilter> {
    // Segments are matched as raw IP packets (DLT_RAW) rebuilt from their headers, so any link
    // type works.
    let dead = pcap::Capture::dead(pcap::Linktype(12))
        .map_err(|e| anyhow::anyhow!("pcap filter engine: {e}"))?;
    let prog = dead
        .compile(&format!("tcp and ({expr})"), true)
        .map_err(|e| anyhow::anyhow!("bad --flow filter {expr:?}: {e}"))?;
    Ok(FileFilter(prog))
}

impl FileFilter {
    /// Match a segment by rebuilding its IP and TCP headers (addresses and ports are what
    /// flow filters name; lengths and flags are filled in).
    fn matches(&self, s: &Segment) -> bool {
        let pkt = header_bytes(s);
        self.0.filter(&pkt)
    }
}

fn header_bytes(s: &Segment) -> Vec<u8> {
    let mut b = Vec::with_capacity(60);
    let tcp = |b: &mut Vec<u8>| {
        b.extend(s.src.port().to_be_bytes());
        b.extend(s.dst.port().to_be_bytes());
        b.extend(s.seq.to_be_bytes());
        b.extend(s.ack.to_be_bytes());
        b.push(0x50);
        b.push(if s.has_ack { 0x10 } else { 0 });
        b.extend([0u8; 6]);
    };
    match (s.src.ip(), s.dst.ip()) {
        (IpAddr::V4(a), IpAddr::V4(d)) => {
            let len = (40 + s.payload).min(65535) as u16;
            b.extend([0x45, 0]);
            b.extend(len.to_be_bytes());
            b.extend([0, 0, 0x40, 0, 64, 6, 0, 0]);
            b.extend(a.octets());
            b.extend(d.octets());
        }
        (a, d) => {
            let to6 = |x: IpAddr| match x {
                IpAddr::V6(v) => v,
                IpAddr::V4(v) => v.to_ipv6_mapped(),
            };
            b.extend([0x60, 0, 0, 0]);
            b.extend(((20 + s.payload).min(65535) as u16).to_be_bytes());
            b.extend([6, 64]);
            b.extend(to6(a).octets());
            b.extend(to6(d).octets());
        }
    }
    tcp(&mut b);
    b
}
