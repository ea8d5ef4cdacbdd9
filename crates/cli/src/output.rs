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
