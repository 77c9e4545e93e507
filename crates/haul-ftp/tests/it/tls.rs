//! FTPS: explicit (AUTH TLS) and implicit TLS, certificate checks.

use haul_ftp::testserver::Mode;
use haul_remote::collect::{list_all, read_all};
use haul_remote::{EntryKind, RemoteError};

use crate::helpers::*;

async fn list_and_read(mode: Mode) {
    let srv = server(mode);
    let data = bytes(500_000, 7);
    write(&srv.root().join("d/x.bin"), &data, None);
    for anonymous in [false, true] {
        let mut s = if anonymous {
            anon(&srv).await
        } else {
            user(&srv).await
        };
        let top = list_all(s.as_mut(), "/")
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", srv.log()));
        assert_eq!((top[0].name.as_str(), top[0].kind), ("d", EntryKind::Dir));
        let e = s.stat("/d/x.bin").await.unwrap();
        // Several transfers on one session: each data connection resumes the
        // control connection's TLS session (require_ssl_reuse=YES).
        assert_eq!(
            read_all(s.as_mut(), "/d/x.bin", 0, None, &e, MAX_READ)
                .await
                .unwrap(),
            data
        );
        assert_eq!(
            read_all(s.as_mut(), "/d/x.bin", 100, Some(1000), &e, MAX_READ)
                .await
                .unwrap(),
            &data[100..1100]
        );
        assert_eq!(
            list_all(s.as_mut(), "/d").await.unwrap()[0].size,
            Some(500_000)
        );
        // Many more data connections: TLS 1.3 tickets must keep coming.
        for i in 0..12u64 {
            let got = read_all(s.as_mut(), "/d/x.bin", i * 1000, Some(10), &e, MAX_READ)
                .await
                .unwrap();
            assert_eq!(got, &data[(i * 1000) as usize..(i * 1000 + 10) as usize]);
            assert_eq!(list_all(s.as_mut(), "/").await.unwrap().len(), 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_tls_lists_and_reads() {
    list_and_read(Mode::ExplicitTls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implicit_tls_lists_and_reads() {
    list_and_read(Mode::ImplicitTls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_certificate_is_refused_unless_insecure() {
    let srv = server(Mode::ExplicitTls);
    let mut opts = srv.user_options();
    opts.ca_cert = None;
    let err = connect(&srv.user_url("/"), &opts)
        .await
        .err()
        .expect("self-signed cert must be refused");
    assert!(err.to_string().contains("certificate"), "{err}");
    opts.insecure_tls = true;
    let mut s = connect(&srv.user_url("/"), &opts).await.unwrap();
    assert!(list_all(s.as_mut(), "/").await.unwrap().is_empty());
    // Plain FTP to a server that forces TLS for the user: refused at login.
    let url = srv.user_url("/").replacen("ftps://", "ftp://", 1);
    let err = connect(&url, &srv.user_options())
        .await
        .err()
        .expect("plain login must be refused");
    assert!(matches!(err, RemoteError::Auth(_)), "{err}");
}
