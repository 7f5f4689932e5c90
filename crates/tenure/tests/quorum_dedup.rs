//! One server, one vote: quorum nodes are compared by the address they lead
//! to and their database, not by how their URLs are spelled.

#![allow(clippy::unwrap_used)]

use tenure::Error;
use tenure::quorum::{QuorumOptions, QuorumStore};
use tenure_test::RedisServer;

async fn connect(urls: &[String]) -> tenure::Result<QuorumStore> {
    QuorumStore::connect(urls.iter(), QuorumOptions::default()).await
}

#[tokio::test]
async fn one_server_under_two_spellings_is_refused() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let (p0, p1) = (nodes[0].port(), nodes[1].port());
    for twice in [
        format!("redis://localhost:{p0}"),
        format!("redis://127.0.0.1:{p0}/0"),
        format!("redis://LOCALHOST:{p0}/"),
        format!("redis://127.0.0.1:{p0}/?protocol=resp2"),
    ] {
        let urls = [
            format!("redis://127.0.0.1:{p0}"),
            twice.clone(),
            format!("redis://127.0.0.1:{p1}"),
        ];
        let e = connect(&urls).await.err();
        assert!(
            matches!(&e, Some(Error::Config { reason, .. }) if reason.contains("twice")),
            "{twice}: {e:?}"
        );
    }
    // Other databases of one server, and other servers, are other nodes.
    let apart = [
        format!("redis://127.0.0.1:{p0}/1"),
        format!("redis://localhost:{p0}/2"),
        nodes[2].url(),
    ];
    connect(&apart).await.unwrap();
}
