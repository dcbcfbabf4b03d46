//! [`FakeClock`]: a server's wall clock that a test moves forward while the server runs
//! (libfaketime, preloaded into the server process).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::HarnessError;

/// Where Debian's `libfaketime` package (installed by scripts/install-servers) and a source
/// build put the library.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The libfaketime shared library, if installed.
pub fn find_libfaketime() -> Option<PathBuf> {
    LIBFAKETIME.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// The wall clock of the servers started with [`ServerOptions::fake_clock`]: real time plus
/// an offset read from a file on every clock call (`LD_PRELOAD=libfaketime.so.1`,
/// `FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`), so [`FakeClock::jump`] moves it while
/// the server runs. Only the wall clock (`CLOCK_REALTIME`, `gettimeofday`: what key expiry
/// reads) moves; `CLOCK_MONOTONIC` is left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`).
///
/// Redis 8 and Valkey 9 built from source run under it; Debian's Redis 7 package hangs at
/// start-up (libfaketime's initialisation recurses through jemalloc's clock calls).
///
/// [`ServerOptions::fake_clock`]: crate::ServerOptions::fake_clock
#[derive(Debug, Clone)]
pub struct FakeClock {
    library: PathBuf,
    file: PathBuf,
    offset: Duration,
}

impl FakeClock {
    /// A clock at real time (offset 0) whose offset lives in `file` (created or overwritten).
    ///
    /// # Errors
    /// [`HarnessError::Unsupported`] without libfaketime; I/O errors writing `file`.
    pub fn new(file: impl Into<PathBuf>) -> Result<FakeClock, HarnessError> {
        let library = find_libfaketime().ok_or_else(|| HarnessError::Unsupported {
            binary: "libfaketime".into(),
            reason: "not installed (run scripts/install-servers: the faketime package)".into(),
        })?;
        let clock = FakeClock {
            library,
            file: file.into(),
            offset: Duration::ZERO,
        };
        clock.write()?;
        Ok(clock)
    }

    /// Moves the clock forward by `by`, at once, for every server using it (offsets add up).
    ///
    /// # Errors
    /// I/O errors writing the file.
    pub fn jump(&mut self, by: Duration) -> Result<(), HarnessError> {
        self.offset += by;
        self.write()
    }

    /// How far ahead of real time the clock is.
    pub fn offset(&self) -> Duration {
        self.offset
    }

    /// The file holding the offset.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The environment a process needs to run on this clock.
    pub(crate) fn env(&self) -> [(&'static str, &std::ffi::OsStr); 4] {
        [
            ("LD_PRELOAD", self.library.as_os_str()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.as_os_str()),
            ("FAKETIME_NO_CACHE", "1".as_ref()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".as_ref()),
        ]
    }

    /// Writes the offset (libfaketime's relative format, in seconds) atomically: a process
    /// reading it never sees half a line.
    fn write(&self) -> Result<(), HarnessError> {
        let tmp = self.file.with_extension("tmp");
        fs::write(&tmp, format!("+{:.3}\n", self.offset.as_secs_f64()))?;
        fs::rename(&tmp, &self.file)?;
        Ok(())
    }
}
