//! What both roles share: the queues of things for the driver to do, and
//! the two timers (keepalive while busy, the peer's idle limit).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use haul_proto::Message;

use crate::{keepalive_interval, Heartbeat, SessionError, Transmit};
use haul_run::Event;

/// Queues and timers of a session; `I` is the role's I/O request type.
#[derive(Debug)]
pub(crate) struct Core<I> {
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) io: VecDeque<I>,
    pub(crate) events: VecDeque<Event>,
    idle: Duration,
    keepalive: Duration,
    last_recv: Instant,
    last_sent: Instant,
    /// I/O requests that await a result.
    pub(crate) io_pending: usize,
    /// Work of its own outstanding that is not I/O (a sender's files left
    /// to settle): keepalives go out, and the peer's silence is expected.
    pub(crate) waiting: usize,
    last_io_done: Instant,
    /// When the driver last finished writing what was transmitted: the
    /// peer's silence is counted from then at the earliest (a slow link's
    /// last writes are not the peer's delay).
    last_flushed: Instant,
    /// The session failed: everything after is refused.
    failed: Option<SessionError>,
    /// Superseded: the longest the peer may now stay silent, counted from
    /// its last message alone.
    quiet: Option<Duration>,
    /// A relayed session's heartbeat ([`Heartbeat`]).
    heartbeat: Option<Heartbeat>,
    /// When the peer's present silence was last told (`None`: not yet).
    told_quiet: Option<Instant>,
    /// The peer's last message that was not a keepalive: a superseded
    /// session ends once its sender sends no more work, though it keeps
    /// the session alive.
    last_work: Instant,
}

impl<I> Core<I> {
    pub(crate) fn new(idle: Duration, heartbeat: Option<Heartbeat>, now: Instant) -> Self {
        Self {
            transmits: VecDeque::new(),
            io: VecDeque::new(),
            events: VecDeque::new(),
            idle,
            keepalive: keepalive_interval(idle),
            last_recv: now,
            last_sent: now,
            io_pending: 0,
            waiting: 0,
            last_io_done: now,
            last_flushed: now,
            failed: None,
            quiet: None,
            heartbeat,
            told_quiet: None,
            last_work: now,
        }
    }

    pub(crate) fn send(&mut self, msg: Message) {
        self.transmits.push_back(Transmit::Message(msg));
    }

    /// Queues an I/O request whose result will come back.
    pub(crate) fn request(&mut self, io: I) {
        self.io_pending += 1;
        self.io.push_back(io);
    }

    /// Queues an I/O request that has no result.
    pub(crate) fn tell(&mut self, io: I) {
        self.io.push_back(io);
    }

    /// A result came back.
    pub(crate) fn io_done(&mut self, now: Instant) {
        self.io_pending = self.io_pending.saturating_sub(1);
        self.last_io_done = now;
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.events.push_back(event);
    }

    /// A message from the peer at `now` (a keepalive: `work` false).
    pub(crate) fn received(&mut self, now: Instant, work: bool) {
        self.last_recv = now;
        self.told_quiet = None;
        if work {
            self.last_work = now;
        }
    }

    /// Bytes from the peer arrived at `at`.
    pub(crate) fn arrived(&mut self, at: Instant) {
        if at > self.last_recv {
            self.received(at, false);
        }
    }

    pub(crate) fn flushed(&mut self, now: Instant) {
        self.last_flushed = self.last_flushed.max(now);
    }

    fn silent_since(&self) -> Instant {
        self.last_recv.max(self.last_io_done).max(self.last_flushed)
    }

