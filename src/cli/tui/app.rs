//! The review screen's state and what each key does to it. Pure: no
//! terminal, no requests. A key gives back the [`Action`]s the I/O loop
//! carries out (through the same requests as `dryrun approve`/`reject`),
//! and their answers come back through the `on_*` methods.

use crate::engine::textdiff::RunDiff;
use crate::model::Decision;
use crate::record::RunRecord;
use crate::request::{ReviewAction, RunId};

/// The longest note the input line takes.
pub const NOTE_MAX: usize = 1000;

/// A key press, decoupled from the terminal library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C: leave from anywhere.
    Interrupt,
}

/// What the I/O loop should do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Reload the queue (and the selected run).
    Refresh,
    /// Load a run's record and diff for the detail pane.
    Load(RunId),
    /// Approve or reject through the one review request.
    Review {
        id: RunId,
        action: ReviewAction,
        note: String,
        override_block: bool,
    },
    Quit,
}

/// What the screen is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    Browse,
    Help,
    /// The override confirmation for a blocked run.
    ConfirmOverride,
    /// Typing a note; Enter sends the review.
    Note {
        action: ReviewAction,
        override_block: bool,
        text: String,
    },
}

/// The status line: what just happened, or what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub text: String,
    pub error: bool,
}

/// The selected run, as loaded.
#[derive(Debug)]
pub struct Detail {
    pub record: RunRecord,
    /// The text diffs, or why they could not be loaded.
    pub diff: Result<RunDiff, String>,
}

/// Who is looking: the reviewer's uid (the daemon knows them by the same
/// uid through the socket; locally it is this process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Viewer {
    pub uid: u32,
    /// Where root is the only user: a person proved presence at this
    /// terminal (`cli/presence.rs`), so root may approve root's own runs,
    /// each after typing back a code shown in the note line.
    pub approves_own: bool,
}

pub struct App {
    pub viewer: Viewer,
    /// Runs waiting for a person, oldest first.
    pub queue: Vec<RunRecord>,
    pub selected: usize,
    pub detail: Option<Detail>,
    pub mode: Mode,
    pub status: Option<Status>,
    /// Lines the detail pane is scrolled down by.
    pub scroll: u16,
    /// Show every path of the change tree (no collapsing).
    pub expand_all: bool,
    /// Seconds since the epoch at the last refresh (ages are counted from it).
    pub now_unix: u64,
    /// Names of uids, resolved by the I/O loop.
    pub user_names: std::collections::BTreeMap<u32, String>,
    /// Where the requests go (shown in the title).
    pub door_label: String,
    /// The run a confirmation or note was begun for: the decision is sent
    /// only if that run is still the one selected (a refresh that moves the
    /// selection, e.g. because the submitter withdrew it, cancels it).
    pub pinned: Option<String>,
    /// The run this reviewer just decided (it leaves the queue as expected).
    pub decided: Option<String>,
    /// The code the note line must start with (root approving its own
    /// run where it is the only user).
    pub confirm_code: Option<String>,
}

/// Would the queue hold this run? The queue's one rule
/// ([`crate::engine::in_review_queue`]): waiting for a person and not
/// superseded by its submitter's next run.
pub fn waits_for_a_person(r: &RunRecord) -> bool {
    crate::engine::in_review_queue(r)
}

pub fn decision(r: &RunRecord) -> Option<Decision> {
    r.verdict.as_ref().map(|v| v.decision)
}

/// May it be approved only with an explicit override? Its verdict was
/// `blocked` (the runs a record's `override_required: true` marks, where
/// records carry that field; when they do, check it here as well).
pub fn override_required(r: &RunRecord) -> bool {
    decision(r) == Some(Decision::Blocked)
}

impl App {
    pub fn new(viewer: Viewer, door_label: String) -> App {
        App {
            viewer,
            queue: Vec::new(),
            selected: 0,
            detail: None,
            mode: Mode::Browse,
            status: None,
            scroll: 0,
            expand_all: false,
            now_unix: 0,
            user_names: Default::default(),
            door_label,
            pinned: None,
            decided: None,
            confirm_code: None,
        }
    }

