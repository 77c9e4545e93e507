//! A scripted FTP server in the test: PASV fallback with a bogus address,
//! MLSD/MLST, and hostile servers (silence, endless lines).

use std::time::Duration;

use haul_remote::collect::list_all;
use haul_remote::{EntryKind, RemoteError, RemoteOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::*;

/// Serves one control connection: no EPSV, PASV naming 10.9.8.7 (the client
/// must use 127.0.0.1 instead), MLST/MLSD when `mlst`, else LIST.
async fn scripted(mlst: bool) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (c, _) = l.accept().await.unwrap();
        let (r, mut w) = c.into_split();
        let mut r = BufReader::new(r);
        w.write_all(b"220-welcome\r\n220 ready\r\n").await.unwrap();
        let mut data: Option<TcpListener> = None;
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap() == 0 {
                return;
            }
            let cmd = line.trim_end();
            let verb = cmd.split(' ').next().unwrap().to_ascii_uppercase();
            let send = |d: TcpListener, body: &'static [u8]| async move {
                let (mut s, _) = d.accept().await.unwrap();
                s.write_all(body).await.unwrap();
            };
            let reply: &[u8] = match verb.as_str() {
                "USER" => b"331 pw\r\n",
                "PASS" => b"230 in\r\n",
                "TYPE" | "OPTS" => b"200 ok\r\n",
                "FEAT" if mlst => b"211-Features:\r\n MLST type*;size*;modify*;\r\n SIZE\r\n211 End\r\n",
                "FEAT" | "EPSV" => b"500 unknown\r\n",
                "CWD" => b"250 ok\r\n",
                "PASV" => {
                    let d = TcpListener::bind("127.0.0.1:0").await.unwrap();
                    let p = d.local_addr().unwrap().port();
                    data = Some(d);
                    let msg = format!("227 Entering Passive Mode (10,9,8,7,{},{})\r\n", p >> 8, p & 255);
                    w.write_all(msg.as_bytes()).await.unwrap();
                    continue;
                }
                "MLST" if cmd.ends_with("/pub/f.txt") => {
                    b"250-Listing /pub/f.txt\r\n type=file;size=5;modify=20240102030405; /pub/f.txt\r\n250 End\r\n"
                }
                "MLST" => b"550 No such file or directory\r\n",
                "MLSD" | "LIST" => {
                    w.write_all(b"150 here\r\n").await.unwrap();
                    let body: &[u8] = if mlst {
                        b"type=cdir; /pub\r\ntype=pdir; ..\r\ntype=file;size=5;modify=20240102030405; f.txt\r\ntype=dir;modify=20240102030405; sub dir\r\n"
                    } else {
                        b"total 2\r\n-rw-r--r-- 1 0 0 5 Jan 02  2024 f.txt\r\n01-02-24  03:04AM       <DIR>          sub dir\r\n"
                    };
                    send(data.take().unwrap(), body).await;
                    b"226 done\r\n"
                }
                _ => b"502 not here\r\n",
            };
            w.write_all(reply).await.unwrap();
        }
    });
    port
}

fn opts() -> RemoteOptions {
    RemoteOptions {
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pasv_fallback_uses_the_control_address() {
    let port = scripted(false).await;
    let mut s = connect(&format!("ftp://127.0.0.1:{port}/"), &opts())
        .await
        .unwrap();
    let v = list_all(s.as_mut(), "/pub").await.unwrap();
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        (v[0].name.as_str(), v[0].kind, v[0].size),
        ("f.txt", EntryKind::File, Some(5))
    );
    assert_eq!((v[1].name.as_str(), v[1].kind), ("sub dir", EntryKind::Dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlsd_and_mlst_when_offered() {
    let port = scripted(true).await;
    let mut s = connect(&format!("ftp://127.0.0.1:{port}/"), &opts())
        .await
        .unwrap();
    let v = list_all(s.as_mut(), "/pub").await.unwrap();
    let names: Vec<_> = v.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        names,
        [("f.txt", EntryKind::File), ("sub dir", EntryKind::Dir)]
    );
    assert_eq!(v[0].mtime, Some(epoch(1_704_164_645)));
    let e = s.stat("/pub/f.txt").await.unwrap();
    assert_eq!(
        (e.name.as_str(), e.size, e.mtime),
        ("f.txt", Some(5), Some(epoch(1_704_164_645)))
    );
    let err = s.stat("/pub/none").await.unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_server_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let (c, _) = l.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(c);
    });
    let o = RemoteOptions {
        timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let err = connect(&format!("ftp://127.0.0.1:{port}/"), &o)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, RemoteError::Timeout(_)), "{err}");
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_reply_line_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut c, _): (TcpStream, _) = l.accept().await.unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        let _ = c.write_all(b"220 ").await;
        // Up to 64 MiB without a newline: the client must give up long before.
        for _ in 0..1024 {
            if c.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let err = connect(&format!("ftp://127.0.0.1:{port}/"), &opts())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, RemoteError::Protocol(_)), "{err}");
}
