//! The PostgreSQL driver against a real server with `ssl = on` (a CA and a
//! server certificate made here with rcgen) and password authentication:
//! each `sslmode` does what libpq's does, and a password comes from a
//! private password file, never from a readable one, and is never shown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use haul_catalog::testserver::{Setup, TestServer};
use haul_catalog::{Catalog, PostgresCatalog, Refetch, Seen};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA, and a certificate it signed for `names`; (CA PEM, chain PEM, key PEM).
fn certificates(names: &[&str]) -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "haul test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

fn private_file(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Connects on a thread of its own (the client blocks on a runtime of its
/// own) and claims one file, to prove the connection works.
fn try_catalog(url: &str) -> Result<(), String> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let c = PostgresCatalog::connect(&url).map_err(|e| e.to_string())?;
        let seen = Seen {
            path: "a".into(),
            size: Some(1),
            mtime: Some(1),
            etag: None,
            checksums: vec![],
        };
        c.claim("s", &[seen], Refetch::Never, "w", 100, 1)
            .map_err(|e| e.to_string())?;
        c.release_worker("w").map_err(|e| e.to_string())?;
        Ok(())
    })
    .join()
    .unwrap()
}

#[test]
fn sslmodes_and_password_files_against_a_real_server() {
    let (ca, chain, key) = certificates(&["localhost", "127.0.0.1"]);
    let pg = TestServer::start_with(&Setup {
        tls: Some((chain, key)),
        // haul (the admin) as before; `tlsonly` must come over TLS;
        // `pw` must give its password (SCRAM).
        hba: Some(
            "local all all trust\n\
             host all haul 127.0.0.1/32 trust\n\
             hostssl all tlsonly 127.0.0.1/32 trust\n\
             host all tlsonly 127.0.0.1/32 reject\n\
             host all pw 127.0.0.1/32 scram-sha-256\n"
                .into(),
        ),
    })
    .expect("PostgreSQL with ssl=on");
    pg.create_database("cat").unwrap();
    pg.sql(
        "postgres",
        "CREATE ROLE tlsonly LOGIN; CREATE ROLE pw LOGIN PASSWORD 'Sw0rd:fish'; \
         GRANT ALL ON DATABASE cat TO tlsonly, pw; ALTER DATABASE cat OWNER TO tlsonly",
    )
    .unwrap();
    pg.sql("cat", "GRANT ALL ON SCHEMA public TO tlsonly, pw")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, &ca).unwrap();
    let (other_ca, _, _) = certificates(&["elsewhere"]);
    let other_ca_path = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca_path, &other_ca).unwrap();
    let port = pg.port();
    let at = |host: &str, user: &str, query: &str| {
        format!("postgres://{user}@{host}:{port}/cat?{query}")
    };

    // TLS taken: the server lets `tlsonly` in over TLS only.
    try_catalog(&at("127.0.0.1", "tlsonly", "sslmode=require")).unwrap();
    try_catalog(&at("127.0.0.1", "tlsonly", "")).expect("prefer uses TLS when offered");
    let e = try_catalog(&at("127.0.0.1", "tlsonly", "sslmode=disable")).unwrap_err();
    assert!(e.contains("tlsonly") || e.contains("pg_hba"), "{e}");
    // verify-full: the chain and the name (an IP SAN here).
    let root = format!("sslrootcert={}", ca_path.display());
    try_catalog(&at(
        "127.0.0.1",
        "tlsonly",
        &format!("sslmode=verify-full&{root}"),
    ))
    .unwrap();
    try_catalog(&at(
        "localhost",
        "tlsonly",
        &format!("sslmode=verify-full&{root}"),
    ))
    .unwrap();
    // Another CA: refused by verify-ca and verify-full.
    let other = format!("sslrootcert={}", other_ca_path.display());
    for mode in ["verify-ca", "verify-full"] {
        let e = try_catalog(&at(
            "127.0.0.1",
            "tlsonly",
            &format!("sslmode={mode}&{other}"),
        ))
        .unwrap_err();
        assert!(e.to_lowercase().contains("certificate"), "{mode}: {e}");
        assert!(
            e.contains("check the URL's sslmode and sslrootcert"),
            "{mode}: {e}"
        );
    }
    // A name the certificate does not hold: verify-full refuses, verify-ca
    // (chain only) accepts. 127.0.0.2 reaches the same server on loopback.
    let (ca2, chain2, key2) = certificates(&["db.example"]);
    drop(pg);
    let pg = TestServer::start_with(&Setup {
        tls: Some((chain2, key2)),
        hba: Some(
            "host all haul 127.0.0.1/32 trust\n\
             hostssl all haul 127.0.0.1/32 trust\n"
                .into(),
        ),
    })
    .unwrap();
    pg.create_database("cat").unwrap();
    let ca2_path = dir.path().join("ca2.pem");
    std::fs::write(&ca2_path, &ca2).unwrap();
    let root2 = format!("sslrootcert={}", ca2_path.display());
    let url2 = |mode: &str| {
        format!(
            "postgres://haul@127.0.0.1:{}/cat?sslmode={mode}&{root2}",
            pg.port()
        )
    };
    try_catalog(&url2("verify-ca")).unwrap();
    let e = try_catalog(&url2("verify-full")).unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    drop(pg);

    // Passwords from a password file (libpq's format; only if private).
    let (_, chain3, key3) = certificates(&["127.0.0.1"]);
    let pg = TestServer::start_with(&Setup {
        tls: Some((chain3, key3)),
        hba: Some(
            "host all haul 127.0.0.1/32 trust\n\
             host all pw 127.0.0.1/32 scram-sha-256\n"
                .into(),
        ),
    })
    .unwrap();
    pg.create_database("cat").unwrap();
    pg.sql(
        "postgres",
        "CREATE ROLE pw LOGIN PASSWORD 'Sw0rd:fish'; ALTER DATABASE cat OWNER TO pw",
    )
    .unwrap();
    let port = pg.port();
    let passfile = dir.path().join("pgpass");
    private_file(
        &passfile,
        &format!("# haul's catalog\n127.0.0.1:{port}:cat:pw:Sw0rd\\:fish\n"),
        0o600,
    );
    let with_file = format!(
        "postgres://pw@127.0.0.1:{port}/cat?sslmode=require&passfile={}",
        passfile.display()
    );
    try_catalog(&with_file).unwrap();
    // Readable by the group: not used (libpq's rule), so no password.
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = try_catalog(&with_file).unwrap_err();
    assert!(e.contains("password"), "{e}");
    // A wrong password in the file: refused, and never shown.
    private_file(&passfile, &format!("*:{port}:*:pw:Wr0ng-secret\n"), 0o600);
    let e = try_catalog(&with_file).unwrap_err();
    assert!(e.contains("password") && !e.contains("Wr0ng-secret"), "{e}");
    assert!(e.contains("pg_hba.conf"), "what to check: {e}");
    // The password in the URL is not shown either.
    let e = try_catalog(&format!(
        "postgres://pw:Inl1ne-secret@127.0.0.1:{port}/cat?sslmode=require"
    ))
    .unwrap_err();
    assert!(!e.contains("Inl1ne-secret"), "{e}");
}