    pub fn selected_run(&self) -> Option<&RunRecord> {
        self.queue.get(self.selected)
    }

    /// The selected run's loaded record (fresher than the queue's), if any.
    pub fn current(&self) -> Option<&RunRecord> {
        let sel = self.selected_run()?;
        match &self.detail {
            Some(d) if d.record.run_id == sel.run_id => Some(&d.record),
            _ => Some(sel),
        }
    }

    /// Did the viewer submit the selected run (as far as the record tells)?
    pub fn viewer_submitted(&self, r: &RunRecord) -> bool {
        r.submitted_by.as_ref().map(|a| a.uid) == Some(self.viewer.uid)
    }

    /// Is approving `r` refused because the viewer submitted it (no
    /// single-user proof)?
    pub fn own_run_refused(&self, r: &RunRecord) -> bool {
        self.viewer_submitted(r) && !self.viewer.approves_own
    }

    /// A code to type back for approving the viewer's own run, or `None`.
    fn code_for(&self, r: &RunRecord) -> Option<String> {
        if !self.viewer_submitted(r) || !self.viewer.approves_own {
            return None;
        }
        const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
        let mut raw = [0u8; 6];
        getrandom::fill(&mut raw).ok()?;
        Some(
            raw.iter()
                .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
                .collect(),
        )
    }

    fn error(&mut self, text: impl Into<String>) {
        self.status = Some(Status {
            text: text.into(),
            error: true,
        });
    }

    fn info(&mut self, text: impl Into<String>) {
        self.status = Some(Status {
            text: text.into(),
            error: false,
        });
    }

    fn load_selected(&mut self) -> Vec<Action> {
        self.scroll = 0;
        match self
            .selected_run()
            .and_then(|r| RunId::parse(&r.run_id).ok())
        {
            Some(id) => vec![Action::Load(id)],
            None => Vec::new(),
        }
    }

    fn select(&mut self, to: usize) -> Vec<Action> {
        if self.queue.is_empty() {
            return Vec::new();
        }
        let to = to.min(self.queue.len() - 1);
        if to == self.selected && self.detail.is_some() {
            return Vec::new();
        }
        self.selected = to;
        self.load_selected()
    }

    /// What `key` does.
    pub fn handle_key(&mut self, key: Key) -> Vec<Action> {
        if key == Key::Interrupt {
            return vec![Action::Quit];
        }
        match self.mode.clone() {
            Mode::Help => {
                if matches!(key, Key::Esc | Key::Char('?') | Key::Char('q')) {
                    self.mode = Mode::Browse;
                }
                Vec::new()
            }
            Mode::ConfirmOverride => self.key_confirm(key),
            Mode::Note {
                action,
                override_block,
                text,
            } => self.key_note(key, action, override_block, text),
            Mode::Browse => self.key_browse(key),
        }
    }

    fn key_browse(&mut self, key: Key) -> Vec<Action> {
        match key {
            Key::Char('q') => vec![Action::Quit],
            Key::Char('?') => {
                self.mode = Mode::Help;
                Vec::new()
            }
            Key::Char('r') => vec![Action::Refresh],
            Key::Up | Key::Char('k') => self.select(self.selected.saturating_sub(1)),
            Key::Down | Key::Char('j') => self.select(self.selected + 1),
            Key::Home | Key::Char('g') => self.select(0),
            Key::End | Key::Char('G') => self.select(usize::MAX),
            Key::PageDown | Key::Char(' ') => {
                self.scroll = self.scroll.saturating_add(10);
                Vec::new()
            }
            Key::PageUp | Key::Char('b') => {
                self.scroll = self.scroll.saturating_sub(10);
                Vec::new()
            }
            Key::Char('e') => {
                self.expand_all = !self.expand_all;
                Vec::new()
            }
            Key::Char('a') => self.begin_approve(),
            Key::Char('x') | Key::Char('R') => self.begin_reject(),
            Key::Char('o') => self.begin_override(),
            _ => Vec::new(),
        }
    }

