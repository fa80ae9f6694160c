//! The review screen's pure parts: the change tree's collapsing, the order
//! of reasons, what keys do, and the screen drawn on ratatui's
//! `TestBackend` from a record a real rehearsal wrote
//! (`tests/fixtures/records/rehearsed.json`), given the evidence of the
//! case at hand. `tests/review_tui.rs` draws records of fresh rehearsals.

use ratatui::backend::TestBackend;

use super::app::{Action, App, Detail, Key, Mode, Viewer};
use super::tree::{Flag, TreeLine, change_tree};
use super::{buffer_text, view};
use crate::model::{Change, ChangeKind, Decision, FileType};
use crate::record::{RunRecord, RunState};
use crate::request::ReviewAction;

const FIXTURE: &str = include_str!("../../../tests/fixtures/records/rehearsed.json");

fn change(path: &str, kind: ChangeKind) -> Change {
    Change::new(path.as_bytes(), kind, FileType::File)
}

/// 300 reformatted files under `fmt/`, a surprise config, a forbidden key.
fn formatted_changes() -> Vec<Change> {
    let mut v: Vec<Change> = (0..300)
        .map(|i| change(&format!("fmt/f{i:03}.txt"), ChangeKind::Modified))
        .collect();
    v.push(change("config/app.yaml", ChangeKind::Created));
    v.push(change("secrets/key", ChangeKind::Modified));
    v
}

/// The fixture record (a real rehearsal's), given this case's evidence.
fn record(id_suffix: &str, submitter_uid: u32, decision: Decision) -> RunRecord {
    let mut r: RunRecord = serde_json::from_str(FIXTURE).unwrap();
    r.run_id = format!("r6b053099-03248ae84f21a6{id_suffix}");
    r.state = RunState::AwaitingApproval;
    r.override_required = decision == Decision::Blocked;
    if let Some(a) = r.submitted_by.as_mut() {
        a.uid = submitter_uid;
    } else {
        r.submitted_by = Some(crate::journal::Actor {
            uid: submitter_uid,
            gid: submitter_uid,
            pid: None,
            via: "daemon".into(),
        });
    }
    let reh = r.rehearsal.as_mut().unwrap();
    reh.changes = formatted_changes();
    let v = r.verdict.as_mut().unwrap();
    v.decision = decision;
    v.surprise_paths = vec!["config/app.yaml".into()];
    v.forbidden_paths_touched = vec!["secrets/key".into()];
    // Deliberately not forbidden-first: the screen must put it first.
    v.reasons = vec![
        "[intent.expected_writes] created config/app.yaml but intent only allowed fmt/**".into(),
        "[intent.forbidden_paths] modified secrets/key which intent forbids (secrets/)".into(),
    ];
    r
}

fn flag_of(changes: &[Change]) -> impl Fn(usize) -> Flag + '_ {
    |i| match changes[i].path.as_str() {
        "secrets/key" => Flag::Forbidden,
        "config/app.yaml" => Flag::Surprise,
        _ => Flag::Ordinary,
    }
}

#[test]
fn three_hundred_ordinary_files_are_one_line_and_flagged_paths_come_first() {
    let changes = formatted_changes();
    let tree = change_tree(&changes, flag_of(&changes), false);
    assert_eq!(tree.len(), 3, "{tree:?}");
    assert!(
        matches!(tree[0], TreeLine::Path { flag: Flag::Forbidden, index, .. } if changes[index].path == "secrets/key"),
        "{tree:?}"
    );
    assert!(
        matches!(tree[1], TreeLine::Path { flag: Flag::Surprise, index, .. } if changes[index].path == "config/app.yaml"),
        "{tree:?}"
    );
    match &tree[2] {
        TreeLine::Collapsed { dir, counts, .. } => {
            assert_eq!(dir, "fmt/");
            assert_eq!(counts.total(), 300);
            assert_eq!(counts.describe(), "300 modified");
        }
        other => panic!("{other:?}"),
    }
    // Expanded, every path is there.
    let all = change_tree(&changes, flag_of(&changes), true);
    assert_eq!(all.len(), 302);
}

