//! Helpers shared by the extractors' unit tests.

use http::Request;

use super::{KeyExtractor, PeerAddr, RequestHead, TrustedProxies};

pub(crate) fn req(peer: &str, headers: &[(&str, &[u8])]) -> Request<()> {
    let mut b = Request::get("/");
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    let mut r = b.body(()).expect("request");
    r.extensions_mut()
        .insert(PeerAddr(peer.parse().expect("peer")));
    r
}

/// The key `e` extracts from `r`, checking that `key` (what the middleware
/// calls) and `extract` give the same text.
pub(crate) fn key(e: &impl KeyExtractor, r: &Request<()>) -> Option<String> {
    let head = RequestHead::new(r);
    let text = e.extract(&head);
    assert_eq!(
        e.key(&head).map(String::from),
        text,
        "key and extract differ"
    );
    text
}

pub(crate) fn trusted(s: &str) -> TrustedProxies {
    s.parse().expect("cidrs")
}
