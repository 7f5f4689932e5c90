//! Prints the timeline of the stale-holder scenario, fenced and unfenced.
//!
//! Uses the Redis at `$REDIS_URL`, or starts a throwaway `redis-server`.

use lease_example::{Resource, run};

#[tokio::main]
async fn main() {
    let server;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) => url,
        Err(_) => {
            server = tenure_test::RedisServer::start();
            server.url()
        }
    };
    for resource in [Resource::Unfenced, Resource::Fenced] {
        println!("== {resource:?} resource");
        match run(&url, resource).await {
            Ok(outcome) => {
                for line in outcome.timeline {
                    println!("{line}");
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        println!();
    }
}