#[test]
fn a_flagged_file_inside_a_big_directory_is_never_inside_the_count() {
    let mut changes = formatted_changes();
    changes.push(change("fmt/deep/.env", ChangeKind::Created));
    let flags = |i: usize| {
        if changes[i].path == "fmt/deep/.env" {
            Flag::Surprise
        } else {
            Flag::Ordinary
        }
    };
    let tree = change_tree(&changes, flags, false);
    let shown: Vec<&str> = tree
        .iter()
        .filter_map(|t| match t {
            TreeLine::Path { index, .. } => Some(changes[*index].path.as_str()),
            TreeLine::Collapsed { .. } => None,
        })
        .collect();
    assert_eq!(shown[0], "fmt/deep/.env", "{tree:?}");
    let collapsed: usize = tree
        .iter()
        .map(|t| match t {
            TreeLine::Collapsed {
                dir,
                counts,
                only_here,
                ..
            } => {
                assert_eq!(dir, "fmt/");
                assert!(only_here);
                counts.total()
            }
            TreeLine::Path { .. } => 0,
        })
        .sum();
    assert_eq!(collapsed, 300);
    // A few ordinary changes are shown as they are.
    let few = vec![
        change("a.txt", ChangeKind::Modified),
        change("b/c.txt", ChangeKind::Created),
    ];
    let t = change_tree(&few, |_| Flag::Ordinary, false);
    assert_eq!(t.len(), 2);
    assert!(t.iter().all(|l| matches!(l, TreeLine::Path { .. })));
}

fn draw(app: &App, w: u16, h: u16) -> String {
    let mut t = ratatui::Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| view::render(app, f)).unwrap();
    buffer_text(t.backend().buffer())
}

fn loaded(app: &mut App, records: Vec<RunRecord>) {
    let acts = app.on_queue(Ok(records.clone()), 1_900_000_000);
    for a in acts {
        if let Action::Load(id) = a {
            let r = records.iter().find(|r| r.run_id == id.as_str()).unwrap();
            app.on_detail(Ok(Detail {
                record: r.clone(),
                diff: Err("not loaded in this test".into()),
            }));
        }
    }
}

#[test]
fn the_screen_shows_the_forbidden_path_first_and_one_collapsed_line() {
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![record("f4", 1000, Decision::Blocked)]);
    let screen = draw(&app, 200, 60);
    let at = |s: &str| {
        screen
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not on\n{screen}"))
    };
    assert!(
        at("[intent.forbidden_paths]") < at("[intent.expected_writes]"),
        "{screen}"
    );
    assert!(at("secrets/key (file)  FORBIDDEN") < at("config/app.yaml (file)  SURPRISE"));
    assert!(screen.contains("fmt/ … 300 ordinary change(s) collapsed (300 modified)"));
    assert!(!screen.contains("fmt/f001.txt"), "{screen}");
    assert!(screen.contains("override required"));
    // 80 columns: the panes stack and still draw.
    let narrow = draw(&app, 80, 40);
    assert!(narrow.contains("queue"), "{narrow}");
}

#[test]
fn hostile_names_never_reach_the_terminal_raw() {
    let mut r = record("f4", 1000, Decision::NeedsApproval);
    r.command = "echo \u{1b}]0;pwned\u{7} \u{202e}txt".into();
    r.rehearsal.as_mut().unwrap().changes[0] = change("fmt/\u{1b}[2Jx", ChangeKind::Created);
    r.intent.reviewer_note = Some("fine\u{1b}[31m".into());
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    app.expand_all = true;
    loaded(&mut app, vec![r]);
    let screen = draw(&app, 200, 50);
    assert!(!screen.contains('\u{1b}'), "{screen}");
    assert!(!screen.contains('\u{202e}'), "{screen}");
    assert!(
        screen.contains("echo ⟦ESC⟧]0;pwned⟦BEL⟧ ⟦U+202E⟧txt"),
        "{screen}"
    );
    assert!(screen.contains("fmt/⟦ESC⟧[2Jx"), "{screen}");
}

