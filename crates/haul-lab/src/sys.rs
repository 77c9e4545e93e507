//! The few raw system calls the lab needs: root check, entering a network
//! namespace, TUN devices, non-blocking I/O, `ppoll`, process liveness.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `true` when the effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Moves the calling thread into the named network namespace.
pub fn enter_netns(netns: &str) -> io::Result<()> {
    let f = File::open(format!("/run/netns/{netns}"))?;
    // SAFETY: f is an open namespace file; setns only affects this thread.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// Runs `f` on a fresh thread that lives in the named network namespace.
/// Sockets and devices it creates belong to that namespace for good.
pub fn in_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let netns = netns.to_string();
    std::thread::spawn(move || {
        enter_netns(&netns)?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

// The ioctl number of TUNSETIFF differs by architecture (its direction bits
// do): libc has it right for each target.
const IFF_FLAGS: libc::c_short = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates a TUN device (no packet info, raw IP) named `name` in the
/// calling thread's network namespace. It lives as long as the fd.
pub fn create_tun(name: &str) -> io::Result<OwnedFd> {
    let path = c"/dev/net/tun";
    // SAFETY: path is a valid C string.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_FLAGS,
        _pad: [0; 22],
    };
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: req is a properly sized ifreq for TUNSETIFF.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    set_nonblocking(fd.as_raw_fd())?;
    Ok(fd)
}

/// Puts a file descriptor into non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

/// Reads one packet; `Ok(None)` when none is waiting.
pub fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// Writes one packet; `false` if the kernel refused it.
pub fn write_packet(fd: RawFd, pkt: &[u8]) -> bool {
    // SAFETY: pkt is valid for pkt.len() bytes.
    let n = unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
    n == pkt.len() as isize
}

/// Waits for events on `fds` for at most `timeout_ns` (rounded to 1 µs).
pub fn ppoll(fds: &mut [libc::pollfd], timeout_ns: u64) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: fds is a valid slice of pollfd; ts lives across the call.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// Asks for precise timer wake-ups on this thread (1 ns slack).
pub fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// The start time of a process (clock ticks since boot), to tell a live
/// process from a recycled pid. `None` for no process, or a dead one not
/// yet reaped (a zombie, state `Z`, or `X`).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields resume after the ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// A signalfd that reports SIGINT, SIGTERM and SIGHUP, which this thread
/// (and threads it spawns later) then no longer receive as signals.
pub fn termination_signalfd() -> io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local, zeroed set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        let fd = cvt(libc::signalfd(
            -1,
            &set,
            libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Starts a new session so terminal signals (Ctrl-C) do not reach us.
pub fn setsid() {
    // SAFETY: setsid has no memory-safety preconditions.
    unsafe {
        libc::setsid();
    }
}

#[cfg(test)]
mod process_tests {
    use super::*;

    #[test]
    fn a_zombie_is_not_alive() {
        assert!(process_start_time(std::process::id()).is_some());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        // Exited, not yet reaped: a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while process_start_time(child.id()).is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(process_start_time(child.id()), None);
        child.wait().unwrap();
    }
}
