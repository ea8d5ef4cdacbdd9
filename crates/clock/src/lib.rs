//! Monotonic time and waiting. All namespaces share CLOCK_MONOTONIC, so timestamps taken in
//! any of them (and by the probe engine later) are directly comparable.

pub mod cpu;
pub mod irq;
pub mod steal;

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Shrink this thread's timer slack to 1 ns: the default 50 us slack is most of the
/// 60-100 us that `nanosleep` oversleeps on this kind of VM.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK only changes the calling thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
}

/// Sleep until `deadline_ns` (CLOCK_MONOTONIC) with an absolute timer, so lateness does not
/// accumulate across calls.
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec; a null remainder is allowed with TIMER_ABSTIME. EINTR just
    // returns early, which callers tolerate (they re-check the clock).
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// Wait until `deadline_ns`: sleep until `spin_ns` before it, then spin. The spin tail absorbs
/// the sleep's wake-up lateness at the cost of that much CPU per wait.
pub fn wait_until(deadline_ns: u64, spin_ns: u64) {
    let now = now_ns();
    if deadline_ns > now + spin_ns {
        sleep_until(deadline_ns - spin_ns);
    }
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Nanoseconds on CLOCK_REALTIME: the clock kernel packet timestamps (SO_TIMESTAMPNS,
/// SO_TIMESTAMPING) use.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec we own; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