#[test]
fn a_command_is_drawn_as_it_runs() {
    let mut r = record("f5", 1000, Decision::NeedsApproval);
    r.command = r"printf 'a\\b\n'".into();
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![r]);
    let screen = draw(&app, 200, 50);
    // In the queue and in the evidence, as written: no backslash doubled.
    assert_eq!(screen.matches(r"printf 'a\\b\n'").count(), 2, "{screen}");
    assert!(!screen.contains(r"a\\\\b"), "{screen}");
}

#[test]
fn approve_reject_and_override_go_out_as_review_requests() {
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(
        &mut app,
        vec![
            record("a1", 1000, Decision::NeedsApproval),
            record("b2", 1000, Decision::Blocked),
        ],
    );
    // Approve with a note.
    assert!(app.handle_key(Key::Char('a')).is_empty());
    for c in "ok by me".chars() {
        app.handle_key(Key::Char(c));
    }
    let acts = app.handle_key(Key::Enter);
    assert!(
        matches!(&acts[..], [Action::Review { action: ReviewAction::Approve, note, override_block: false, .. }] if note == "ok by me"),
        "{acts:?}"
    );
    // The blocked one: `a` explains, `o` confirms first.
    app.handle_key(Key::Down);
    assert!(app.handle_key(Key::Char('a')).is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("press o"));
    app.handle_key(Key::Char('o'));
    assert_eq!(app.mode, Mode::ConfirmOverride);
    let screen = draw(&app, 200, 50);
    assert!(screen.contains("was BLOCKED"), "{screen}");
    assert!(screen.contains("journaled as an OVERRIDE"), "{screen}");
    // However long the reasons, the question is on the screen, also narrow.
    assert!(screen.contains("y: yes, write a note next"), "{screen}");
    let narrow = draw(&app, 80, 40);
    assert!(narrow.contains("n / Esc: no"), "{narrow}");
    app.handle_key(Key::Char('y'));
    for c in "known".chars() {
        app.handle_key(Key::Char(c));
    }
    let acts = app.handle_key(Key::Enter);
    assert!(
        matches!(&acts[..], [Action::Review { action: ReviewAction::Approve, override_block: true, note, .. }] if note == "known"),
        "{acts:?}"
    );
    // Reject with R; Esc cancels without sending.
    app.handle_key(Key::Char('R'));
    assert!(app.handle_key(Key::Esc).is_empty());
    app.handle_key(Key::Char('x'));
    app.handle_key(Key::Char('n'));
    let acts = app.handle_key(Key::Enter);
    assert!(matches!(
        &acts[..],
        [Action::Review {
            action: ReviewAction::Reject,
            ..
        }]
    ));
    assert_eq!(app.handle_key(Key::Char('q')), vec![Action::Quit]);
}

#[test]
fn the_submitters_own_run_is_greyed_and_the_engine_answers() {
    let mut app = App::new(
        Viewer {
            uid: 1000,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![record("a1", 1000, Decision::NeedsApproval)]);
    assert!(draw(&app, 200, 50).contains("approve (your run)"));
    // No note is asked for: the request goes to the engine, which refuses,
    // and its words are on the status line.
    let acts = app.handle_key(Key::Char('a'));
    assert!(matches!(&acts[..], [Action::Review { .. }]), "{acts:?}");
    let more = app.on_review(
        ReviewAction::Approve,
        false,
        Err("uid 1000 submitted run x; the submitter can never approve its own run".into()),
    );
    assert!(more.is_empty());
    let screen = draw(&app, 200, 50);
    assert!(screen.contains("never approve its own run"), "{screen}");
}

#[test]
fn the_queue_holds_waiting_runs_oldest_first() {
    let mut a = record("a1", 1000, Decision::NeedsApproval);
    a.created_at = "2026-11-24T10:00:00Z".into();
    let mut b = record("b2", 1000, Decision::Blocked);
    b.created_at = "2026-11-24T09:00:00Z".into();
    let mut promotable = record("c3", 1000, Decision::Promote);
    promotable.state = RunState::Rehearsed;
    let mut done = record("d4", 1000, Decision::NeedsApproval);
    done.state = RunState::Approved;
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![a, b, promotable, done]);
    let ids: Vec<&str> = app.queue.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(
        ids,
        ["r6b053099-03248ae84f21a6b2", "r6b053099-03248ae84f21a6a1"]
    );
}

