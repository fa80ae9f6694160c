//! Drawing the review screen from the [`App`] state: the queue, the
//! selected run's evidence, the status line, the keys, and the note,
//! override and help windows over them. Pure: the same state draws the
//! same screen (the tests draw on ratatui's `TestBackend`).

use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row, Table, TableState, Wrap};

use super::app::{App, Mode, decision, override_required};
use super::evidence::{detail_lines, forbidden_style};
use crate::model::text::Shown;
use crate::record::RunRecord;
use crate::request::ReviewAction;

/// The screen's last word on the evidence and the windows over it: each
/// span, its record text escaped already where it was built
/// ([`super::evidence`]), is shown once more as a message, so a field a
/// builder forgot still reaches the terminal visible, never as something
/// the terminal acts on.
fn guarded(lines: Vec<Line<'static>>) -> Vec<Line<'static>> {
    lines
        .into_iter()
        .map(|mut l| {
            for s in &mut l.spans {
                s.content = Shown::message(&s.content).to_string().into();
            }
            l
        })
        .collect()
}

/// `42s`, `5m`, `3h`, `2d`.
pub fn age(created_at: &str, now_unix: u64) -> String {
    let Ok(t) = humantime::parse_rfc3339_weak(created_at) else {
        return "?".into();
    };
    let then = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let s = now_unix.saturating_sub(then);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn user_name(app: &App, uid: u32) -> String {
    app.user_names
        .get(&uid)
        .map(|n| Shown::raw(n).to_string())
        .unwrap_or_else(|| format!("uid {uid}"))
}

fn submitter(app: &App, r: &RunRecord) -> String {
    match &r.submitted_by {
        Some(a) => user_name(app, a.uid),
        None => "?".into(),
    }
}

pub fn render(app: &App, f: &mut Frame) {
    let area = f.area();
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(1),
            Constraint::Min(3),
            // The status line: two rows, for an engine's refusal in full.
            Constraint::Length(2),
            Constraint::Length(1),
        ])
        .split(area);
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                " dryrun review ",
                Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD),
            ),
            Span::raw(format!(
                " {} waiting · you: {} · {}",
                app.queue.len(),
                user_name(app, app.viewer.uid),
                Shown::message(&app.door_label)
            )),
        ])),
        rows[0],
    );
    let wide = area.width >= 120;
    let panes = Layout::default()
        .direction(if wide {
            Direction::Horizontal
        } else {
            Direction::Vertical
        })
        .constraints(if wide {
            [Constraint::Percentage(40), Constraint::Percentage(60)]
        } else {
            [Constraint::Percentage(30), Constraint::Percentage(70)]
        })
        .split(rows[1]);
    render_queue(app, f, panes[0]);
    render_detail(app, f, panes[1]);
    render_status(app, f, rows[2]);
    render_footer(app, f, rows[3]);
    match &app.mode {
        Mode::Browse => {}
        Mode::Help => render_help(f, area),
        Mode::ConfirmOverride => render_override(app, f, area),
        Mode::Note {
            action,
            override_block,
            text,
        } => render_note(app, f, area, *action, *override_block, text),
    }
}

fn render_queue(app: &App, f: &mut Frame, area: Rect) {
    let header = Row::new(["age", "submitter", "decision", "risk", "command"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = app
        .queue
        .iter()
        .map(|r| {
            let risk = r
                .risk
                .as_ref()
                .map(|k| format!("{} {}", Shown::raw(&k.level), k.score))
                .unwrap_or_else(|| "-".into());
            let d = decision(r).map(|d| d.as_str()).unwrap_or("-");
            let style = if override_required(r) {
                Style::default().fg(Color::Red)
            } else {
                Style::default()
            };
            Row::new(vec![
                age(&r.created_at, app.now_unix),
                submitter(app, r),
                d.to_string(),
                risk,
                Shown::raw(&r.command).to_string(),
            ])
            .style(style)
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(12),
            Constraint::Length(14),
            Constraint::Length(11),
            Constraint::Min(10),
        ],
    )
    .header(header)
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(" queue (oldest first) "),
    )
    .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
    .highlight_symbol("> ");
    let mut state = TableState::default();
    if !app.queue.is_empty() {
        state.select(Some(app.selected));
    }
    f.render_stateful_widget(table, area, &mut state);
    if app.queue.is_empty() {
        let inner = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1.min(area.height.saturating_sub(3)),
        };
        f.render_widget(Paragraph::new("no run is waiting for a reviewer"), inner);
    }
}

fn render_detail(app: &App, f: &mut Frame, area: Rect) {
    let block = Block::default().borders(Borders::ALL).title(" evidence ");
    let lines = match (&app.detail, app.selected_run()) {
        (Some(d), Some(sel)) if d.record.run_id == sel.run_id => {
            detail_lines(d, app.expand_all, &|uid| user_name(app, uid))
        }
        (_, Some(_)) => vec![Line::from("loading…")],
        (_, None) => vec![Line::from("select a run")],
    };
    f.render_widget(
        Paragraph::new(guarded(lines))
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((app.scroll, 0)),
        area,
    );
}

fn render_status(app: &App, f: &mut Frame, area: Rect) {
    let line = match &app.status {
        Some(s) => Line::from(Span::styled(
            Shown::message(&s.text).to_string(),
            if s.error {
                forbidden_style()
            } else {
                Style::default().fg(Color::Green)
            },
        )),
        None => Line::from(""),
    };
    f.render_widget(Paragraph::new(line).wrap(Wrap { trim: true }), area);
}

