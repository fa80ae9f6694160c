//! The request layer's unit tests: every request decodes, on the daemon's
//! side, to what the doors encoded; unknown query parameters and bad ids
//! are refused.

use super::*;

fn split(target: &str) -> (&str, Option<&str>) {
    match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    }
}

fn id_of(path: &str, prefix: &str) -> String {
    path.strip_prefix(prefix)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn every_request_decodes_to_what_was_encoded() {
    let id = RunId::parse("r1700000000-abcd").unwrap();
    let other = RunId::parse("r1700000001-beef").unwrap();

    let s = Show {
        id: id.clone(),
        wait_s: Some(30),
    };
    let t = s.target();
    let (p, q) = split(&t);
    assert_eq!(
        parse_show(&id_of(p, &format!("{}/", routes::RUNS)), q).unwrap(),
        s
    );

    let l = List {
        state: Some(RunState::AwaitingApproval),
        limit: Some(5),
    };
    let t = l.target();
    let (_, q) = split(&t);
    assert_eq!(parse_list(q).unwrap(), l);

    let c = Compare {
        id: id.clone(),
        against: other,
    };
    let t = c.target();
    let (p, q) = split(&t);
    assert_eq!(
        parse_diff(&id_of(p, &format!("{}/", routes::RUNS)), q).unwrap(),
        DiffRequest::Compare(c)
    );

    let r = Review {
        id: id.clone(),
        action: ReviewAction::Approve,
        note: "looks right".into(),
        override_block: true,
    };
    let t = r.target();
    let (p, q) = split(&t);
    assert!(p.ends_with("/approve"));
    let back = parse_review(
        &id_of(p, &format!("{}/", routes::RUNS)),
        q,
        ReviewAction::Approve,
        &r.body().unwrap(),
    )
    .unwrap();
    assert_eq!(back, r);

    let pr = Promote {
        id: id.clone(),
        env: [("GH_TOKEN".to_string(), "x".to_string())].into(),
        host_prompt_token: Some("t0k".into()),
        local_only: true,
    };
    let t = pr.target();
    let (p, q) = split(&t);
    assert_eq!(
        parse_promote(
            &id_of(p, &format!("{}/", routes::RUNS)),
            q,
            &pr.body().unwrap()
        )
        .unwrap(),
        pr
    );
}

#[test]
fn unknown_query_parameters_are_named_and_refused() {
    let e = parse_show("r1-a", Some("wiat=5")).unwrap_err();
    assert_eq!(e.code, "invalid_query");
    assert!(e.message.contains("wiat"), "{}", e.message);
    let e = parse_receipt("p1-a", Some("verbose=1")).unwrap_err();
    assert!(e.message.contains("verbose"), "{}", e.message);
    assert!(parse_list(Some("state=promoted&colour=red")).is_err());
    assert!(parse_show("r1-a", Some("wait=601")).is_err());
    assert!(parse_show("r1-a", Some("wait=-1")).is_err());
    assert_eq!(
        parse_show("r1-a", Some("wait=true")).unwrap().wait_s,
        Some(WAIT_MAX_S)
    );
}

#[test]
fn bad_ids_are_refused_before_anything_else() {
    assert_eq!(parse_show("../etc", None).unwrap_err().code, "bad_run_id");
    assert_eq!(
        parse_diff("r1-a", Some("against=..%2Fx")).unwrap_err().code,
        "bad_run_id"
    );
    assert_eq!(
        parse_rollback("x/y", None).unwrap_err().code,
        "bad_receipt_id"
    );
}
