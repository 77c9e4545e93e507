//! systemd's service notifications (`Type=notify`, `WatchdogSec=`): one
//! datagram to `$NOTIFY_SOCKET` says `READY=1` once `haul serve` listens or
//! `haul daemon` runs, `STOPPING=1` when a signal stops it, and
//! `WATCHDOG=1` at half the interval systemd asks for (`$WATCHDOG_USEC`,
//! when `$WATCHDOG_PID` is unset or this process). Nothing happens outside
//! systemd. The protocol (sd_notify(3)) is one datagram of `KEY=VALUE`
//! lines; it is written here with std's Unix sockets (an abstract address
//! for a leading `@`) rather than through a crate, being those few lines.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=...` lines) to systemd,
/// if it asked for notifications; a failure is logged, never fatal.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|sock| {
        let bytes = path.as_bytes();
        match bytes.strip_prefix(b"@") {
            Some(name) => {
                let addr = SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &addr)
            }
            None => sock.send_to(state.as_bytes(), &path),
        }
    });
    if let Err(e) = sent {
        tracing::warn!("cannot notify systemd at {}: {e}", path.to_string_lossy());
    }
}

/// How often systemd wants a sign of life, if it does (`$WATCHDOG_USEC`,
/// for this process).
fn watchdog_interval() -> Option<Duration> {
    if let Some(pid) = std::env::var_os("WATCHDOG_PID") {
        if pid.to_str()?.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Tells systemd the service is ready, and keeps its watchdog fed (at half
/// its interval) for as long as the runtime runs.
pub fn ready(status: &str) {
    notify(&format!("READY=1\nSTATUS={status}"));
    if let Some(every) = watchdog_interval() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every / 2);
            loop {
                tick.tick().await;
                notify("WATCHDOG=1");
            }
        });
    }
}
