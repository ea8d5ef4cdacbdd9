//! Network namespaces and the iproute2 commands that configure them.

use crate::Error;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where `ip netns` keeps its named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Enter the named network namespace on the calling thread only. Sockets the thread opens
/// afterwards live in that namespace, even if the thread moves on.
pub fn enter(ns: &str) -> Result<(), Error> {
    let path = Path::new(NETNS_DIR).join(ns);
    let f = File::open(&path).map_err(|e| Error::Setup(format!("open {}: {e}", path.display())))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| Error::Setup(format!("setns into {ns}: {e}")))
}

/// Run `f` on a new named thread inside namespace `ns`.
pub fn spawn_in<T, F>(
    ns: &str,
    name: &str,
    f: F,
) -> Result<std::thread::JoinHandle<Result<T, Error>>, Error>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Error> + Send + 'static,
{
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            enter(&ns)?;
            f()
        })
        .map_err(|e| Error::Setup(format!("spawn thread {name}: {e}")))
}

/// Whether a namespace of that name exists.
pub fn exists(ns: &str) -> bool {
    Path::new(NETNS_DIR).join(ns).exists()
}

/// Names of all named namespaces.
pub fn list() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Find a system tool, also in the sbin directories a non-root PATH lacks.
pub fn tool(name: &str) -> Result<PathBuf, Error> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found.ok_or_else(|| {
        let pkg = if name == "ethtool" {
            "ethtool"
        } else {
            "iproute2"
        };
        Error::MissingTool(format!(
            "`{name}` not found; install it: apt-get install {pkg}"
        ))
    })
}

/// Run a command to completion; a failure carries the command line and its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    run_with_input(program, args, None)
}

/// Like [`run`], feeding `input` on stdin (for `ip -batch -`).
pub fn run_with_input(program: &str, args: &[&str], input: Option<&str>) -> Result<String, Error> {
    let exe = tool(program)?;
    let mut child = Command::new(&exe)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Setup(format!("start {program}: {e}")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| Error::Setup(format!("write to {program}: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Setup(format!("wait for {program}: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut line = format!("{program} {}", args.join(" "));
        if let Some(text) = input {
            line.push_str(&format!(
                " <<< {:?}",
                text.lines().take(8).collect::<Vec<_>>()
            ));
        }
        return Err(Error::Setup(format!(
            "`{line}` failed ({}): {}",
            out.status,
            stderr.trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run an `ip` batch script inside namespace `ns`.
pub fn ip_batch(ns: &str, script: &str) -> Result<(), Error> {
    run_with_input("ip", &["-n", ns, "-batch", "-"], Some(script)).map(drop)
}

/// Run a shell snippet inside namespace `ns` (for sysctl and ethtool, which have no `-n`).
pub fn sh_in(ns: &str, script: &str) -> Result<(), Error> {
    run("ip", &["netns", "exec", ns, "sh", "-ec", script]).map(drop)
}

/// Check for the capabilities namespaces need (CAP_SYS_ADMIN to create them, CAP_NET_ADMIN
/// to configure links and qdiscs), from the effective set in /proc/self/status.
pub fn check_privileges() -> Result<(), Error> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| eff & (1 << cap) != 0;
    if !(has(CAP_SYS_ADMIN) && has(CAP_NET_ADMIN)) {
        return Err(Error::Privilege(
            "the testbed creates network namespaces, which needs root (CAP_SYS_ADMIN and \
             CAP_NET_ADMIN); run it with sudo"
                .into(),
        ));
    }
    Ok(())
}
