//! The hand-over between the command (after X6) and the sandbox's init
//! (P8): the command writes one fixed-size hello on [`HELLO_FD`] with its
//! seccomp listener's descriptor number and what Landlock's `restrict_self`
//! returned at X5; init copies the listener out of the command's fd table,
//! checks the Landlock outcome against the promise and only then writes
//! [`ACK`] on [`ACK_FD`]. Without that byte the command does not exec.

use std::io;
use std::os::fd::{AsFd, RawFd};

use super::super::landlock::{Enforcement, LandlockOutcome};

/// Fixed descriptor numbers in the command (closed before exec).
pub(super) const HELLO_FD: RawFd = 3;
pub(super) const ACK_FD: RawFd = 4;
/// The byte that lets the command exec.
pub(super) const ACK: u8 = b'k';

const HELLO_LEN: usize = 9;

/// What the command tells init before it execs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    /// The seccomp listener's fd number in the command's table.
    pub listener: RawFd,
    pub landlock: LandlockOutcome,
}

impl Hello {
    pub(super) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&self.listener.to_ne_bytes());
        b[4] = self.landlock.status.to_byte();
        b[5..].copy_from_slice(&self.landlock.abi.to_ne_bytes());
        b
    }

    pub(super) fn decode(b: &[u8; HELLO_LEN]) -> io::Result<Hello> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed command hello");
        let status = Enforcement::from_byte(b[4]).ok_or_else(bad)?;
        let listener = RawFd::from_ne_bytes(b[..4].try_into().map_err(|_| bad())?);
        let abi = u32::from_ne_bytes(b[5..].try_into().map_err(|_| bad())?);
        Ok(Hello {
            listener,
            landlock: LandlockOutcome { status, abi },
        })
    }
}

/// Init's side: the command's hello, or `None` when the command ended (or
/// failed before X6) without sending one.
pub(super) fn read_hello(fd: impl AsFd) -> io::Result<Option<Hello>> {
    let mut buf = [0u8; HELLO_LEN];
    let mut got = 0;
    while got < HELLO_LEN {
        match nix::unistd::read(fd.as_fd(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    match got {
        0 => Ok(None),
        HELLO_LEN => Hello::decode(&buf).map(Some),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the command's hello was cut short",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_round_trips_and_a_bad_status_byte_is_refused() {
        let h = Hello {
            listener: 7,
            landlock: LandlockOutcome {
                status: Enforcement::Fully,
                abi: 7,
            },
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[4] = 42;
        assert!(Hello::decode(&b).is_err());
    }

    #[test]
    fn init_reads_a_hello_or_notices_the_command_never_sent_one() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let h = Hello {
            listener: 5,
            landlock: LandlockOutcome::NONE,
        };
        nix::unistd::write(&w, &h.encode()).unwrap();
        drop(w);
        assert_eq!(read_hello(&r).unwrap(), Some(h));
        assert_eq!(read_hello(&r).unwrap(), None);
    }
}
