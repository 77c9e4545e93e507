//! Collecting what a [`Session`] streams into memory: a whole listing into a
//! `Vec`, a read into a `Vec<u8>`. For tests, tools and small lookups; the
//! download driver streams instead.

use crate::{DescribedSink, RemoteEntry, RemoteError, Session};

/// Capacity of the channel [`list_all`] drains: small, as the driver's, so a
/// lister that does not cope with backpressure shows up.
const LIST_CHANNEL: usize = 4;

/// All entries of directory `dir`, sorted by name.
///
/// The entries pass through a small bounded channel that is drained while
/// [`Session::list`] runs, as the driver does; the whole listing is then held
/// in memory, so use it for directories of modest size. When the listing
/// fails, its error is returned and the entries received before it are
/// dropped.
pub async fn list_all(
    session: &mut dyn Session,
    dir: &str,
) -> Result<Vec<RemoteEntry>, RemoteError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(LIST_CHANNEL);
    let list = async move {
        let r = session.list(dir, &tx).await;
        // Closing the channel ends the drain below.
        drop(tx);
        r
    };
    let drain = async move {
        let mut v = Vec::new();
        while let Some(e) = rx.recv().await {
            v.push(e);
        }
        v
    };
    let (r, mut entries) = tokio::join!(list, drain);
    r?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// Reads `len` bytes of file `path` from `offset` (`None`: to the end) into
/// memory, with `expect` as in [`Session::read`].
///
/// Never holds more than `max` bytes: a read that delivers more is stopped
/// and fails with [`RemoteError::Local`]. A session whose returned count
/// differs from the bytes it delivered fails with [`RemoteError::Protocol`].
pub async fn read_all(
    session: &mut dyn Session,
    path: &str,
    offset: u64,
    len: Option<u64>,
    expect: &RemoteEntry,
    max: usize,
) -> Result<Vec<u8>, RemoteError> {
    let mut out = Vec::new();
    let mut over = false;
    let mut sink = |b: &[u8]| {
        // `out.len() <= max` always holds, so the subtraction cannot wrap.
        if b.len() > max - out.len() {
            over = true;
            return Err(too_big(path, max));
        }
        out.extend_from_slice(b);
        Ok(())
    };
    let r = session.read(path, offset, len, expect, &mut sink).await;
    // The session may wrap or replace the sink's error: report the cap itself.
    if over {
        return Err(too_big(path, max));
    }
    let n = r?;
    if n != out.len() as u64 {
        return Err(RemoteError::Protocol(format!(
            "{path}: read reported {n} bytes but delivered {}",
            out.len()
        )));
    }
    Ok(out)
}

/// Reads the whole of file `path` with [`Session::read_described`] into
/// memory: the entry the session described it with, and its bytes.
///
/// Holds at most `max` bytes, as [`read_all`]. Fails with
/// [`RemoteError::Protocol`] when the session passes bytes before the
/// description, describes twice, or returns a count other than the bytes
/// it delivered.
pub async fn read_described_all(
    session: &mut dyn Session,
    path: &str,
    max: usize,
) -> Result<(RemoteEntry, Vec<u8>), RemoteError> {
    let mut c = Collected {
        path,
        max,
        entry: None,
        bytes: Vec::new(),
        over: false,
    };
    let r = session.read_described(path, &mut c).await;
    if c.over {
        return Err(too_big(path, max));
    }
    let n = r?;
    let entry = c.entry.ok_or_else(|| {
        RemoteError::Protocol(format!(
            "{path}: the read ended without describing the file"
        ))
    })?;
    if n != c.bytes.len() as u64 {
        return Err(RemoteError::Protocol(format!(
            "{path}: read reported {n} bytes but delivered {}",
            c.bytes.len()
        )));
    }
    Ok((entry, c.bytes))
}

/// The sink of [`read_described_all`].
struct Collected<'a> {
    path: &'a str,
    max: usize,
    entry: Option<RemoteEntry>,
    bytes: Vec<u8>,
    over: bool,
}

