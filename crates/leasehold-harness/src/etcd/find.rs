//! Finding the `etcd` binary, and the test entry points that skip (or, for the full matrix,
//! fail) without it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::HarnessError;

use super::cluster::EtcdCluster;
use super::member::Etcd;

/// Where Debian's package installs the server, if it is not on `PATH`.
const SYSTEM_ETCD: &str = "/usr/bin/etcd";

/// The `etcd` server binary, if installed: the first `etcd` on `PATH`, else `/usr/bin/etcd`.
pub fn find_etcd() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("etcd"))
        .chain([PathBuf::from(SYSTEM_ETCD)])
        .find(|path| is_executable(path))
}

/// An [`Etcd`] for a test, or `None` (after printing `skipping: ...`) if etcd is not
/// installed.
///
/// # Panics
/// If etcd is not installed and [`require_full_matrix`](crate::require_full_matrix) is true
/// (`LEASEHOLD_REQUIRE_MATRIX=1` or `CI`), or if it is installed but does not start.
#[track_caller]
pub fn etcd_for_test() -> Option<Etcd> {
    if !etcd_installed_for_test() {
        return None;
    }
    match Etcd::start() {
        Ok(etcd) => Some(etcd),
        Err(e) => panic!("cannot start etcd: {e}"),
    }
}

/// Like [`etcd_for_test`], a member with a TLS client port that asks for client certificates
/// (see [`Etcd::start_tls`]).
///
/// # Panics
/// Like [`etcd_for_test`].
#[track_caller]
pub fn etcd_tls_for_test(files: &crate::TlsFiles) -> Option<Etcd> {
    if !etcd_installed_for_test() {
        return None;
    }
    match Etcd::start_tls(files) {
        Ok(etcd) => Some(etcd),
        Err(e) => panic!("cannot start etcd with TLS: {e}"),
    }
}

/// An [`EtcdCluster`] of `members` members for a test, or `None` (after printing
/// `skipping: ...`) if etcd is not installed.
///
/// # Panics
/// Like [`etcd_for_test`].
#[track_caller]
pub fn etcd_cluster_for_test(members: usize) -> Option<EtcdCluster> {
    if !etcd_installed_for_test() {
        return None;
    }
    match EtcdCluster::start(members) {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("cannot start an etcd cluster of {members}: {e}"),
    }
}

#[track_caller]
fn etcd_installed_for_test() -> bool {
    if find_etcd().is_some() {
        return true;
    }
    if crate::require_full_matrix() {
        panic!(
            "no etcd server found, and LEASEHOLD_REQUIRE_MATRIX/CI demands the full matrix \
             (run scripts/install-servers)"
        );
    }
    eprintln!("skipping: no etcd server found (run scripts/install-servers)");
    false
}

pub(super) fn require_etcd() -> Result<PathBuf, HarnessError> {
    find_etcd().ok_or_else(|| {
        HarnessError::NotInstalled(format!(
            "no etcd server binary found on PATH or at {SYSTEM_ETCD}"
        ))
    })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
