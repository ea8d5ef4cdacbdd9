//! Builds the eBPF congestion controls when the build host can (clang, bpftool and the kernel's
//! BTF), and the rules' host library for the tests always. Without the BPF toolchain the crate
//! still builds: `cfg(mgrp_no_bpf)` makes loading say why it cannot.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAMS: &[&str] = &["mgrp_cc", "run", "mpat"];
const BTF: &str = "/sys/kernel/btf/vmlinux";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(mgrp_no_bpf)");
    for f in [
        "rules.h",
        "maps.h",
        "rules_host.c",
        "mgrp_cc.bpf.c",
        "run.bpf.c",
        "mpat.bpf.c",
        "mpat_maps.h",
        "reset.h",
    ] {
        println!("cargo:rerun-if-changed=src/bpf/{f}");
    }
    println!("cargo:rerun-if-env-changed=MGRP_NO_BPF");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    cc::Build::new()
        .file("src/bpf/rules_host.c")
        .warnings(true)
        .compile("mgrp_rules_host");

    match build_bpf(&out) {
        Ok(()) => {}
        Err(why) => {
            println!("cargo:warning=mgrp-control: eBPF programs not built ({why}); loading them will fail with that reason");
            println!("cargo:rustc-cfg=mgrp_no_bpf");
            std::fs::write(out.join("no_bpf_reason.txt"), why).expect("write OUT_DIR");
            for p in PROGRAMS {
                std::fs::write(out.join(format!("{p}.bpf.o")), b"").expect("write OUT_DIR");
            }
        }
    }
}

fn build_bpf(out: &Path) -> Result<(), String> {
    if env::var_os("MGRP_NO_BPF").is_some() {
        return Err("MGRP_NO_BPF is set".into());
    }
    if !Path::new(BTF).exists() {
        return Err(format!("{BTF} is missing: the kernel has no BTF"));
    }
    which("clang")?;
    let bpftool = which("bpftool")?;
    let vmlinux = out.join("vmlinux.h");
    let dump = Command::new(&bpftool)
        .args(["btf", "dump", "file", BTF, "format", "c"])
        .output()
        .map_err(|e| format!("bpftool: {e}"))?;
    if !dump.status.success() {
        return Err(format!(
            "bpftool btf dump failed: {}",
            String::from_utf8_lossy(&dump.stderr).trim()
        ));
    }
    std::fs::write(&vmlinux, &dump.stdout).map_err(|e| e.to_string())?;
    let src = PathBuf::from("src/bpf");
    for p in PROGRAMS {
        libbpf_cargo::SkeletonBuilder::new()
            .source(src.join(format!("{p}.bpf.c")))
            .obj(out.join(format!("{p}.bpf.o")))
            .clang_args([
                "-I".as_ref(),
                out.as_os_str(),
                "-I".as_ref(),
                src.as_os_str(),
                "-g".as_ref(),
                "-O2".as_ref(),
                "-Wall".as_ref(),
            ])
            .build()
            .map_err(|e| format!("compiling {p}.bpf.c: {e:#}"))?;
    }
    Ok(())
}

/// Where `tool` is: on PATH, or in the sbin directories a non-root PATH leaves out.
fn which(tool: &str) -> Result<PathBuf, String> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{tool} not found (scripts/install-deps.sh installs it)"))
}
