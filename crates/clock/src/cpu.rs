//! Which CPU the pacer owns: the last one a thread may run on. The pacer pins itself there and
//! spins through its trains at real-time priority; everything else that must keep time (the
//! agent's other threads, the testbed's generators) keeps off it.

/// The CPUs this thread may run on (as a set and as a list), if the kernel says.
fn allowed_cpus() -> Option<(libc::cpu_set_t, Vec<usize>)> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity and CPU_ISSET only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let list = (0..libc::CPU_SETSIZE as usize)
            .filter(|c| libc::CPU_ISSET(*c, &set))
            .collect();
        Some((set, list))
    }
}

fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: sched_setaffinity on the calling thread with a valid set.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
}

/// Keep the calling thread off the pacer's CPU (the last allowed one), so the pacer's core
/// stays quiet: the agent's receive and control threads call this, and so do the testbed's
/// generators, delay line and sampler — a thread left there is starved for a whole train by the
/// real-time pacer spinning through it (cross traffic that paused exactly during the probe
/// trains made SLoPS read the capacity on an idle-looking path).
pub fn avoid_pacer_cpu() {
    if let Some((mut set, cpus)) = allowed_cpus().filter(|(_, c)| c.len() >= 2) {
        // SAFETY: CPU_CLR writes within the set.
        unsafe { libc::CPU_CLR(*cpus.last().expect("≥ 2 CPUs"), &mut set) };
        set_affinity(&set);
    }
}

/// The CPU the pacer pins itself to: the last one this thread may run on, when it may run on
/// two or more (with one, there is nothing to keep off it).
pub fn pacer_cpu() -> Option<usize> {
    allowed_cpus()
        .filter(|(_, c)| c.len() >= 2)
        .and_then(|(_, c)| c.last().copied())
}

/// Pin the pacer to the last CPU it may run on, so a testbed (or an operator) can steer packet
/// processing to the others and keep the pacer's core quiet.
pub fn pin_to_pacer_cpu() {
    if let Some((_, cpus)) = allowed_cpus().filter(|(_, c)| c.len() >= 2) {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(*cpus.last().expect("≥ 2 CPUs"), &mut one) };
        set_affinity(&one);
    }
}

/// Ask for real-time (`SCHED_FIFO`) scheduling of the calling thread at `priority` (1–99).
/// Needs CAP_SYS_NICE; without it the thread runs on under the normal scheduler (returns false).
/// For threads whose lateness is the measurement's error, e.g. a testbed delay line: under the
/// normal scheduler a busy core delays them by whole time slices (milliseconds).
pub fn try_realtime(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}