impl DescribedSink for Collected<'_> {
    fn describe(&mut self, entry: &RemoteEntry) -> Result<bool, RemoteError> {
        if self.entry.is_some() {
            return Err(RemoteError::Protocol(format!(
                "{}: described twice",
                self.path
            )));
        }
        self.entry = Some(entry.clone());
        Ok(true)
    }

    fn accept(&mut self, data: &[u8]) -> Result<(), RemoteError> {
        if self.entry.is_none() {
            return Err(RemoteError::Protocol(format!(
                "{}: bytes before the description",
                self.path
            )));
        }
        if data.len() > self.max - self.bytes.len() {
            self.over = true;
            return Err(too_big(self.path, self.max));
        }
        self.bytes.extend_from_slice(data);
        Ok(())
    }
}

fn too_big(path: &str, max: usize) -> RemoteError {
    RemoteError::Local(format!("{path}: more than {max} bytes to hold in memory"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ByteSink, ListSink};

    /// A session serving canned answers and recording what it was asked.
    #[derive(Default)]
    struct Fake {
        /// Names `list` sends, in this order.
        names: Vec<String>,
        /// Error `list` returns after sending the names.
        list_err: Option<RemoteError>,
        /// Chunks `read` passes to the sink.
        chunks: Vec<&'static [u8]>,
        /// Error `read` returns before sending anything.
        read_err: Option<RemoteError>,
        /// Count `read` returns instead of the bytes delivered.
        claim: Option<u64>,
        /// Whether `read` replaces a sink error with a connection error.
        wrap_sink_err: bool,
        /// Chunks the sink accepted.
        accepted: usize,
        /// Arguments of the last read.
        asked: Option<(String, u64, Option<u64>, String)>,
        /// What `stat` answers (`None`: not found).
        stat_as: Option<RemoteEntry>,
    }

    #[async_trait::async_trait]
    impl Session for Fake {
        async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
            self.stat_as
                .clone()
                .ok_or_else(|| RemoteError::NotFound(path.to_string()))
        }

        async fn list(&mut self, _dir: &str, out: &ListSink) -> Result<(), RemoteError> {
            for n in &self.names {
                if out.send(RemoteEntry::file(n, Some(1))).await.is_err() {
                    return Ok(());
                }
            }
            self.list_err.clone().map_or(Ok(()), Err)
        }

        async fn read(
            &mut self,
            path: &str,
            offset: u64,
            len: Option<u64>,
            expect: &RemoteEntry,
            sink: ByteSink<'_>,
        ) -> Result<u64, RemoteError> {
            self.asked = Some((path.to_string(), offset, len, expect.name.clone()));
            if let Some(e) = &self.read_err {
                return Err(e.clone());
            }
            let mut n = 0;
            for c in &self.chunks {
                if let Err(e) = sink(c) {
                    return Err(if self.wrap_sink_err {
                        RemoteError::Connection(format!("aborted: {e}"))
                    } else {
                        e
                    });
                }
                self.accepted += 1;
                n += c.len() as u64;
            }
            Ok(self.claim.unwrap_or(n))
        }

        async fn delete(&mut self, _path: &str) -> Result<(), RemoteError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn list_all_drains_past_the_channel_and_sorts() {
        // Far more entries than the channel holds: only a concurrent drain
        // lets the lister finish.
        let mut want: Vec<String> = (0..100).map(|i| format!("n{:03}", 99 - i)).collect();
        let mut s = Fake {
            names: want.clone(),
            ..Fake::default()
        };
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), list_all(&mut s, "/"))
            .await
            .expect("list_all finished")
            .expect("listing");
        want.sort_unstable();
        let got: Vec<String> = got.into_iter().map(|e| e.name).collect();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn list_all_empty_and_errors() {
        let mut s = Fake::default();
        assert!(list_all(&mut s, "/").await.expect("listing").is_empty());
        let mut s = Fake {
            names: vec!["b".into(), "a".into()],
            list_err: Some(RemoteError::NotFound("/x".into())),
            ..Fake::default()
        };
        let e = list_all(&mut s, "/x").await.expect_err("fails");
        assert!(matches!(e, RemoteError::NotFound(_)), "{e}");
    }

    #[tokio::test]
    async fn read_all_collects_in_order_with_the_arguments_given() {
        let mut s = Fake {
            chunks: vec![b"ab", b"", b"cde"],
            ..Fake::default()
        };
        let expect = RemoteEntry::file("f", Some(9));
        let got = read_all(&mut s, "/d/f", 4, Some(5), &expect, 100)
            .await
            .expect("read");
        assert_eq!(got, b"abcde");
        assert_eq!(
            s.asked,
            Some(("/d/f".to_string(), 4, Some(5), "f".to_string()))
        );
    }

    #[tokio::test]
    async fn read_all_caps_what_it_holds() {
        let expect = RemoteEntry::file("f", None);
        // Exactly the cap is fine.
        let mut s = Fake {
            chunks: vec![b"abc", b"de"],
            ..Fake::default()
        };
        let got = read_all(&mut s, "/f", 0, None, &expect, 5).await;
        assert_eq!(got.expect("read"), b"abcde");
        // Over the cap stops the read at the chunk that would exceed it, also
        // when the session reports the sink's refusal as an error of its own.
        for wrap_sink_err in [false, true] {
            let mut s = Fake {
                chunks: vec![b"abc", b"def", b"ghi"],
                wrap_sink_err,
                ..Fake::default()
            };
            let e = read_all(&mut s, "/f", 0, None, &expect, 5)
                .await
                .expect_err("over the cap");
            assert!(matches!(e, RemoteError::Local(_)), "{e}");
            assert!(e.to_string().contains("more than 5 bytes"), "{e}");
            assert_eq!(s.accepted, 1);
        }
        // A cap of zero admits only empty reads.
        let mut s = Fake {
            chunks: vec![b""],
            ..Fake::default()
        };
        let got = read_all(&mut s, "/f", 0, None, &expect, 0).await;
        assert!(got.expect("read").is_empty());
    }

    #[tokio::test]
    async fn read_all_checks_the_returned_count_and_passes_errors() {
        let expect = RemoteEntry::file("f", None);
        let mut s = Fake {
            chunks: vec![b"abc"],
            claim: Some(4),
            ..Fake::default()
        };
        let e = read_all(&mut s, "/f", 0, None, &expect, 100)
            .await
            .expect_err("count differs");
        assert!(matches!(e, RemoteError::Protocol(_)), "{e}");
        assert!(
            e.to_string().contains("reported 4 bytes but delivered 3"),
            "{e}"
        );
        let mut s = Fake {
            read_err: Some(RemoteError::Changed("etag".into())),
            ..Fake::default()
        };
        let e = read_all(&mut s, "/f", 0, None, &expect, 100)
            .await
            .expect_err("fails");
        assert!(matches!(e, RemoteError::Changed(_)), "{e}");
    }

    #[tokio::test]
    async fn default_described_read_states_then_reads_whole() {
        let mut stated = RemoteEntry::file("f", Some(5));
        stated.version = Some("v1".into());
        let mut s = Fake {
            chunks: vec![b"ab", b"cde"],
            stat_as: Some(stated.clone()),
            ..Fake::default()
        };
        let (told, bytes) = read_described_all(&mut s, "/d/f", 100).await.expect("read");
        assert_eq!((told, bytes), (stated, b"abcde".to_vec()));
        // The whole file was read, with the stated entry as what must hold.
        assert_eq!(s.asked, Some(("/d/f".into(), 0, None, "f".into())));
        // The cap holds here too.
        let e = read_described_all(&mut s, "/d/f", 4)
            .await
            .expect_err("over");
        assert!(matches!(e, RemoteError::Local(_)), "{e}");
        // Not a file, or not there: nothing read.
        for stat_as in [Some(RemoteEntry::dir("d")), None] {
            let mut s = Fake {
                chunks: vec![b"x"],
                stat_as,
                ..Fake::default()
            };
            let e = read_described_all(&mut s, "/d", 100)
                .await
                .expect_err("not a file");
            assert!(matches!(e, RemoteError::NotFound(_)), "{e}");
            assert_eq!(s.asked, None);
        }
    }
}
