//! The randomly keyed hashers an in-process limiter could index client keys
//! with: ns per key hashed, for an IPv4 key, an IPv6 key and a 40-character
//! API key. SipHash-1-3 (std's `RandomState`), foldhash (fast and quality)
//! and ahash, each with a random state.

use std::hash::BuildHasher;
use std::hint::black_box;
use std::time::Instant;

use crate::samples::Samples;

/// The hashers, by the name their rows carry.
pub const HASHERS: [&str; 4] = ["siphash13", "foldhash", "foldhash-quality", "ahash"];
/// The keys, by the name their rows carry.
pub const KEYS: [(&str, &str); 3] = [
    ("ipv4", "ip:203.0.113.77"),
    ("ipv6", "ip:2001:db8:85a3::8a2e:370:7334"),
    ("api", "key:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"),
];
const HASHES: u32 = 2_000_000;

/// Records `local.hash.{hasher}.{key}` in ns per hash.
pub fn run(out: &mut Samples) {
    for (name, key) in KEYS {
        let keys: Vec<String> = (0..16).map(|i| format!("{key}{i:x}")).collect();
        out.add(
            format!("local.hash.siphash13.{name}"),
            ns(std::hash::RandomState::new(), &keys),
        );
        out.add(
            format!("local.hash.foldhash.{name}"),
            ns(foldhash::fast::RandomState::default(), &keys),
        );
        out.add(
            format!("local.hash.foldhash-quality.{name}"),
            ns(foldhash::quality::RandomState::default(), &keys),
        );
        out.add(
            format!("local.hash.ahash.{name}"),
            ns(ahash::RandomState::new(), &keys),
        );
    }
}

/// ns per `hash_one` of a key of `keys`.
fn ns(state: impl BuildHasher, keys: &[String]) -> f64 {
    let began = Instant::now();
    for i in 0..HASHES {
        black_box(state.hash_one(black_box(keys[i as usize % keys.len()].as_str())));
    }
    began.elapsed().as_nanos() as f64 / f64::from(HASHES)
}
