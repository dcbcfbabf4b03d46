//! Unit tests of the memory backend.
