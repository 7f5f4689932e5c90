//! `bank --listen ADDR --backend REDIS_URL --database-url POSTGRES_URL
//! [--limit 60/1m] [--trusted-proxy CIDR]…`

use clap::Parser;

#[tokio::main]
async fn main() {
    let config = bank::Config::parse();
    let app = match bank::app(&config).await {
        Ok(app) => app,
        Err(e) => {
            eprintln!("bank: {e}");
            std::process::exit(1);
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bank: --listen {}: {e}", config.listen);
            std::process::exit(1);
        }
    };
    match listener.local_addr() {
        Ok(addr) => println!("bank listening on http://{addr}"),
        Err(_) => println!("bank listening on http://{}", config.listen),
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = bank::serve(listener, app, shutdown).await {
        eprintln!("bank: {e}");
        std::process::exit(1);
    }
}
