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

/// While held, no CPU of the host enters an idle state deeper than polling (PM QoS: a CPU
/// latency request of 0 µs through `/dev/cpu_dma_latency`); dropping it (or the process ending)
/// lifts the request. For an emulated link on a VM: a vCPU that halts in idle is descheduled by
/// the hypervisor, and the shaper's timer on it fires late by up to milliseconds. On a VM of
/// this kind (cpuidle `haltpoll`), 50-probe streams at half of an idle 100 Mbit/s HTB link read
/// delay rises of 0.4–1.9 ms at p90 (17.7 ms at worst) with CPUs free to halt, 2–5 µs held
/// awake; the shaper drained 90.2 Mbit/s against 94.3.
pub struct AwakeCpus {
    _request: std::fs::File,
}

/// Hold every CPU awake (see [`AwakeCpus`]); `None` where the request cannot be made (not root,
/// no PM QoS device).
pub fn hold_cpus_awake() -> Option<AwakeCpus> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .ok()?;
    f.write_all(&0i32.to_ne_bytes()).ok()?;
    Some(AwakeCpus { _request: f })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's aggregate CPU latency request, as the PM QoS device reads it (µs).
    fn latency_request() -> Option<i32> {
        use std::io::Read;
        let mut b = [0u8; 4];
        std::fs::File::open("/dev/cpu_dma_latency")
            .and_then(|mut f| f.read_exact(&mut b))
            .ok()?;
        Some(i32::from_ne_bytes(b))
    }

    #[test]
    fn holding_cpus_awake_requests_zero_latency_until_dropped() {
        // Needs root and the PM QoS device (the testbed's own requirements); say so otherwise.
        let Some(before) = latency_request() else {
            eprintln!("skipped: /dev/cpu_dma_latency is not readable here (not root?)");
            return;
        };
        let held = hold_cpus_awake().expect("root may write a PM QoS request");
        assert_eq!(latency_request(), Some(0));
        drop(held);
        // Another process (a parallel test's testbed) may hold its own request: the value
        // returns to what it was, or to something above 0 when nobody else holds one.
        let after = latency_request().unwrap();
        assert!(
            after == before || after > 0,
            "before {before}, after {after}"
        );
    }
}
