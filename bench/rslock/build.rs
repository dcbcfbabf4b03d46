// Bakes the versions that Cargo resolved (from this project's Cargo.lock) into the binary, so the
// JSON reports the library actually built, not the requirement written in Cargo.toml.
use std::{env, fs, path::Path};

fn locked_version(lock: &str, name: &str) -> String {
    let wanted = format!("name = \"{name}\"");
    let mut inside = false;
    for line in lock.lines().map(str::trim) {
        if line == "[[package]]" {
            inside = false;
        } else if line == wanted {
            inside = true;
        } else if inside {
            if let Some(v) = line.strip_prefix("version = \"") {
                return v.trim_end_matches('"').to_string();
            }
        }
    }
    "unknown".to_string()
}

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap();
    let path = Path::new(&dir).join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", path.display());
    println!("cargo:rerun-if-changed=build.rs");
    let lock = fs::read_to_string(&path).unwrap_or_default();
    println!(
        "cargo:rustc-env=RSLOCK_VERSION={}",
        locked_version(&lock, "rslock")
    );
    println!(
        "cargo:rustc-env=REDIS_RS_VERSION={}",
        locked_version(&lock, "redis")
    );
}
