//! A session whose first words go out with `Hello`: the node's answer is
//! read where the session's first message would be.
//!
//! A push or a pull's worker connection starts with what the client says
//! (offers, wants). Waiting for `Welcome` before saying it costs a round
//! trip on every connection — 2 s on a link with a 1 s one-way delay — and
//! the answer changes nothing the client would say. So the dialer hands
//! such a connection over right after `Hello` ([`crate::dial`]), and
//! [`AwaitingWelcome`] takes the node's answer off the front of what it
//! reads:
//! - `Welcome`: the key the node presented is pinned if it was met for
//!   the first time (trust on first use, as when the dialer waits), the
//!   connection's idle limit becomes the session's, and the session reads
//!   on;
//! - `Refused`: passed to the session, which ends with it as the
//!   [`crate::NodeError::Refused`] a dialer that waited returns (the key is
//!   pinned too: the node spoke haul);
//! - anything else: the connection fails.
//!
//! The node reads the messages that came after `Hello` only once it
//! welcomed the request, and drops them with the connection when it
//! refuses; a session's first messages name files, never their bytes
//! (those wait for the node's `Need`). Two kinds of connection do not go
//! this way ([`crate::dial::Reached::answer_first`]): plaintext TCP, where
//! a TLS node's answer must be read as the dialer reads it, to say "drop
//! --plaintext"; and the first connections of `--transport auto`, which
//! the other transport may supersede at once — the node would then act on
//! offers whose reports (a changed owner's `og`, say) the session hands
//! back unread.

use std::time::Duration;

use async_trait::async_trait;
use haul_proto::{ChunkHeader, Message};
use haul_transport::{MessageReader, PeerKey, TransportError};
use tokio::sync::watch;

/// What the node answered a connection's `Hello`, for whoever waits on it
/// (a push's further connections wait for its first one's: a refused
/// transfer is refused once, on one connection).
#[derive(Clone)]
pub(crate) struct Answer(watch::Receiver<Option<bool>>);

impl Answer {
    /// An answer already read (the dialer waited for it).
    pub(crate) fn welcomed() -> Self {
        Self(watch::channel(Some(true)).1)
    }

    /// An answer still to come, and where its reader tells it.
    fn pending() -> (watch::Sender<Option<bool>>, Self) {
        let (tx, rx) = watch::channel(None);
        (tx, Self(rx))
    }

    /// Waits for the answer: false when the node refused; true when it
    /// welcomed the connection, or when its answer can no longer come (the
    /// connection broke first: trying again is for the caller).
    pub(crate) async fn wait(&mut self) -> bool {
        match self.0.wait_for(Option::is_some).await {
            Ok(answer) => answer.unwrap_or(true),
            Err(_) => true,
        }
    }
}

/// Pins `key` if it was met for the first time — called once the node at
/// `name` answered in haul (`Welcome` or `Refused`), whether the dialer or
/// [`AwaitingWelcome`] read the answer.
pub(crate) fn pin_on_answer(key: &PeerKey, name: &str) -> Result<(), TransportError> {
    if let Some(file) = key.trust()? {
        tracing::warn!(
            "trusting {name} on first use: its key {} is now pinned in {}",
            key.fingerprint,
            file.display()
        );
    }
    Ok(())
}

/// The node's answer to `Hello`, not read yet.
struct Unanswered {
    /// The key to pin once the node answered in haul.
    key: Option<PeerKey>,
    /// The node as messages name it.
    name: String,
    /// The idle limit the session's reads have once welcomed.
    idle: Duration,
}

/// A reader whose first message is the node's answer to `Hello`.
pub(crate) struct AwaitingWelcome {
    inner: Box<dyn MessageReader>,
    unanswered: Option<Unanswered>,
    /// Where the answer is told ([`Answer`]).
    told: watch::Sender<Option<bool>>,
}

impl AwaitingWelcome {
    /// `inner` with the handshake's idle limit set; `idle` is the
    /// session's, from the node's answer on. The [`Answer`] tells what the
    /// node answered once this reader read it.
    pub(crate) fn new(
        inner: Box<dyn MessageReader>,
        key: Option<PeerKey>,
        name: &str,
        idle: Duration,
    ) -> (Self, Answer) {
        let (told, answer) = Answer::pending();
        let reader = Self {
            inner,
            unanswered: Some(Unanswered {
                key,
                name: name.to_owned(),
                idle,
            }),
            told,
        };
        (reader, answer)
    }

    /// The node's answer: `None` when it welcomed the request (the
    /// session's own messages follow), the message to hand on otherwise.
    fn answer(
        &mut self,
        asked: Unanswered,
        msg: Message,
    ) -> Result<Option<Message>, TransportError> {
        if !matches!(msg, Message::Welcome { .. } | Message::Refused { .. }) {
            // Not a node to open more connections to.
            self.told.send_replace(Some(false));
            return Err(TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} answered Hello with {} instead of Welcome",
                    asked.name,
                    format!("{msg:?}").chars().take(80).collect::<String>()
                ),
            )));
        }
        if let Some(k) = &asked.key {
            if let Err(e) = pin_on_answer(k, &asked.name) {
                // The key cannot be pinned: nor can it on another connection.
                self.told.send_replace(Some(false));
                return Err(e);
            }
        }
        let welcomed = matches!(msg, Message::Welcome { .. });
        self.told.send_replace(Some(welcomed));
        if welcomed {
            self.inner.set_idle(asked.idle);
            return Ok(None);
        }
        Ok(Some(msg))
    }
}

#[async_trait]
impl MessageReader for AwaitingWelcome {
    async fn recv(&mut self) -> Result<Message, TransportError> {
        // Cancel-safe, as the inner reader is: the answer is taken only
        // once it was read.
        if self.unanswered.is_some() {
            let msg = self.inner.recv().await?;
            if let Some(asked) = self.unanswered.take() {
                if let Some(refused) = self.answer(asked, msg)? {
                    return Ok(refused);
                }
            }
        }
        self.inner.recv().await
    }

    fn try_recv(&mut self) -> Result<Option<Message>, TransportError> {
        if self.unanswered.is_some() {
            let Some(msg) = self.inner.try_recv()? else {
                return Ok(None);
            };
            if let Some(asked) = self.unanswered.take() {
                if let Some(refused) = self.answer(asked, msg)? {
                    return Ok(Some(refused));
                }
            }
        }
        self.inner.try_recv()
    }

    async fn read_payload(
        &mut self,
        header: &ChunkHeader,
        out: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        self.inner.read_payload(header, out).await
    }

    async fn skip_payload(&mut self, header: &ChunkHeader) -> Result<(), TransportError> {
        self.inner.skip_payload(header).await
    }

    fn try_read_payload(&mut self, header: &ChunkHeader, out: &mut Vec<u8>) -> bool {
        self.inner.try_read_payload(header, out)
    }

    fn set_idle(&mut self, idle: Duration) {
        // Until the node answered, the handshake's limit holds.
        match &mut self.unanswered {
            Some(asked) => asked.idle = idle,
            None => self.inner.set_idle(idle),
        }
    }

    fn activity(&self) -> Option<std::sync::Arc<haul_transport::Activity>> {
        self.inner.activity()
    }

    fn expect_rate(&mut self, rate: u64) {
        self.inner.expect_rate(rate);
    }
}
