//! The build's identity, `DRYRUN_BUILD_ID`: a hash of every source the
//! binaries are built from. The `dryrun-stub` program compares its own with
//! the one the rehearsal's stub table carries, so a stub program left from
//! another build hands its calls to the `dryrun` binary instead of deciding
//! them by other rules. Both binaries of one build share it by
//! construction; it only has to differ between builds of different sources.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => collect(&p, out),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
}

fn main() {
    let mut files = Vec::new();
    for top in ["src", "policies", "sandbox-images"] {
        println!("cargo:rerun-if-changed={top}");
        collect(Path::new(top), &mut files);
    }
    for f in ["Cargo.toml", "Cargo.lock", "build.rs"] {
        println!("cargo:rerun-if-changed={f}");
        files.push(PathBuf::from(f));
    }
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in &files {
        f.hash(&mut h);
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    println!("cargo:rustc-env=DRYRUN_BUILD_ID={:016x}", h.finish());
}
