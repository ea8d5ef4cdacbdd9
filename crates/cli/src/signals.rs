//! Ctrl-C and SIGTERM become a flag, so long operations stop and still tear down.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static HANGUP: AtomicBool = AtomicBool::new(false);

/// Ctrl-C, SIGTERM, or nobody left reading our output.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed) || crate::output::closed()
}

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Run `handler` (which only stores to an atomic) on each of `signals`.
fn install(handler: extern "C" fn(libc::c_int), signals: &[nix::sys::signal::Signal]) {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let act = SigAction::new(
        SigHandler::Handler(handler),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in signals {
        // SAFETY: the handlers only store to an atomic, which is async-signal-safe.
        let _ = unsafe { sigaction(*sig, &act) };
    }
}

/// Turn Ctrl-C and SIGTERM into a flag, so long operations stop and still tear down.
pub fn catch_signals() {
    use nix::sys::signal::Signal;
    install(on_signal, &[Signal::SIGINT, Signal::SIGTERM]);
}

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::Relaxed);
}

/// Turn SIGHUP into a flag (the agent reloads its configuration).
pub fn catch_hangup() {
    install(on_hangup, &[nix::sys::signal::Signal::SIGHUP]);
}

/// Was SIGHUP received since the last call?
pub fn take_hangup() -> bool {
    HANGUP.swap(false, Ordering::Relaxed)
}

fn progress(s: &str) {
    eprint!("{s}");
}

/// How the lab's experiments report progress (stderr) and learn to stop (Ctrl-C, SIGTERM).
/// Installs the handlers: without them a signal ended a bench before it tore its testbed down
/// (and a bench started in the background by a script ignored Ctrl-C altogether).
pub fn hooks() -> mgrp_lab::Hooks<'static> {
    catch_signals();
    mgrp_lab::Hooks {
        progress: &progress,
        stop: &interrupted,
    }
}
