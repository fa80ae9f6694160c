//! Host-side witnesses for the egress tests: a loopback listener that must
//! never be reached, and a run's egress report.
#![allow(dead_code)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::Duration;

use super::{Run, Value};

/// A plain TCP listener on host loopback that must receive nothing.
pub fn canary_listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    (l, p)
}

/// How many connections the listener took (after a moment for late ones).
pub fn accepted(l: &TcpListener) -> usize {
    std::thread::sleep(Duration::from_millis(300));
    let mut n = 0;
    loop {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// The run's `rehearsal.egress` entries.
pub fn egress(r: &Run) -> Vec<Value> {
    r.json["rehearsal"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
