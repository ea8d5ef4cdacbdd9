//! Embed the dashboard's files (everything under `dashboard/` except its browser test) into the
//! binary, so the agent serves the page offline.

use std::path::{Path, PathBuf};

fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        let rel = p
            .strip_prefix(root)
            .unwrap_or(&p)
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "test" || rel.starts_with('.') || rel.contains("node_modules") {
            continue;
        }
        if p.is_dir() {
            walk(&p, root, out);
        } else {
            out.push((rel, p));
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    let mut code = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (rel, p) in &files {
        println!("cargo:rerun-if-changed={}", p.display());
        code.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            p.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("dashboard.rs");
    std::fs::write(out, code).expect("write dashboard.rs");
}
