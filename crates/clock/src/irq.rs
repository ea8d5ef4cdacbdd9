//! Interrupts and the pacer's CPU. A device interrupt that lands on the pacer's CPU stalls a
//! train for tens of microseconds (here the disk's virtio interrupt did). Where the agent may
//! (root), it moves every movable interrupt off that CPU while it runs and puts each back as it
//! was when it stops. Opt-in (`mgrp agent --steer-irqs`): interrupt affinity is the whole host's,
//! and a process killed outright cannot put it back.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the kernel lists interrupt affinities.
pub const PROC_IRQ: &str = "/proc/irq";

/// Parse a kernel CPU list ("0-3,6"); `None` when it is not one.
pub fn parse_cpu_list(s: &str) -> Option<BTreeSet<usize>> {
    let mut set = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let c = part.parse().ok()?;
                (c, c)
            }
        };
        if a > b || b >= 4096 {
            return None;
        }
        set.extend(a..=b);
    }
    Some(set)
}

/// Format a CPU set as a kernel CPU list.
pub fn format_cpu_list(set: &BTreeSet<usize>) -> String {
    let v: Vec<usize> = set.iter().copied().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn irqs(root: &Path) -> Vec<(u32, PathBuf, String)> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v: Vec<(u32, PathBuf, String)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let irq: u32 = e.file_name().to_str()?.parse().ok()?;
            let file = e.path().join("smp_affinity_list");
            let list = std::fs::read_to_string(&file).ok()?;
            Some((irq, file, list.trim().to_string()))
        })
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

/// Interrupts whose affinity lets them land on `cpu` and on some other CPU too (the ones that
/// could be moved off it).
pub fn movable_onto(root: &Path, cpu: usize) -> Vec<u32> {
    irqs(root)
        .into_iter()
        .filter(|(_, _, l)| parse_cpu_list(l).is_some_and(|s| s.contains(&cpu) && s.len() > 1))
        .map(|(irq, _, _)| irq)
        .collect()
}

/// Interrupts moved off a CPU; dropping it puts each back as it was.
#[derive(Debug)]
pub struct IrqSteering {
    pub cpu: usize,
    moved: Vec<(u32, PathBuf, String)>,
    /// Interrupts the kernel refused to move (per-CPU timers, managed queues).
    pub refused: Vec<u32>,
}

impl IrqSteering {
    pub fn moved(&self) -> Vec<u32> {
        self.moved.iter().map(|m| m.0).collect()
    }
}

/// Move every interrupt that may land on `cpu` and elsewhere off `cpu`.
pub fn steer_off(root: &Path, cpu: usize) -> IrqSteering {
    let mut s = IrqSteering {
        cpu,
        moved: Vec::new(),
        refused: Vec::new(),
    };
    for (irq, file, list) in irqs(root) {
        let Some(mut set) = parse_cpu_list(&list) else {
            continue;
        };
        if !set.contains(&cpu) || set.len() < 2 {
            continue;
        }
        set.remove(&cpu);
        match std::fs::write(&file, format_cpu_list(&set)) {
            Ok(()) => s.moved.push((irq, file, list)),
            Err(_) => s.refused.push(irq),
        }
    }
    s
}

impl Drop for IrqSteering {
    fn drop(&mut self) {
        for (_, file, list) in self.moved.drain(..) {
            // Best effort: an interrupt that went away with its device has nothing to restore.
            let _ = std::fs::write(&file, list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        let s = parse_cpu_list("0-3,6,8-9\n").unwrap();
        assert_eq!(
            s.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 6, 8, 9]
        );
        assert_eq!(format_cpu_list(&s), "0-3,6,8-9");
        assert_eq!(parse_cpu_list("1").unwrap().len(), 1);
        for bad in ["x", "3-1", "0-99999", "1,,a"] {
            assert!(parse_cpu_list(bad).is_none(), "{bad}");
        }
    }

    /// On a directory laid out like /proc/irq: movable interrupts leave the CPU, pinned ones
    /// stay, and dropping the guard puts every list back as it was.
    #[test]
    fn steering_moves_and_restores() {
        let root = std::env::temp_dir().join(format!("mgrp-irq-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (irq, list) in [(24, "0-1"), (25, "1"), (26, "0"), (27, "0-3")] {
            std::fs::create_dir_all(root.join(irq.to_string())).unwrap();
            std::fs::write(root.join(format!("{irq}/smp_affinity_list")), list).unwrap();
        }
        std::fs::create_dir_all(root.join("default_smp_affinity")).unwrap();
        let read = |irq: u32| {
            std::fs::read_to_string(root.join(format!("{irq}/smp_affinity_list"))).unwrap()
        };
        assert_eq!(movable_onto(&root, 1), vec![24, 27]);
        {
            let s = steer_off(&root, 1);
            assert_eq!(s.moved(), vec![24, 27]);
            assert_eq!(
                (read(24), read(25), read(27)),
                ("0".into(), "1".into(), "0,2-3".into())
            );
            assert!(movable_onto(&root, 1).is_empty());
        }
        assert_eq!((read(24), read(27)), ("0-1".into(), "0-3".into()));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
