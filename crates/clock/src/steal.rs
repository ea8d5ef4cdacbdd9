//! CPU time the hypervisor took from this VM ("steal" in `/proc/stat`). While a host holds a
//! vCPU off, nothing on it runs: a pacer misses its gaps, a receiver stamps a batch of packets
//! at once, a shaper's timer fires late and drains less. Timing on such a machine says more
//! about the host than the path, so measurements (and the tests that judge them) read steal
//! around what they time.
//!
//! `/proc/stat` counts steal per CPU in USER_HZ ticks (10 ms on Linux), so a window sees it to
//! within a tick.

/// Ticks per second of `/proc/stat` (USER_HZ; 100 on every Linux ABI this runs on).
const USER_HZ: f64 = 100.0;

/// Per-CPU steal counters at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StealSnapshot {
    at_ns: u64,
    ticks: Vec<u64>,
}

/// Steal over a window between two snapshots.
#[derive(Debug, Clone, PartialEq)]
pub struct Steal {
    pub window_s: f64,
    /// Seconds stolen from each CPU, in `cpuN` order.
    pub stolen_s: Vec<f64>,
}

impl StealSnapshot {
    /// Read `/proc/stat` now; `None` where it is unreadable or has no steal column (not Linux,
    /// a kernel before 2.6.11, a sandbox without procfs).
    pub fn take() -> Option<Self> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        Some(Self {
            at_ns: crate::now_ns(),
            ticks: parse_per_cpu_steal(&text)?,
        })
    }

    /// Steal from this snapshot to `later`. CPUs that went away or counters that went back
    /// (a CPU unplugged and replugged) count as nothing stolen.
    pub fn until(&self, later: &StealSnapshot) -> Steal {
        let stolen_s = self
            .ticks
            .iter()
            .zip(&later.ticks)
            .map(|(a, b)| b.saturating_sub(*a) as f64 / USER_HZ)
            .collect();
        Steal {
            window_s: later.at_ns.saturating_sub(self.at_ns) as f64 / 1e9,
            stolen_s,
        }
    }

    /// Steal from this snapshot to now (`None` if `/proc/stat` cannot be read any more).
    pub fn elapsed(&self) -> Option<Steal> {
        Some(self.until(&Self::take()?))
    }
}

impl Steal {
    /// The most any one CPU lost, in seconds.
    pub fn max_cpu_s(&self) -> f64 {
        self.stolen_s.iter().copied().fold(0.0, f64::max)
    }

    /// The most any one CPU lost, as a share of the window (0 for an empty window).
    pub fn max_share(&self) -> f64 {
        if self.window_s > 0.0 {
            self.max_cpu_s() / self.window_s
        } else {
            0.0
        }
    }

    /// All CPUs together, in seconds.
    pub fn total_s(&self) -> f64 {
        self.stolen_s.iter().sum()
    }

    /// The window was disturbed: some CPU lost at least `min_s` seconds and at least `share`
    /// of the window. The absolute floor keeps one tick (which a quiet host also accrues now
    /// and then) from counting; the share keeps a long window's background steal from counting.
    pub fn disturbed(&self, min_s: f64, share: f64) -> bool {
        let worst = self.max_cpu_s();
        worst >= min_s && worst >= share * self.window_s
    }
}

impl std::fmt::Display for Steal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} ms stolen over {:.1} s (per CPU:",
            self.total_s() * 1e3,
            self.window_s
        )?;
        for s in &self.stolen_s {
            write!(f, " {:.0}", s * 1e3)?;
        }
        write!(f, " ms)")
    }
}

/// The steal column (the 8th value) of every `cpuN` line of `/proc/stat`, in CPU order; `None`
/// if there are no per-CPU lines or one lacks the column.
pub fn parse_per_cpu_steal(text: &str) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else { continue };
        // "cpu" alone is the sum; "cpu0", "cpu1", ... are the CPUs.
        if !name.starts_with("cpu") || name.len() == 3 {
            continue;
        }
        out.push(fields.nth(7)?.parse().ok()?);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  388361 618580 101497 1549584 11986 0 42477 39400 0 0\n\
        cpu0 180165 304238 57838 767647 2595 0 36694 24796 0 0\n\
        cpu1 208196 314341 43659 781937 9390 0 5783 14604 0 0\n\
        intr 123 4 5\nctxt 99\n";

    #[test]
    fn per_cpu_steal_is_read_and_compared() {
        assert_eq!(parse_per_cpu_steal(STAT), Some(vec![24796, 14604]));
        assert_eq!(parse_per_cpu_steal("cpu0 1 2 3\n"), None, "no steal column");
        assert_eq!(parse_per_cpu_steal("intr 1\n"), None, "no CPUs");
        assert_eq!(parse_per_cpu_steal("cpu0 1 2 3 4 5 6 7 x\n"), None);

        let a = StealSnapshot {
            at_ns: 0,
            ticks: vec![24796, 14604],
        };
        let b = StealSnapshot {
            at_ns: 10_000_000_000,
            ticks: vec![24799, 14600],
        };
        let s = a.until(&b);
        assert_eq!(
            s.stolen_s,
            vec![0.03, 0.0],
            "a counter that went back is nothing"
        );
        assert_eq!(s.window_s, 10.0);
        assert!((s.total_s() - 0.03).abs() < 1e-12);
        assert!((s.max_share() - 0.003).abs() < 1e-12);
        let empty = Steal {
            window_s: 0.0,
            stolen_s: vec![0.01],
        };
        assert_eq!(empty.max_share(), 0.0, "no window, no share");
        // 30 ms in 10 s: over a 20 ms floor but under 0.5% of the window.
        assert!(s.disturbed(0.02, 0.002));
        assert!(!s.disturbed(0.02, 0.005));
        assert!(!s.disturbed(0.05, 0.0));
        assert_eq!(s.to_string(), "30 ms stolen over 10.0 s (per CPU: 30 0 ms)");
    }

    #[test]
    fn this_machine_reports_steal_or_says_it_cannot() {
        // Where /proc/stat exists (every Linux CI), it has the column and a window reads >= 0.
        if let Some(a) = StealSnapshot::take() {
            let s = a.elapsed().unwrap();
            assert!(!s.stolen_s.is_empty() && s.window_s >= 0.0, "{s:?}");
        }
    }
}
