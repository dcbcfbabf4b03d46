//! Sets up the linker for a Node.js addon (napi-build).
fn main() {
    napi_build::setup();
}
