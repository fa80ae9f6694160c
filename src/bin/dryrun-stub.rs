//! `dryrun-stub`: the stub scripts' interpreter inside a rehearsal, run
//! for every call of a stubbed tool (`git`, `curl`, `npm`, ...). The same
//! code as `dryrun __stub-exec`, in a binary that holds nothing else: a
//! call starts a program of a few megabytes instead of the whole of
//! dryrun (about a millisecond less per call). Installed beside `dryrun`;
//! without it, the stubs run `dryrun` itself.
#![deny(unsafe_code)]

fn main() {
    dryrun::sandbox::run_small_stub(std::env::args_os().collect());
}