fn render_footer(app: &App, f: &mut Frame, area: Rect) {
    let cur = app.current();
    let own = cur.is_some_and(|r| app.own_run_refused(r));
    let blocked = cur.is_some_and(override_required);
    let key = |k: &str, what: &str, enabled: bool| {
        let st = if enabled {
            Style::default()
        } else {
            Style::default()
                .fg(Color::DarkGray)
                .add_modifier(Modifier::CROSSED_OUT)
        };
        vec![
            Span::styled(
                format!(" {k}"),
                st.add_modifier(Modifier::BOLD).fg(if enabled {
                    Color::Cyan
                } else {
                    Color::DarkGray
                }),
            ),
            Span::styled(format!(" {what} "), st),
        ]
    };
    let mut spans = Vec::new();
    spans.extend(key("↑↓/jk", "select", true));
    spans.extend(key(
        "a",
        if own { "approve (your run)" } else { "approve" },
        cur.is_some() && !own && !blocked,
    ));
    spans.extend(key("x", "reject", cur.is_some()));
    spans.extend(key(
        "o",
        if own {
            "override (your run)"
        } else {
            "override"
        },
        cur.is_some() && !own && blocked,
    ));
    spans.extend(key("e", "expand tree", true));
    spans.extend(key("PgUp/PgDn", "scroll", true));
    spans.extend(key("r", "refresh", true));
    spans.extend(key("?", "help", true));
    spans.extend(key("q", "quit", true));
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn popup(f: &mut Frame, area: Rect, title: &str, lines: Vec<Line<'static>>, w: u16) {
    // Rows once wrapped, so the last line (the question) is never cut.
    let inner = usize::from(w.min(area.width).saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().max(1).div_ceil(inner)).sum();
    let h = u16::try_from(rows + 2).unwrap_or(u16::MAX);
    let r = centered(area, w, h);
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(guarded(lines))
            .wrap(Wrap { trim: false })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(title.to_string()),
            ),
        r,
    );
}

pub const HELP: &[(&str, &str)] = &[
    ("↑ ↓  j k", "select a run in the queue (oldest first)"),
    ("g G  Home End", "first / last run"),
    ("PgDn PgUp  space b", "scroll the evidence"),
    (
        "e",
        "expand or collapse the change tree's ordinary directories",
    ),
    (
        "a",
        "approve the selected run, with a note (Enter sends, Esc cancels)",
    ),
    ("x  R", "reject the selected run, with a note"),
    ("o", "override a blocked run: a confirmation, then a note"),
    (
        "r",
        "refresh now (the queue also refreshes every few seconds)",
    ),
    ("?", "this help (Esc closes)"),
    ("q  Ctrl-C", "quit"),
];

fn render_help(f: &mut Frame, area: Rect) {
    let mut lines: Vec<Line<'static>> = HELP
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!("{k:>20}  "), Style::default().fg(Color::Cyan)),
                Span::raw(what.to_string()),
            ])
        })
        .collect();
    lines.push(Line::default());
    lines.push(Line::from(
        "Reviews are the same requests as `dryrun approve` / `dryrun reject`:",
    ));
    lines.push(Line::from(
        "the daemon knows you by your uid, and a submitter never approves its own run.",
    ));
    popup(f, area, " keys ", lines, 100);
}

/// What overriding the selected run means, in the run's own terms.
pub fn override_text(r: &RunRecord) -> Vec<String> {
    let mut out = vec![format!(
        "Run {} was BLOCKED by its verdict. It was blocked because:",
        Shown::raw(&r.run_id)
    )];
    let reasons = super::evidence::ordered_reasons(r);
    for s in reasons.iter().take(6) {
        out.push(format!("  • {}", Shown::message(s)));
    }
    if reasons.len() > 6 {
        out.push(format!(
            "  • … and {} more (see the evidence)",
            reasons.len() - 6
        ));
    }
    out.push(String::new());
    out.push(
        "Overriding approves it anyway: once promoted, its whole change set is applied to the live workspace, including the changes above."
            .into(),
    );
    out.push("The approval is journaled as an OVERRIDE, with your identity and your note.".into());
    out.push(String::new());
    out.push("Override?  y: yes, write a note next   n / Esc: no".into());
    out
}

fn render_override(app: &App, f: &mut Frame, area: Rect) {
    let Some(r) = app.current() else {
        return;
    };
    let lines = override_text(r)
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            if i == 0 {
                Line::from(Span::styled(s, forbidden_style()))
            } else {
                Line::from(s)
            }
        })
        .collect();
    popup(f, area, " override a blocked run ", lines, 110);
}

fn render_note(
    app: &App,
    f: &mut Frame,
    area: Rect,
    action: ReviewAction,
    override_block: bool,
    text: &str,
) {
    let id = app
        .current()
        .map(|r| Shown::raw(&r.run_id).to_string())
        .unwrap_or_default();
    let what = match (action, override_block) {
        (ReviewAction::Approve, true) => "Override and approve",
        (ReviewAction::Approve, false) => "Approve",
        (ReviewAction::Reject, _) => "Reject",
        (ReviewAction::Withdraw, _) => "Withdraw",
    };
    let mut lines = vec![Line::from(format!(
        "{what} run {id}. Note (journaled with your identity):"
    ))];
    if let (ReviewAction::Approve, Some(code)) = (action, &app.confirm_code) {
        lines.insert(
            0,
            Line::from(Span::styled(
                format!("Your own run: type this code first to confirm: {code}"),
                Style::default().fg(Color::Yellow),
            )),
        );
    }
    lines.extend([
        Line::from(vec![
            Span::styled("> ", Style::default().fg(Color::Cyan)),
            Span::raw(Shown::raw(text).to_string()),
            Span::styled("█", Style::default().fg(Color::Cyan)),
        ]),
        Line::from(Span::styled(
            "Enter sends · Esc cancels",
            Style::default().fg(Color::DarkGray),
        )),
    ]);
    popup(f, area, " note ", lines, 100);
}
