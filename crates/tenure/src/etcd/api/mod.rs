//! etcd's gRPC API as Rust: messages and clients generated ahead of time by
//! `scripts/etcd-proto` from etcd's `.proto` files, pruned to the calls
//! tenure makes (KV, Lease, Watch, Authenticate). Checked in so that building
//! tenure needs no protoc; never edited by hand.
//!
//! `client.rs` wraps these clients; `ops.rs` builds the requests and reads
//! the replies.

// Generated code: every message and client is public within this module,
// and not every field or call is used. prost's enums are reachable through
// their trait impls, though nothing outside the crate can name them.
#![allow(
    dead_code,
    missing_docs,
    unreachable_pub,
    unnameable_types,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used
)]

pub(crate) mod etcdserverpb;
pub(crate) mod mvccpb;
