//! Placeholder until the scenario lands.
fn main() {}