    /// The next thing to send; `now` is when it leaves.
    pub(crate) fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let t = self.transmits.pop_front()?;
        self.last_sent = now;
        Some(t)
    }

    /// The next timer: a keepalive while busy, the peer's silence while
    /// `expecting` something from it.
    pub(crate) fn poll_timeout(&self, expecting: bool) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        let keepalive = self.keepalive_every().map(|every| self.last_sent + every);
        let silence = (expecting && !self.busy()).then(|| self.silent_since() + self.idle);
        let quiet = self
            .quiet
            .filter(|_| !self.busy())
            .map(|q| self.work_since() + q);
        let told = self.next_quiet_told(expecting);
        [keepalive, silence, quiet, told]
            .into_iter()
            .flatten()
            .min()
    }

    /// How often a keepalive goes out now: a heartbeat's beat always (the
    /// idle limit's third while busy, if that is sooner), else only while
    /// busy.
    fn keepalive_every(&self) -> Option<Duration> {
        match (self.heartbeat, self.busy()) {
            (Some(h), true) => Some(h.every.min(self.keepalive)),
            (Some(h), false) => Some(h.every),
            (None, true) => Some(self.keepalive),
            (None, false) => None,
        }
    }

    /// When the peer's silence is next told, while something is expected
    /// of it: once it reached the heartbeat's `quiet`, then every quarter
    /// of that.
    fn next_quiet_told(&self, expecting: bool) -> Option<Instant> {
        let h = self.heartbeat.filter(|_| expecting)?;
        Some(match self.told_quiet {
            None => self.last_recv + h.quiet,
            Some(t) => {
                (t + (h.quiet / 4).max(Duration::from_millis(1))).max(self.last_recv + h.quiet)
            }
        })
    }

    /// The peer's silence is told ([`Event::PeerQuiet`]) when due — only
    /// where the driver waited on the connection and nothing came, so
    /// bytes that waited unread while it worked are no silence.
    pub(crate) fn tell_quiet(&mut self, now: Instant, expecting: bool) {
        if self.failed.is_none() && self.next_quiet_told(expecting).is_some_and(|t| now >= t) {
            let silent = now.saturating_duration_since(self.last_recv);
            self.told_quiet = Some(now);
            self.event(Event::PeerQuiet {
                millis: silent.as_millis().min(u128::from(u64::MAX)) as u64,
            });
        }
    }

    /// A newer session does this one's work: it ends once the peer has
    /// sent no work (keepalives aside) for `quiet` while this side had none
    /// of its own outstanding (now, if that is so already).
    pub(crate) fn superseded(&mut self, now: Instant, quiet: Duration) -> Result<(), SessionError> {
        self.check()?;
        self.quiet = Some(self.quiet.map_or(quiet, |q| q.min(quiet)));
        self.check_quiet(now)
    }

    /// Since when the peer has sent no work, counted from this side's own
    /// last I/O at the earliest (what it waited for meanwhile was this
    /// side's to do).
    fn work_since(&self) -> Instant {
        self.last_work.max(self.last_io_done)
    }

    fn check_quiet(&mut self, now: Instant) -> Result<(), SessionError> {
        if self.busy() {
            // Its own prepare or commit outstanding: the sender waits for
            // this side.
            return Ok(());
        }
        let silent = now.saturating_duration_since(self.work_since());
        match self.quiet {
            Some(q) if silent >= q => self.fail(SessionError::Superseded {
                millis: silent.as_millis() as u64,
            }),
            _ => Ok(()),
        }
    }

    /// Acts on the timers at `now`: a keepalive goes out, or the session
    /// fails because the peer was silent too long.
    pub(crate) fn handle_timeout(
        &mut self,
        now: Instant,
        expecting: bool,
        what: &'static str,
    ) -> Result<(), SessionError> {
        self.check()?;
        self.check_quiet(now)?;
        if self
            .keepalive_every()
            .is_some_and(|every| now >= self.last_sent + every)
        {
            self.send(Message::KeepAlive);
            // It leaves with the next poll; count it as sent now so one
            // deadline does not queue many.
            self.last_sent = now;
        }
        if expecting && !self.busy() && now >= self.silent_since() + self.idle {
            return self.fail(SessionError::Timeout {
                what,
                secs: self.idle.as_secs(),
            });
        }
        Ok(())
    }

    /// Its own work outstanding: I/O, or something it waits for.
    fn busy(&self) -> bool {
        self.io_pending > 0 || self.waiting > 0
    }

    /// Fails the session (the first error wins).
    pub(crate) fn fail<T>(&mut self, e: SessionError) -> Result<T, SessionError> {
        let e = self.failed.get_or_insert(e).clone();
        Err(e)
    }

    /// Refuses any step after a failure.
    pub(crate) fn check(&self) -> Result<(), SessionError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// A protocol error.
pub(crate) fn protocol(text: impl Into<String>) -> SessionError {
    SessionError::Protocol(text.into())
}