    fn begin_approve(&mut self) -> Vec<Action> {
        let Some(r) = self.current() else {
            self.error("nothing selected: the queue is empty");
            return Vec::new();
        };
        let id = r.run_id.clone();
        if self.own_run_refused(r) {
            // The engine decides; its refusal is what the status line shows.
            return self.review_now(&id, ReviewAction::Approve, String::new(), false);
        }
        let code = self.code_for(r);
        let blocked = override_required(r);
        self.confirm_code = code;
        if blocked {
            self.error(format!(
                "run {id} was blocked: approving it is an override; press o to read what that means"
            ));
            return Vec::new();
        }
        self.pinned = Some(id);
        self.mode = Mode::Note {
            action: ReviewAction::Approve,
            override_block: false,
            text: String::new(),
        };
        Vec::new()
    }

    fn begin_reject(&mut self) -> Vec<Action> {
        let Some(r) = self.current() else {
            self.error("nothing selected: the queue is empty");
            return Vec::new();
        };
        self.pinned = Some(r.run_id.clone());
        self.confirm_code = None;
        self.mode = Mode::Note {
            action: ReviewAction::Reject,
            override_block: false,
            text: String::new(),
        };
        Vec::new()
    }

    fn begin_override(&mut self) -> Vec<Action> {
        let Some(r) = self.current() else {
            self.error("nothing selected: the queue is empty");
            return Vec::new();
        };
        let id = r.run_id.clone();
        if self.own_run_refused(r) {
            return self.review_now(&id, ReviewAction::Approve, String::new(), true);
        }
        let code = self.code_for(r);
        let blocked = override_required(r);
        self.confirm_code = code;
        if !blocked {
            self.error(format!(
                "run {id} was not blocked: there is nothing to override; approve it with a"
            ));
            return Vec::new();
        }
        self.pinned = Some(id);
        self.mode = Mode::ConfirmOverride;
        Vec::new()
    }

    /// Is the run a confirmation or note was begun for still the selected
    /// (and loaded) one? If not, back to browsing, nothing sent, and say so.
    fn still_pinned(&mut self) -> bool {
        let pinned = self.pinned.take();
        let now = self.current().map(|r| r.run_id.clone());
        if pinned.is_some() && pinned == now {
            self.pinned = pinned;
            return true;
        }
        self.mode = Mode::Browse;
        self.error(format!(
            "run {} is no longer the selected run (the queue changed); nothing was sent",
            pinned.unwrap_or_default()
        ));
        false
    }

    fn review_now(
        &mut self,
        id: &str,
        action: ReviewAction,
        note: String,
        override_block: bool,
    ) -> Vec<Action> {
        match RunId::parse(id) {
            Ok(id) => vec![Action::Review {
                id,
                action,
                note,
                override_block,
            }],
            Err(e) => {
                self.error(e.to_string());
                Vec::new()
            }
        }
    }

    fn key_confirm(&mut self, key: Key) -> Vec<Action> {
        match key {
            Key::Char('y') | Key::Char('Y') => {
                if !self.still_pinned() {
                    return Vec::new();
                }
                self.mode = Mode::Note {
                    action: ReviewAction::Approve,
                    override_block: true,
                    text: String::new(),
                };
            }
            Key::Char('n') | Key::Char('N') | Key::Esc | Key::Char('q') => {
                self.mode = Mode::Browse;
                self.info("override cancelled; nothing was approved");
            }
            _ => {}
        }
        Vec::new()
    }

