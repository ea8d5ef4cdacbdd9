//! `mgrp run --mode M -- CMD`: a fresh cgroup (v2) with a sockops program that puts every TCP
//! socket of the processes in it on congestion control M, without changing the command.

use crate::loader::{available_congestion_controls, preflight};
use crate::maps::from_bytes;
use crate::Error;
use libbpf_rs::{Link, MapCore, MapFlags, Object, ObjectBuilder};
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

const RUN_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/run.bpf.o"));

/// A cgroup whose TCP sockets get one congestion control. Dropping it detaches the program
/// and removes the cgroup (once its processes have exited).
pub struct CgroupRun {
    link: Option<Link>,
    obj: Object,
    dir: PathBuf,
    cc: String,
}

impl std::fmt::Debug for CgroupRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CgroupRun")
            .field("dir", &self.dir)
            .field("cc", &self.cc)
            .finish()
    }
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` on unified hosts, `/sys/fs/cgroup/unified` on
/// hybrid ones).
pub fn cgroup2_root() -> Result<PathBuf, Error> {
    let p = "/proc/self/mountinfo";
    let info = std::fs::read_to_string(p).map_err(Error::io(p))?;
    info.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mount = pre.split_whitespace().nth(4)?;
            (post.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount))
        })
        .ok_or_else(|| Error::Unsupported("no cgroup v2 hierarchy is mounted".into()))
}

impl CgroupRun {
    /// Make a cgroup for congestion control `cc`, which must already be registered (by the
    /// agent's transfer modes, or built into the kernel).
    pub fn new(cc: &str) -> Result<CgroupRun, Error> {
        if cc.is_empty()
            || cc.len() >= 16
            || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(Error::BadInput(format!(
                "{cc:?} is not a congestion control name"
            )));
        }
        preflight()?;
        if !available_congestion_controls()?.iter().any(|a| a == cc) {
            return Err(Error::Unsupported(format!(
                "congestion control {cc} is not registered: start the agent with transfer modes on (`[transfer]` in its config), or `mgrp control load`"
            )));
        }
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = cgroup2_root()?.join(format!(
            "mgrp-run-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        match Self::attach(&dir, cc) {
            Ok((obj, link)) => Ok(CgroupRun {
                link: Some(link),
                obj,
                dir,
                cc: cc.into(),
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    fn attach(dir: &Path, cc: &str) -> Result<(Object, Link), Error> {
        let mut open = ObjectBuilder::default()
            .open_memory(RUN_OBJECT)
            .map_err(Error::bpf("opening the sockops object"))?;
        let mut name = [0u8; 16];
        name[..cc.len()].copy_from_slice(cc.as_bytes());
        for mut m in open.maps_mut() {
            if m.name().to_string_lossy().ends_with(".data") {
                m.set_initial_value(&name)
                    .map_err(Error::bpf("setting the congestion control"))?;
            }
        }
        let obj = open
            .load()
            .map_err(Error::bpf("loading the sockops program (verifier)"))?;
        let fd =
            std::fs::File::open(dir).map_err(Error::io(format!("opening {}", dir.display())))?;
        let link = {
            let prog = obj
                .progs_mut()
                .find(|p| p.name() == "mgrp_run_sockops")
                .ok_or_else(|| {
                    Error::Unsupported("mgrp_run_sockops missing from the object".into())
                })?;
            use std::os::fd::AsRawFd;
            prog.attach_cgroup(fd.as_raw_fd())
                .map_err(Error::bpf("attaching to the cgroup"))?
        };
        Ok((obj, link))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn congestion_control(&self) -> &str {
        &self.cc
    }

    /// Make `cmd` start inside the cgroup (it moves itself there between fork and exec).
    pub fn prepare(&self, cmd: &mut std::process::Command) -> Result<(), Error> {
        let procs = CString::new(
            self.dir
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .map_err(|_| Error::BadInput("cgroup path has a NUL byte".into()))?;
        // SAFETY: the closure only makes async-signal-safe calls (open, write, close) on data
        // prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// (sockets set to the congestion control, sockets where setting it failed).
    pub fn counts(&self) -> Result<(u64, u64), Error> {
        let map = self
            .obj
            .maps()
            .find(|m| m.name() == "run_counts")
            .ok_or_else(|| Error::Unsupported("run_counts missing from the object".into()))?;
        let read = |i: u32| -> Result<u64, Error> {
            Ok(map
                .lookup(&i.to_ne_bytes(), MapFlags::ANY)
                .map_err(Error::bpf("reading the sockops counters"))?
                .and_then(|b| from_bytes::<u64>(&b))
                .unwrap_or(0))
        };
        Ok((read(0)?, read(1)?))
    }
}

impl Drop for CgroupRun {
    fn drop(&mut self) {
        self.link.take();
        // Fails while a process is still in it (e.g. a daemon the command left behind): then
        // the cgroup stays, empty of programs, and says so in its name.
        let _ = std::fs::remove_dir(&self.dir);
    }
}
