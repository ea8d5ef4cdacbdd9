//! Printing that never panics: when stdout goes away (`mgrp ... | head`), printing stops and
//! long jobs notice through [`closed`], so they end and tear down instead of dying mid-way.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Write one line to stdout, or note that stdout is closed.
pub fn line(args: std::fmt::Arguments) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{args}").and_then(|_| out.flush()).is_err() {
        CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Whether stdout has gone away.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// `println!` without the panic.
#[macro_export]
macro_rules! say {
    () => { $crate::output::line(format_args!("")) };
    ($($t:tt)*) => { $crate::output::line(format_args!($($t)*)) };
}

/// A bench's results: `NAME.json` and `NAME.md` into `dir` when given, then the JSON (with
/// `--json`) or the readable tables on stdout.
pub fn emit_bench(
    dir: Option<&std::path::Path>,
    name: &str,
    json: &str,
    text: &str,
    as_json: bool,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        for (ext, body) in [("json", json), ("md", text)] {
            let p = dir.join(format!("{name}.{ext}"));
            std::fs::write(&p, format!("{body}\n"))
                .with_context(|| format!("write {}", p.display()))?;
        }
    }
    if as_json {
        line(format_args!("{json}"));
    } else {
        line(format_args!("{}", text.trim_end()));
    }
    Ok(())
}
