//! `dryrun review`: the reviewers' terminal UI.
//!
//! Shaped as a pure state machine ([`app::App`], whose `handle_key` gives
//! back [`app::Action`]s) drawn by a pure [`view::render`], with the I/O
//! here: the terminal, and the requests, which go through the same one
//! client as every other subcommand ([`Door::send`]), so over a daemon the
//! reviewer is who the socket says and every approval passes the engine's
//! one authorisation function.

pub mod app;
pub mod evidence;
pub mod tree;
pub mod view;

#[cfg(test)]
mod tests;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::GlobalOpts;
use crate::engine::EngineOptions;
use crate::record::RunState;
use crate::request::door::{Door, LocalEngine};
use crate::request::{Diff, List, Review, Show};
use app::{Action, App, Detail, Key, Viewer};

/// How often the queue reloads by itself.
const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Why the review screen could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReviewTuiError {
    #[error(
        "dryrun review is interactive and needs a terminal on stdin and stdout; without one, use `dryrun runs --state awaiting_approval`, `dryrun show`, `dryrun approve` and `dryrun reject`"
    )]
    NotATerminal,
    #[error("{0}")]
    LocalState(String),
    #[error("the terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// `dryrun review`: the exit code.
pub(super) fn review(g: &GlobalOpts) -> i32 {
    match run(g) {
        Ok(()) => 0,
        Err(e) => {
            crate::cli::screen::warn(&format!("dryrun: {e}"));
            match e {
                ReviewTuiError::Terminal(_) => super::EXIT_INTERNAL,
                _ => super::EXIT_INVALID,
            }
        }
    }
}

fn run(g: &GlobalOpts) -> Result<(), ReviewTuiError> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(ReviewTuiError::NotATerminal);
    }
    let mut door = super::door(g);
    let label = match &door {
        Door::Daemon(c) => format!("daemon {}", c.socket().display()),
        Door::Local(_) => {
            // The same state directory and identity rules as a local
            // `dryrun approve` (sudo: the invoking user's runs).
            let dir = super::review::review_state_dir(g);
            super::review::act_as_state_dir_owner(&dir).map_err(ReviewTuiError::LocalState)?;
            let label = format!("local state {}", dir.display());
            door = Door::Local(Box::new(LocalEngine {
                state_dir: dir,
                options: EngineOptions::default(),
            }));
            label
        }
    };
    let uid = nix::unistd::geteuid().as_raw();
    // Where root is the only user, a person at a terminal no process here
    // made may approve root's own runs (`cli/presence.rs`).
    let approves_own =
        matches!(door, Door::Local(_)) && uid == 0 && super::presence::prove_presence().is_ok();
    let viewer = Viewer { uid, approves_own };
    let mut app = App::new(viewer, label);
    // Restores the terminal on a panic too (the hook try_init installs).
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, &door, &mut app);
    ratatui::try_restore()?;
    result
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    door: &Door,
    app: &mut App,
) -> Result<(), ReviewTuiError> {
    let mut pending = vec![Action::Refresh];
    let mut last_refresh = Instant::now();
    loop {
        while !pending.is_empty() {
            let batch = std::mem::take(&mut pending);
            for a in batch {
                if a == Action::Quit {
                    return Ok(());
                }
                if a == Action::Refresh {
                    last_refresh = Instant::now();
                }
                pending.extend(perform(door, app, a));
            }
        }
        terminal.draw(|f| view::render(app, f))?;
        if event::poll(Duration::from_millis(250))? {
            if let Event::Key(k) = event::read()?
                && k.kind != KeyEventKind::Release
                && let Some(key) = key_of(k.code, k.modifiers)
            {
                pending.extend(app.handle_key(key));
            }
        } else if last_refresh.elapsed() >= REFRESH_EVERY && app.mode == app::Mode::Browse {
            pending.push(Action::Refresh);
        }
    }
}

