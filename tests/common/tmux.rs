//! A terminal for the TUI tests: `dryrun review` in a tmux server of the
//! test's own (`-L NAME`), keys in with send-keys, the screen out with
//! capture-pane; the pane's title and tmux's paste buffer show whether an
//! escape sequence (OSC 0/2, OSC 52) reached the terminal. Killed when dropped.

use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tmux {
    pub server: String,
    pub session: String,
}

impl Tmux {
    /// `command` (one shell string) in a new 200x50 session. The pane may
    /// be renamed and may set the clipboard by escape sequences, so that a
    /// sequence that leaks is seen (`title`, `buffer`).
    pub fn start(tag: &str, command: &str) -> Tmux {
        assert!(
            Command::new(super::tool("tmux", "tmux"))
                .arg("-V")
                .output()
                .is_ok(),
            "tmux is required for the review TUI tests (.ci/run installs it)"
        );
        let t = Tmux {
            server: format!("dryrun-test-{}-{tag}", std::process::id()),
            session: "review".into(),
        };
        let st = Command::new(super::tool("tmux", "tmux"))
            .args(["-L", &t.server, "-f", "/dev/null"])
            .args([
                "new-session",
                "-d",
                "-s",
                &t.session,
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg(command)
            .status()
            .unwrap();
        assert!(st.success(), "tmux new-session failed");
        for opt in [["allow-rename", "on"], ["set-clipboard", "on"]] {
            let _ = t.tmux().args(["set", "-g", opt[0], opt[1]]).status();
        }
        t
    }

    pub fn tmux(&self) -> Command {
        let mut c = Command::new(super::tool("tmux", "tmux"));
        c.args(["-L", &self.server]);
        c
    }

    /// Keys as tmux names them (`j`, `Enter`, `Escape`).
    pub fn keys(&self, keys: &[&str]) {
        let st = self
            .tmux()
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Text typed literally.
    pub fn type_text(&self, text: &str) {
        let st = self
            .tmux()
            .args(["send-keys", "-t", &self.session, "-l", text])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// The screen as text.
    pub fn screen(&self) -> String {
        self.capture(false)
    }

    /// The screen with the attributes tmux draws it with, as escape
    /// sequences (SGR only: anything else would be a sequence that leaked).
    pub fn screen_with_escapes(&self) -> String {
        self.capture(true)
    }

    fn capture(&self, escapes: bool) -> String {
        let mut c = self.tmux();
        c.args(["capture-pane", "-p", "-t", &self.session]);
        if escapes {
            c.arg("-e");
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    }

    /// The pane's title (set by OSC 0/2).
    pub fn title(&self) -> String {
        let out = self
            .tmux()
            .args(["display", "-p", "-t", &self.session, "#{pane_title}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// tmux's paste buffer (set by OSC 52 with `set-clipboard on`).
    pub fn buffer(&self) -> String {
        let out = self.tmux().args(["show-buffer"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen once the TUI has finished drawing it: a capture can
    /// land while a frame is half written to the terminal (its top lines
    /// the new run's, the rest still the previous run's), so take captures
    /// until two in a row, 150 ms apart, are the same.
    pub fn settled(&self) -> String {
        let t0 = Instant::now();
        let mut last = self.screen();
        loop {
            std::thread::sleep(Duration::from_millis(150));
            let s = self.screen();
            if s == last || t0.elapsed() > Duration::from_secs(10) {
                return s;
            }
            last = s;
        }
    }

    /// Wait (with a deadline) until the drawn screen satisfies `f`; the screen.
    pub fn wait_for(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if f(&s) {
                let s = self.settled();
                if f(&s) {
                    return s;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_text(&self, text: &str) -> String {
        self.wait_for(text, |s| s.contains(text))
    }

    /// Select run `id` in the queue: first run, then down until the
    /// evidence pane shows it.
    pub fn select(&self, id: &str) -> String {
        self.keys(&["g"]);
        let header = format!("run {id}");
        for _ in 0..20 {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(2) {
                let s = self.screen();
                if s.contains(&header) {
                    let s = self.settled();
                    if s.contains(&header) {
                        return s;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            self.keys(&["j"]);
        }
        panic!("run {id} never showed; the screen:\n{}", self.screen());
    }

    pub fn alive(&self) -> bool {
        self.tmux()
            .args(["has-session", "-t", &self.session])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .tmux()
            .arg("kill-server")
            .stderr(std::process::Stdio::null())
            .status();
    }
}