    fn key_note(
        &mut self,
        key: Key,
        action: ReviewAction,
        override_block: bool,
        mut text: String,
    ) -> Vec<Action> {
        match key {
            Key::Esc => {
                self.mode = Mode::Browse;
                self.confirm_code = None;
                self.info("cancelled; nothing was sent");
                return Vec::new();
            }
            Key::Enter => {
                self.mode = Mode::Browse;
                let Some(id) = self.current().map(|r| r.run_id.clone()) else {
                    self.error("the run is no longer in the queue; nothing was sent");
                    return Vec::new();
                };
                if !self.still_pinned() {
                    return Vec::new();
                }
                if action == ReviewAction::Approve
                    && let Some(code) = self.confirm_code.take()
                {
                    // Root's own run: the code shown, typed back, first.
                    let Some(note) = text.trim().strip_prefix(code.as_str()) else {
                        self.error("the confirmation code did not match; nothing was approved");
                        return Vec::new();
                    };
                    let note = note.trim().to_string();
                    return self.review_now(&id, action, note, override_block);
                }
                return self.review_now(&id, action, text, override_block);
            }
            Key::Backspace => {
                text.pop();
            }
            Key::Char(c) if !c.is_control() && text.chars().count() < NOTE_MAX => text.push(c),
            _ => {}
        }
        self.mode = Mode::Note {
            action,
            override_block,
            text,
        };
        Vec::new()
    }

    // ------------------------------------------------ answers from the I/O

    /// The queue as listed (any order; kept oldest first).
    pub fn on_queue(
        &mut self,
        listed: Result<Vec<RunRecord>, String>,
        now_unix: u64,
    ) -> Vec<Action> {
        self.now_unix = now_unix;
        let mut runs = match listed {
            Ok(r) => r,
            Err(e) => {
                self.error(format!("listing the queue failed: {e}"));
                return Vec::new();
            }
        };
        runs.retain(waits_for_a_person);
        runs.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.run_id.cmp(&b.run_id))
        });
        runs.dedup_by(|a, b| a.run_id == b.run_id);
        let keep = self.selected_run().map(|r| r.run_id.clone());
        self.queue = runs;
        let at = keep
            .as_ref()
            .and_then(|id| self.queue.iter().position(|r| &r.run_id == id));
        self.selected = at.unwrap_or(self.selected.min(self.queue.len().saturating_sub(1)));
        // The run being read left the queue (its submitter withdrew it, it
        // expired, another reviewer decided): say so, or the next key would
        // act on a run the reviewer has not read.
        let decided = self.decided.take();
        if let (Some(gone), None, Some(now)) = (keep, at, self.selected_run())
            && decided.as_ref() != Some(&gone)
        {
            let now = now.run_id.clone();
            self.error(format!(
                "run {gone} left the queue; the selection moved to run {now}: read its evidence before deciding"
            ));
        }
        if self.queue.is_empty() {
            self.detail = None;
            return Vec::new();
        }
        // Load the selected run again only when it is another run or it
        // changed (state, reviews) since it was loaded.
        let fresh = match (&self.detail, self.selected_run()) {
            (Some(d), Some(sel)) => {
                d.record.run_id == sel.run_id
                    && d.record.state == sel.state
                    && d.record.approvals.len() == sel.approvals.len()
            }
            _ => false,
        };
        if fresh {
            return Vec::new();
        }
        self.load_selected()
    }

    /// A run's record and diff, as loaded.
    pub fn on_detail(&mut self, loaded: Result<Detail, String>) {
        match loaded {
            Ok(d) => {
                if self.selected_run().map(|r| r.run_id.as_str()) == Some(d.record.run_id.as_str())
                {
                    self.detail = Some(d);
                }
            }
            Err(e) => self.error(format!("loading the run failed: {e}")),
        }
    }

    /// The answer to a review.
    pub fn on_review(
        &mut self,
        action: ReviewAction,
        override_block: bool,
        answer: Result<RunRecord, String>,
    ) -> Vec<Action> {
        match answer {
            Ok(r) => {
                let what = match (action, override_block) {
                    (ReviewAction::Approve, true) => "approved (override of the block)",
                    (ReviewAction::Approve, false) => "approved",
                    (ReviewAction::Reject, _) => "rejected",
                    (ReviewAction::Withdraw, _) => "withdrawn",
                };
                self.info(format!("run {} {what}; now {}", r.run_id, r.state.as_str()));
                self.decided = Some(r.run_id.clone());
                vec![Action::Refresh]
            }
            Err(e) => {
                self.error(format!("refused: {e}"));
                Vec::new()
            }
        }
    }
}