fn key_of(code: KeyCode, mods: KeyModifiers) -> Option<Key> {
    if mods.contains(KeyModifiers::CONTROL) {
        return matches!(code, KeyCode::Char('c')).then_some(Key::Interrupt);
    }
    Some(match code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Carry out one action through the door; the answer goes back into the
/// state, and may ask for more actions.
fn perform(door: &Door, app: &mut App, a: Action) -> Vec<Action> {
    match a {
        Action::Quit => Vec::new(),
        Action::Refresh => {
            let listed = list_queue(door);
            if let Ok(runs) = &listed {
                for r in runs {
                    if let Some(by) = &r.submitted_by {
                        app.user_names
                            .entry(by.uid)
                            .or_insert_with(|| name_of(by.uid));
                    }
                }
            }
            let me = app.viewer.uid;
            app.user_names.entry(me).or_insert_with(|| name_of(me));
            app.on_queue(listed, crate::engine::unix_now())
        }
        Action::Load(id) => {
            let loaded = door
                .send(&Show {
                    id: id.clone(),
                    wait_s: None,
                })
                .map_err(|e| e.to_string())
                .map(|record| Detail {
                    record,
                    diff: door.send(&Diff { id }).map_err(|e| e.to_string()),
                });
            if let Ok(d) = &loaded {
                for a in &d.record.approvals {
                    app.user_names
                        .entry(a.by.uid)
                        .or_insert_with(|| name_of(a.by.uid));
                }
            }
            app.on_detail(loaded);
            Vec::new()
        }
        Action::Review {
            id,
            action,
            note,
            override_block,
        } => {
            let mut caller = crate::request::serve::Caller::local();
            if app.viewer.approves_own {
                caller.auth = crate::engine::ReviewerAuth::LocalPresence;
            }
            let answer = door
                .send_as(
                    &Review {
                        id,
                        action,
                        note,
                        override_block,
                    },
                    &caller,
                )
                .map_err(|e| e.to_string());
            app.on_review(action, override_block, answer)
        }
    }
}

/// The queue: runs awaiting approval (a run that did not wait, because
/// only its agent can act on what stopped it, is never in it).
fn list_queue(door: &Door) -> Result<Vec<crate::record::RunRecord>, String> {
    door.send(&List {
        state: Some(RunState::AwaitingApproval),
        limit: None,
    })
    .map(|l| l.runs)
    .map_err(|e| e.to_string())
}

fn name_of(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => format!("uid {uid}"),
    }
}

/// Draw the review screen for run records given as JSON (as `dryrun show
/// --json` prints them) on ratatui's `TestBackend`, after pressing `keys`;
/// the screen as text, one line per row. For tests that render real
/// records; `diffs` are `dryrun diff --json` answers, by run id.
#[doc(hidden)]
pub fn render_records_for_test(
    records_json: &[String],
    diffs_json: &[(String, String)],
    viewer_uid: u32,
    keys: &str,
    width: u16,
    height: u16,
) -> String {
    use ratatui::backend::TestBackend;
    let records: Vec<crate::record::RunRecord> = records_json
        .iter()
        .map(|t| serde_json::from_str(t).expect("a run record"))
        .collect();
    let mut app = App::new(
        Viewer {
            uid: viewer_uid,
            approves_own: false,
        },
        "test".into(),
    );
    let pending = app.on_queue(Ok(records.clone()), crate::engine::unix_now());
    let apply = |app: &mut App, pending: Vec<Action>| {
        for a in pending {
            if let Action::Load(id) = a
                && let Some(r) = records.iter().find(|r| r.run_id == id.as_str())
            {
                let diff = diffs_json
                    .iter()
                    .find(|(rid, _)| rid == id.as_str())
                    .map(|(_, t)| serde_json::from_str(t).map_err(|e| e.to_string()))
                    .unwrap_or_else(|| Err("no diff given".into()));
                app.on_detail(Ok(Detail {
                    record: r.clone(),
                    diff,
                }));
            }
        }
    };
    apply(&mut app, pending);
    for c in keys.chars() {
        let k = match c {
            '\n' => Key::Enter,
            '\u{1b}' => Key::Esc,
            c => Key::Char(c),
        };
        let acts = app.handle_key(k);
        apply(&mut app, acts);
    }
    let mut t = ratatui::Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    t.draw(|f| view::render(&app, f)).expect("draws");
    buffer_text(t.backend().buffer())
}

/// A drawn buffer as text, one line per row (trailing blanks trimmed).
pub(crate) fn buffer_text(b: &ratatui::buffer::Buffer) -> String {
    let mut out = String::new();
    for y in 0..b.area.height {
        let mut line = String::new();
        for x in 0..b.area.width {
            line.push_str(b[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
