//! The exception hierarchy, one class per `leasehold::Error` variant, and the conversion.
//!
//! The classes are made at import with `type(name, bases, namespace)` so that each can also
//! derive from the built-in exception a Python user would catch (`NotAcquired` is a
//! `TimeoutError`, `InvalidArgument` a `ValueError`, ...), which PyO3's `create_exception!`
//! (one base) cannot express.

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use leasehold::Error;

/// `(class name, built-in bases after LeaseholdError, docstring)`, in the order of
/// `leasehold::Error`'s variants (plus the Python-only ones at the end).
const CLASSES: &[(&str, &[&str], &str)] = &[
    (
        "InvalidArgument",
        &["ValueError"],
        "An argument was refused before anything was sent.",
    ),
    (
        "ConnectionFailed",
        &["ConnectionError"],
        "The server could not be reached or the connection broke. `ambiguous` is True when \
         the command may have been applied anyway.",
    ),
    (
        "PermissionDenied",
        &["PermissionError"],
        "The server refused a command (ACL, role).",
    ),
    (
        "TopologyError",
        &[],
        "The deployment does not allow the operation (cluster slots, roles).",
    ),
    (
        "AuthenticationFailed",
        &[],
        "The server refused the credentials or certificate.",
    ),
    ("ServerError", &[], "The server replied with an error."),
    (
        "FencingExhausted",
        &[],
        "The fencing counter reached 2^53; no number was issued.",
    ),
    (
        "NotHeld",
        &[],
        "The lock is not held by this token (expired, released or taken over).",
    ),
    (
        "NotAcquired",
        &["TimeoutError"],
        "The lock was still busy when the wait ended (`Busy` is the same class).",
    ),
    (
        "ExpiredOnArrival",
        &[],
        "The lock was granted, but the reply came after its validity.",
    ),
    (
        "NotReplicated",
        &[],
        "Too few replicas acknowledged the lock in time; it was released.",
    ),
    (
        "NoQuorum",
        &[],
        "Redlock: too few nodes granted the lock (or answered).",
    ),
    (
        "LockLost",
        &[],
        "The lock was lost while held (its renewal failed, or it expired).",
    ),
    (
        "Unsupported",
        &[],
        "The backend does not have this primitive or option.",
    ),
    (
        "Conflict",
        &[],
        "The request contradicts the state on the server (e.g. another number of permits).",
    ),
    (
        "BackendNotCompiled",
        &[],
        "The URL's backend is not compiled into this build.",
    ),
    (
        "UnexpectedReply",
        &[],
        "The server's reply was not one leasehold understands.",
    ),
    (
        "ForkedProcess",
        &[],
        "A Locker or lease made before a fork was used in the forked child: it holds the \
         parent's connections. Make a new Locker in the child.",
    ),
];

static BASE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CLASS_OBJECTS: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// Makes the classes and adds them (and the `Busy` alias) to `module`.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let builtins = py.import("builtins")?;
    let type_ = builtins.getattr("type")?;
    let make = |name: &str, bases: Vec<Bound<'_, PyAny>>, doc: &str| -> PyResult<Py<PyType>> {
        let ns = PyDict::new(py);
        ns.set_item("__doc__", doc)?;
        ns.set_item("__module__", "leasehold")?;
        let cls = type_.call1((name, PyTuple::new(py, bases)?, ns))?;
        Ok(cls.cast_into::<PyType>()?.unbind())
    };
    let base = make(
        "LeaseholdError",
        vec![builtins.getattr("Exception")?],
        "The base of every error leasehold raises.",
    )?;
    module.add("LeaseholdError", base.bind(py))?;
    let mut classes = Vec::new();
    for (name, extra, doc) in CLASSES {
        let mut bases = vec![base.bind(py).clone().into_any()];
        for b in *extra {
            bases.push(builtins.getattr(*b)?);
        }
        let cls = make(name, bases, doc)?;
        module.add(*name, cls.bind(py))?;
        classes.push(cls);
    }
    module.add("Busy", module.getattr("NotAcquired")?)?;
    let _ = BASE.set(py, base);
    let _ = CLASS_OBJECTS.set(py, classes);
    Ok(())
}

/// The class named `name` (one of [`CLASSES`]).
pub(crate) fn class<'py>(py: Python<'py>, name: &str) -> Bound<'py, PyType> {
    let i = CLASSES
        .iter()
        .position(|(n, _, _)| *n == name)
        .expect("a known exception class");
    CLASS_OBJECTS
        .get(py)
        .expect("exception classes made at import")[i]
        .bind(py)
        .clone()
}

/// An exception of class `name` with `message` and attributes.
pub(crate) fn raise(
    py: Python<'_>,
    name: &str,
    message: String,
    attributes: &[(&str, Bound<'_, PyAny>)],
) -> PyErr {
    let cls = class(py, name);
    match cls.call1((message.clone(),)) {
        Ok(exc) => {
            for (k, v) in attributes {
                let _ = exc.setattr(*k, v);
            }
            PyErr::from_value(exc)
        }
        Err(e) => e,
    }
}

/// The class of a `leasehold::Error` variant (the variant's name, renamed where the Python
/// name would shadow a built-in or read badly).
fn class_name(e: &Error) -> &'static str {
    match e.variant_name() {
        "Connection" => "ConnectionFailed",
        "Topology" => "TopologyError",
        "Authentication" => "AuthenticationFailed",
        "Server" => "ServerError",
        other => CLASSES
            .iter()
            .map(|(n, _, _)| *n)
            .find(|n| *n == other)
            // A variant added later without a class of its own.
            .unwrap_or("UnexpectedReply"),
    }
}

/// Converts a library error into its exception, with the variant's fields as attributes
/// (`key`, `ambiguous`, `waited`, `attempts`, `reason`, `backend`).
pub(crate) fn to_py<'py>(py: Python<'py>, e: Error) -> PyErr {
    let mut attributes: Vec<(&str, Bound<'py, PyAny>)> = Vec::new();
    let mut put = |name: &'static str, value: PyResult<Bound<'py, PyAny>>| {
        if let Ok(v) = value {
            attributes.push((name, v));
        }
    };
    match &e {
        Error::Connection { ambiguous, .. } => put("ambiguous", ambiguous.into_bound_py_any(py)),
        Error::NotHeld { key }
        | Error::ExpiredOnArrival { key, .. }
        | Error::NotReplicated { key, .. }
        | Error::NoQuorum { key, .. }
        | Error::Conflict { key, .. } => put("key", key.into_bound_py_any(py)),
        Error::NotAcquired {
            key,
            waited,
            attempts,
        } => {
            put("key", key.into_bound_py_any(py));
            put("waited", waited.as_secs_f64().into_bound_py_any(py));
            put("attempts", attempts.into_bound_py_any(py));
        }
        Error::LockLost { key, reason } => {
            put("key", key.into_bound_py_any(py));
            put(
                "reason",
                crate::lease::reason_name(*reason).into_bound_py_any(py),
            );
        }
        Error::Unsupported { backend, .. } => put("backend", backend.into_bound_py_any(py)),
        _ => {}
    }
    raise(py, class_name(&e), e.to_string(), &attributes)
}

/// `InvalidArgument` for a Python-side check.
pub(crate) fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "InvalidArgument", message.into(), &[])
}
