//! Builds the minimal lease run (`examples/cold_floor.rs`) as `tenure` is
//! built: with GCC's unwinder linked in (see tenure-cli's build script).

include!("../tenure-cli/build/unwinder.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../tenure-cli/build/unwinder.rs");
    link_static_unwinder();
}
