//! Owner records: who holds a lock (host, pid, program, an optional label), stored in the lock's
//! value itself so that reading the lock tells who took it, at no extra round trip.
//!
//! **Encoding.** A lock taken with [`LockOptions::owner`](crate::LockOptions::owner) stores
//! `<random token>|<host>|<pid>|<program>|<label>` instead of the bare token, each field with
//! `%`, `|` and whitespace percent-encoded (`%25`, `%7C`, `%20`, ...). The client composed the whole value and keeps it as its
//! [`LockToken`](crate::LockToken), so every token-checked release, extend, `DELEX IFEQ`, Lua
//! comparison, etcd compare and PostgreSQL token column compares it whole, unchanged. The random
//! part is still the secret (redacted in logs); the owner part is public: anyone who can read
//! the key can read it, and it is what the holder *claimed*, not something the server checked.

use std::fmt;

use crate::core::error::{Error, Result};

/// Longest owner label, in bytes.
pub const MAX_OWNER_LABEL_LEN: usize = 256;
/// Longest host or program name kept in an owner record, in bytes (longer ones are cut, at a
/// character boundary: they come from the system, not from the caller).
pub const MAX_OWNER_NAME_LEN: usize = 255;

/// Separates the random token from the owner fields, and the fields from each other.
const SEPARATOR: char = '|';

/// Who holds a lock, as the holder described itself: host, process id, program and an optional
/// user label. Shown by [`LockState::owner`](crate::LockState::owner), `leasehold inspect` and
/// `leasehold ls`.
///
/// ```
/// let owner = leasehold::Owner::this_process().label("nightly backup").unwrap();
/// assert_eq!(owner.pid(), std::process::id());
/// assert_eq!(owner.user_label(), Some("nightly backup"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    host: String,
    pid: u32,
    program: String,
    label: Option<String>,
}

impl Owner {
    /// This process: the machine's host name, [`std::process::id`], and the executable's file
    /// name; no label.
    pub fn this_process() -> Self {
        let program = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        Owner {
            host: clean_name(&host_name()),
            pid: std::process::id(),
            program: clean_name(&program),
            label: None,
        }
    }

    /// An owner record from its parts (for a process describing another one, or tests).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`what: "owner"`) if `host` or `program` is longer than
    /// [`MAX_OWNER_NAME_LEN`] bytes or has a control character.
    pub fn new(host: impl Into<String>, pid: u32, program: impl Into<String>) -> Result<Self> {
        let (host, program) = (host.into(), program.into());
        check_text("owner", "host", &host, MAX_OWNER_NAME_LEN)?;
        check_text("owner", "program", &program, MAX_OWNER_NAME_LEN)?;
        Ok(Owner {
            host,
            pid,
            program,
            label: None,
        })
    }

    /// The same owner with a user label (what the holder is doing: `"nightly backup"`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`what: "owner"`) if the label is empty, longer than
    /// [`MAX_OWNER_LABEL_LEN`] bytes, or has a control character (it is shown in terminals).
    pub fn label(mut self, label: impl Into<String>) -> Result<Self> {
        let label = label.into();
        if label.is_empty() {
            return Err(Error::invalid("owner", "an owner label cannot be empty"));
        }
        check_text("owner", "label", &label, MAX_OWNER_LABEL_LEN)?;
        self.label = Some(label);
        Ok(self)
    }

    /// The host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The program's name.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The user label, if any.
    pub fn user_label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The value a lock stores for `token` held by this owner.
    pub(crate) fn stored_value(&self, token: &str) -> String {
        let mut value = String::with_capacity(token.len() + 64);
        value.push_str(token);
        for field in [
            self.host.as_str(),
            &self.pid.to_string(),
            &self.program,
            self.label.as_deref().unwrap_or(""),
        ] {
            value.push(SEPARATOR);
            escape_into(field, &mut value);
        }
        value
    }

    /// The owner recorded in a lock's stored value, if it has one (a bare token has none; so
    /// has a value that is not in the format above).
    pub fn from_stored_value(value: &str) -> Option<Self> {
        let mut fields = value.split(SEPARATOR);
        let token = fields.next()?;
        let (host, pid, program, label) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        if token.is_empty() || fields.next().is_some() {
            return None;
        }
        let label = unescape(label)?;
        Some(Owner {
            host: unescape(host)?,
            pid: pid.parse().ok()?,
            program: unescape(program)?,
            label: (!label.is_empty()).then_some(label),
        })
    }
}