#[test]
fn a_note_begun_for_one_run_is_never_sent_for_another_after_the_queue_moves() {
    // The reviewer overrides blocked run a1; while they write the note its
    // submitter withdraws it, the queue refreshes and the selection falls
    // on b2 (blocked too, with other evidence), which loads. Enter must
    // not override b2.
    let x = record("a1", 1000, Decision::Blocked);
    let y = record("b2", 1000, Decision::Blocked);
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![x.clone(), y.clone()]);
    assert_eq!(app.current().unwrap().run_id, x.run_id);
    assert!(app.handle_key(Key::Char('o')).is_empty());
    assert!(app.handle_key(Key::Char('y')).is_empty());
    for c in "fine".chars() {
        app.handle_key(Key::Char(c));
    }
    loaded(&mut app, vec![y.clone()]);
    assert_eq!(app.current().unwrap().run_id, y.run_id);
    let acts = app.handle_key(Key::Enter);
    assert!(
        !acts.iter().any(|a| matches!(a, Action::Review { .. })),
        "{acts:?}"
    );
    assert!(matches!(app.mode, Mode::Browse));
    let st = app.status.clone().unwrap();
    assert!(
        st.error && st.text.contains("no longer the selected run"),
        "{st:?}"
    );

    // The same at the override question, and for a plain approval.
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![x.clone(), y.clone()]);
    app.handle_key(Key::Char('o'));
    loaded(&mut app, vec![y.clone()]);
    app.handle_key(Key::Char('y'));
    assert!(matches!(app.mode, Mode::Browse));
    let a = record("a1", 1000, Decision::NeedsApproval);
    let b = record("b2", 1000, Decision::NeedsApproval);
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![a.clone(), b.clone()]);
    app.handle_key(Key::Char('a'));
    loaded(&mut app, vec![b.clone()]);
    let acts = app.handle_key(Key::Enter);
    assert!(
        !acts.iter().any(|a| matches!(a, Action::Review { .. })),
        "{acts:?}"
    );
    // Undisturbed, the decision goes out for the run it was begun for.
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![a.clone(), b.clone()]);
    app.handle_key(Key::Char('a'));
    loaded(&mut app, vec![a.clone(), b.clone()]);
    let acts = app.handle_key(Key::Enter);
    assert!(
        acts.iter()
            .any(|x| matches!(x, Action::Review { id, .. } if id.as_str() == a.run_id)),
        "{acts:?}"
    );
}

#[test]
fn a_selection_that_moves_because_its_run_left_the_queue_is_announced() {
    let a = record("a1", 1000, Decision::NeedsApproval);
    let b = record("b2", 1000, Decision::NeedsApproval);
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![a.clone(), b.clone()]);
    loaded(&mut app, vec![b.clone()]);
    let st = app.status.clone().unwrap();
    assert!(
        st.error && st.text.contains("left the queue") && st.text.contains(&b.run_id),
        "{st:?}"
    );
}

#[test]
fn the_run_just_decided_leaves_the_queue_without_a_warning() {
    let a = record("a1", 1000, Decision::NeedsApproval);
    let b = record("b2", 1000, Decision::NeedsApproval);
    let mut app = App::new(
        Viewer {
            uid: 0,
            approves_own: false,
        },
        "test".into(),
    );
    loaded(&mut app, vec![a.clone(), b.clone()]);
    let mut approved = a.clone();
    approved.state = RunState::Approved;
    let acts = app.on_review(ReviewAction::Approve, false, Ok(approved));
    assert!(acts.contains(&Action::Refresh));
    loaded(&mut app, vec![b.clone()]);
    let st = app.status.clone().unwrap();
    assert!(!st.error && st.text.contains("approved"), "{st:?}");
}
