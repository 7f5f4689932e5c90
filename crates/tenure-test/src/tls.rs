//! A `redis-server` that also listens for TLS, with a CA and certificates made
//! at test time by the `openssl` command (nothing is downloaded or checked in).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{RedisServer, free_port};

/// A throwaway CA, a server certificate for `127.0.0.1`/`localhost` signed by
/// it, a client certificate signed by it, and an unrelated second CA.
#[derive(Debug)]
pub struct TlsCerts {
    dir: tempfile::TempDir,
}

impl TlsCerts {
    /// Generates the certificates with `openssl`.
    ///
    /// # Panics
    /// When `openssl` is missing or fails: a TLS test cannot go on without it.
    pub fn generate() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tenure-tls-")
            .tempdir()
            .expect("create a temporary directory for certificates");
        let certs = TlsCerts { dir };
        certs.ca("ca");
        certs.ca("other-ca");
        certs.signed("server", "subjectAltName=IP:127.0.0.1,DNS:localhost");
        certs.signed("client", "extendedKeyUsage=clientAuth");
        certs
    }

    /// Adds `expired.pem`/`expired.key`: a server certificate for `127.0.0.1`
    /// signed by the CA that expired two days ago (signed under `faketime`
    /// three days in the past, valid for one day).
    ///
    /// # Panics
    /// When `faketime` or `openssl` is missing or fails.
    pub fn generate_expired(&self) {
        self.sign(
            "expired",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            Some("-3d"),
            "1",
        );
    }

    /// The file `name` (`ca.pem`, `server.key`, `client.pem`, `other-ca.pem`…).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca(&self, name: &str) {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=tenure test {name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }

    fn signed(&self, name: &str, extension: &str) {
        self.sign(name, extension, None, "2");
    }

    /// A key and a certificate `name` signed by the CA, valid for `days`
    /// from now — or from `past` (a `faketime` offset such as `-3d`).
    fn sign(&self, name: &str, extension: &str, past: Option<&str>, days: &str) {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        std::fs::write(self.path(&format!("{name}.ext")), format!("{extension}\n"))
            .expect("write the extension file");
        let sign = match past {
            Some(offset) => vec!["faketime", "-f", offset, "openssl"],
            None => vec!["openssl"],
        };
        run(
            self.dir.path(),
            &sign,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                days,
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    run(dir, &["openssl"], args);
}

/// Runs `program` (`openssl`, or `faketime … openssl`) with `args` in `dir`.
fn run(dir: &Path, program: &[&str], args: &[&str]) {
    let out = Command::new(program[0])
        .args(&program[1..])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (and faketime for an expired certificate); install them");
    assert!(
        out.status.success(),
        "{program:?} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `redis-server` with its plain port (for the harness) and a TLS port
/// serving `certs`' server certificate; client certificates are optional.
#[derive(Debug)]
pub struct TlsRedis {
    /// The server; [`RedisServer::command`] uses its plain port.
    pub server: RedisServer,
    tls_port: u16,
}

impl TlsRedis {
    /// Starts the server.
    pub fn start(certs: &TlsCerts) -> Self {
        Self::serving(certs, "server")
    }

    /// Starts the server with the certificate `name` of `certs` (`server`, or
    /// `expired` after [`TlsCerts::generate_expired`]).
    pub fn serving(certs: &TlsCerts, name: &str) -> Self {
        let tls_port = free_port();
        let path = |name: &str| certs.path(name).display().to_string();
        let server = RedisServer::builder()
            .args([
                "--tls-port".to_string(),
                tls_port.to_string(),
                "--tls-cert-file".to_string(),
                path(&format!("{name}.pem")),
                "--tls-key-file".to_string(),
                path(&format!("{name}.key")),
                "--tls-ca-cert-file".to_string(),
                path("ca.pem"),
                "--tls-auth-clients".to_string(),
                "optional".to_string(),
            ])
            .start();
        TlsRedis { server, tls_port }
    }

    /// `rediss://127.0.0.1:PORT` of the TLS port.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}
