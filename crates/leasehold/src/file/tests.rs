//! Unit tests of the file backend.
