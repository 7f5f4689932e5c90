//! tenure's benchmark against its peers lives in `benches/peers.rs`; run it
//! with `scripts/bench`. This library is empty.
