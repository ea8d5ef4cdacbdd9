//! Parsing of the human quantities the testbed takes: rates, byte sizes, durations.
//!
//! Rates follow `tc`'s spelling for bits (`bit`, `kbit`, `mbit`, `gbit`) and also take a bare
//! `k`/`m`/`g` suffix as bits. `tc` spells *bytes* per second as `bps`, which people routinely
//! misread as bits, so `*bps` is refused with a hint instead of silently meaning 8x.

use crate::Error;
use std::time::Duration;

/// A rate in bits per second.
pub fn parse_rate(s: &str) -> Result<u64, Error> {
    let t = s.trim().to_ascii_lowercase();
    let bad = |why: &str| Error::BadInput(format!("bad rate {s:?}: {why}"));
    if t.ends_with("bps") {
        return Err(bad(
            "`bps` is ambiguous (tc reads it as bytes/s); write bits, e.g. 5mbit or 500kbit",
        ));
    }
    let (num, mult) = split_suffix(
        &t,
        &[
            ("gbit", 1e9),
            ("mbit", 1e6),
            ("kbit", 1e3),
            ("bit", 1.0),
            ("g", 1e9),
            ("m", 1e6),
            ("k", 1e3),
        ],
    );
    let v: f64 = num
        .parse()
        .map_err(|_| bad("expected a number with a unit such as 20mbit"))?;
    let bps = v * mult;
    if !bps.is_finite() || bps < 1.0 {
        return Err(bad("must be at least 1 bit/s"));
    }
    if bps > 100e9 {
        return Err(bad(
            "more than 100 Gbit/s is not something a namespace testbed can do",
        ));
    }
    Ok(bps.round() as u64)
}

/// A byte count: `1500`, `1500b`, `64kb`, `1mb` (powers of 1024 for k/m, like tc).
pub fn parse_bytes(s: &str) -> Result<u64, Error> {
    let t = s.trim().to_ascii_lowercase();
    let bad = |why: &str| Error::BadInput(format!("bad byte size {s:?}: {why}"));
    let (num, mult) = split_suffix(&t, &[("mb", 1048576.0), ("kb", 1024.0), ("b", 1.0)]);
    let v: f64 = num
        .parse()
        .map_err(|_| bad("expected e.g. 1500b or 64kb"))?;
    if !v.is_finite() || v < 0.0 || v * mult > 1e12 {
        return Err(bad("out of range"));
    }
    Ok((v * mult).round() as u64)
}

/// A duration: `100ms`, `45s`, `1.5s`, `20us`, `2m`. A bare number means seconds.
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    let t = s.trim().to_ascii_lowercase();
    let bad = |why: &str| Error::BadInput(format!("bad duration {s:?}: {why}"));
    let (num, mult) = split_suffix(
        &t,
        &[
            ("ns", 1e-9),
            ("us", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ],
    );
    let v: f64 = num.parse().map_err(|_| bad("expected e.g. 100ms or 45s"))?;
    let secs = v * mult;
    if !secs.is_finite() || !(0.0..=7.0 * 86400.0).contains(&secs) {
        return Err(bad("out of range (0 .. 7 days)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn split_suffix<'a>(t: &'a str, units: &[(&str, f64)]) -> (&'a str, f64) {
    for (suffix, mult) in units {
        if let Some(num) = t.strip_suffix(suffix) {
            return (num.trim(), *mult);
        }
    }
    (t, 1.0)
}

/// `20000000` -> `20 Mbit/s`, for people.
pub fn fmt_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.3} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.3} Mbit/s", bps / 1e6)
    } else {
        format!("{:.1} kbit/s", bps / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("20mbit").unwrap(), 20_000_000);
        assert_eq!(parse_rate("1.5Mbit").unwrap(), 1_500_000);
        assert_eq!(parse_rate("500kbit").unwrap(), 500_000);
        assert_eq!(parse_rate("10m").unwrap(), 10_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("9600").unwrap(), 9600);
        for bad in [
            "0mbit", "0", "-5mbit", "5mbps", "fast", "", "nanmbit", "1e12gbit",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad} should be refused");
        }
        let msg = parse_rate("5mbps").unwrap_err().to_string();
        assert!(msg.contains("bytes/s"), "{msg}");
    }

    #[test]
    fn bytes_and_durations() {
        assert_eq!(parse_bytes("1500").unwrap(), 1500);
        assert_eq!(parse_bytes("64kb").unwrap(), 65536);
        assert_eq!(parse_bytes("250b").unwrap(), 250);
        assert!(parse_bytes("lots").is_err());
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_duration("20us").unwrap(), Duration::from_micros(20));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
