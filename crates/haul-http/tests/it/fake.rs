//! Hand-made misbehaving HTTP servers (stalls, short bodies, no ranges...).

use std::sync::Arc;
use std::time::Duration;

use haul_remote::collect::read_all;
use haul_remote::{RemoteEntry, RemoteError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::{any, session, MAX_READ};

/// What the fake server does with one request.
enum Act {
    /// Send these bytes, then close.
    Send(Vec<u8>),
    /// Send these bytes, then keep the connection open without a word.
    SendAndHang(Vec<u8>),
}

/// Serves every connection with `f(request head)`; returns the base URL.
async fn fake(f: impl Fn(&str) -> Act + Send + Sync + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let f = Arc::new(f);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            let f = f.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                match f(&String::from_utf8_lossy(&head)) {
                    Act::Send(bytes) => {
                        let _ = sock.write_all(&bytes).await;
                    }
                    Act::SendAndHang(bytes) => {
                        let _ = sock.write_all(&bytes).await;
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}/")
}

fn response(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for h in headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

fn quick() -> haul_remote::RemoteOptions {
    haul_remote::RemoteOptions {
        timeout: Duration::from_millis(400),
        ..Default::default()
    }
}

#[tokio::test]
async fn silent_server_times_out() {
    let url = fake(|_| Act::SendAndHang(Vec::new())).await;
    let mut s = session(&url, &quick()).await;
    let t = std::time::Instant::now();
    let e = s.stat("/x").await.unwrap_err();
    assert!(matches!(e, RemoteError::Timeout(_)), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn stalled_body_times_out_and_short_body_is_connection_error() {
    let url =
        fake(|_| Act::SendAndHang(response("200 OK", &["Content-Length: 100"], &[7u8; 40]))).await;
    let mut s = session(&url, &quick()).await;
    let e = read_all(s.as_mut(), "/x", 0, None, &any("x"), MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(e, RemoteError::Timeout(_)), "{e:?}");

    let url = fake(|_| Act::Send(response("200 OK", &["Content-Length: 100"], &[7u8; 40]))).await;
    let mut s = session(&url, &quick()).await;
    let e = read_all(s.as_mut(), "/x", 0, None, &any("x"), MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(e, RemoteError::Connection(_)), "{e:?}");

    // Same with a range.
    let url = fake(|_| {
        Act::Send(response(
            "206 Partial Content",
            &["Content-Length: 10", "Content-Range: bytes 5-14/100"],
            b"abc",
        ))
    })
    .await;
    let mut s = session(&url, &quick()).await;
    let e = read_all(s.as_mut(), "/x", 5, Some(10), &any("x"), MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(e, RemoteError::Connection(_)), "{e:?}");
}

#[tokio::test]
async fn server_ignoring_ranges() {
    let url = fake(|_| {
        Act::Send(response(
            "200 OK",
            &["Content-Length: 10", "ETag: \"v1\""],
            b"0123456789",
        ))
    })
    .await;
    let mut s = session(&url, &quick()).await;
    let mut e = RemoteEntry::file("x", Some(10));
    e.version = Some("\"v1\"".into());
    let err = read_all(s.as_mut(), "/x", 3, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Unsupported(_)), "{err:?}");
    // Whole reads still work.
    assert_eq!(
        read_all(s.as_mut(), "/x", 0, None, &e, MAX_READ)
            .await
            .unwrap(),
        b"0123456789"
    );
    // A 200 whose validators differ: the file changed.
    e.version = Some("\"v0\"".into());
    let err = read_all(s.as_mut(), "/x", 3, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err:?}");
}

#[tokio::test]
async fn wrong_content_range_and_server_errors() {
    let url = fake(|head| {
        if head.contains("/busy") {
            Act::Send(response(
                "503 Service Unavailable",
                &["Content-Length: 0"],
                b"",
            ))
        } else {
            Act::Send(response(
                "206 Partial Content",
                &["Content-Length: 3", "Content-Range: bytes 0-2/10"],
                b"abc",
            ))
        }
    })
    .await;
    let mut s = session(&url, &quick()).await;
    let e = read_all(s.as_mut(), "/x", 5, Some(3), &any("x"), MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(e, RemoteError::Protocol(_)), "{e:?}");
    let e = s.stat("/busy").await.unwrap_err();
    assert!(
        matches!(e, RemoteError::Protocol(_)) && e.is_retryable(),
        "{e:?}"
    );
    // Total in Content-Range differs from the expected size: changed.
    let e = read_all(
        s.as_mut(),
        "/x",
        0,
        Some(3),
        &RemoteEntry::file("x", Some(11)),
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, RemoteError::Changed(_)), "{e:?}");
}

#[tokio::test]
async fn head_refused_falls_back_to_ranged_get() {
    let url = fake(|head| {
        if head.starts_with("HEAD") {
            Act::Send(response(
                "405 Method Not Allowed",
                &["Content-Length: 0"],
                b"",
            ))
        } else if head.to_ascii_lowercase().contains("range: bytes=0-0") {
            Act::Send(response(
                "206 Partial Content",
                &[
                    "Content-Length: 1",
                    "Content-Range: bytes 0-0/1234",
                    "ETag: W/\"weak\"",
                    "Last-Modified: Tue, 02 Jan 2024 15:04:05 GMT",
                ],
                b"a",
            ))
        } else {
            Act::Send(response("400 Bad Request", &["Content-Length: 0"], b""))
        }
    })
    .await;
    let mut s = session(&url, &quick()).await;
    let e = s.stat("/f").await.unwrap();
    assert_eq!(e.size, Some(1234));
    assert_eq!(e.version.as_deref(), Some("W/\"weak\""));
    assert!(e.mtime.is_some());
}

#[tokio::test]
async fn weak_etag_uses_last_modified_for_if_range() {
    let url = fake(|head| {
        let h = head.to_ascii_lowercase();
        if h.contains("if-range: tue, 02 jan 2024 15:04:05 gmt") && !h.contains("w/") {
            Act::Send(response(
                "206 Partial Content",
                &[
                    "Content-Length: 2",
                    "Content-Range: bytes 2-3/10",
                    "ETag: W/\"weak\"",
                ],
                b"23",
            ))
        } else {
            Act::Send(response("400 Bad Request", &["Content-Length: 0"], b""))
        }
    })
    .await;
    let mut s = session(&url, &quick()).await;
    let mut e = RemoteEntry::file("x", Some(10));
    e.version = Some("W/\"weak\"".into());
    e.mtime = haul_time::parse_http_date("Tue, 02 Jan 2024 15:04:05 GMT").ok();
    assert_eq!(
        read_all(s.as_mut(), "/x", 2, Some(2), &e, MAX_READ)
            .await
            .unwrap(),
        b"23"
    );
}