impl fmt::Display for Owner {
    /// `program[pid]@host`, then ` "label"` if there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]@{}", self.program, self.pid, self.host)?;
        if let Some(label) = &self.label {
            write!(f, " {label:?}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({self})")
    }
}

/// Checks free text shown in terminals and logs (`what` names the argument in the error):
/// at most `max` bytes, no control characters.
pub(crate) fn check_text(what: &'static str, field: &str, text: &str, max: usize) -> Result<()> {
    if text.len() > max {
        return Err(Error::invalid(
            what,
            format!(
                "the {field} is {} bytes, more than the limit of {max}",
                text.len()
            ),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(Error::invalid(
            what,
            format!("the {field} {text:?} has a control character"),
        ));
    }
    Ok(())
}

/// A name from the system, made acceptable: control characters dropped, cut to
/// [`MAX_OWNER_NAME_LEN`] bytes at a character boundary.
fn clean_name(name: &str) -> String {
    let mut clean = String::new();
    for c in name.trim().chars().filter(|c| !c.is_control()) {
        if clean.len() + c.len_utf8() > MAX_OWNER_NAME_LEN {
            break;
        }
        clean.push(c);
    }
    clean
}

/// The machine's host name: the kernel's on Linux (no dependency for one read), else the
/// environment's, else empty.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default()
}

/// Writes `field` with `%`, the separator and whitespace percent-encoded (byte by byte), so the
/// stored value has no separator inside a field and no whitespace at all (the file backend's
/// record is whitespace-separated).
fn escape_into(field: &str, out: &mut String) {
    for c in field.chars() {
        if c == '%' || c == SEPARATOR || c.is_whitespace() {
            let mut bytes = [0u8; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
}

fn unescape(field: &str) -> Option<String> {
    let mut out = Vec::with_capacity(field.len());
    let mut bytes = field.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_round_trip_through_the_stored_value() {
        let owner = Owner::new("web|1", 42, "100%")
            .unwrap()
            .label("a | b %7C\u{a0}é")
            .unwrap();
        let value = owner.stored_value("0123abcd");
        assert!(value.starts_with("0123abcd|"), "{value}");
        assert_eq!(value.matches('|').count(), 4, "{value}");
        assert!(!value.contains(char::is_whitespace), "{value}");
        assert_eq!(Owner::from_stored_value(&value), Some(owner));
        let bare = Owner::this_process();
        assert_eq!(bare.pid(), std::process::id());
        assert_eq!(
            Owner::from_stored_value(&bare.stored_value("t")),
            Some(bare)
        );
    }

    #[test]
    fn values_without_an_owner_have_none() {
        for value in [
            "0123abcd",
            "",
            "|h|1|p|",
            "t|h|x|p|",
            "t|h|1|p",
            "t|h|1|p|l|x",
            "t|h%|1|p|",
            "t|h%zz|1|p|",
            "t|h%ff|1|p|",
        ] {
            assert_eq!(Owner::from_stored_value(value), None, "{value:?}");
        }
    }

    #[test]
    fn bad_labels_and_names_are_refused() {
        let me = Owner::this_process();
        for label in [
            String::new(),
            "x".repeat(MAX_OWNER_LABEL_LEN + 1),
            "a\nb".into(),
            "\u{1b}[31m".into(),
        ] {
            let err = me.clone().label(label.clone()).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { what: "owner", .. }),
                "{label:?}: {err}"
            );
        }
        assert!(me.clone().label("x".repeat(MAX_OWNER_LABEL_LEN)).is_ok());
        assert!(Owner::new("h\t", 1, "p").is_err());
        assert!(Owner::new("h", 1, "p".repeat(MAX_OWNER_NAME_LEN + 1)).is_err());
        assert_eq!(clean_name(" a\u{7}b\n"), "ab");
        assert_eq!(clean_name(&"é".repeat(200)).len(), 254);
    }
}
