//! Same envelope + same workspace content + same policy → same evidence
//! hash; `dryrun diff A B` shows exactly what differs between two runs.

mod common;

use common::*;

#[test]
fn twenty_rehearsals_of_a_deterministic_task_give_one_evidence_hash() {
    let ws = Ws::new(Who::User);
    ws.write("data.txt", "pear\napple\nfig\n");
    // The same caller environment each time (the command's is the
    // caller's, filtered): its SOURCE_DATE_EPOCH, which `date` reads here,
    // and its TZ reach the command.
    let cmd = "sort data.txt > sorted.txt; wc -l < data.txt; mkdir -p out; \
               date -u -d @\"$SOURCE_DATE_EPOCH\" +%F > out/stamp; echo \"$TZ $HOME $(hostname)\"";
    let mut hashes = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let r = to_run(
            ws.command()
                .env("SOURCE_DATE_EPOCH", "1700000000")
                .env("TZ", "UTC")
                .args([
                    "execute",
                    "--json",
                    "--command",
                    cmd,
                    "--expect-write",
                    "**",
                ])
                .output()
                .unwrap(),
        );
        assert!(r.out().starts_with("3\nUTC "), "{r:?}");
        assert_eq!(r.code, 0, "{r:?}");
        let h = r.json["rehearsal"]["evidence_hash"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(h.len(), 64);
        hashes.insert(h);
    }
    assert_eq!(hashes.len(), 1, "{hashes:?}");
    // The clock and randomness still differ, and the hash says so.
    let a = ws.rehearse("date +%s%N; head -c 8 /dev/urandom | od -An -tx1", &[]);
    let b = ws.rehearse("date +%s%N; head -c 8 /dev/urandom | od -An -tx1", &[]);
    assert_ne!(
        a.json["rehearsal"]["evidence_hash"],
        b.json["rehearsal"]["evidence_hash"]
    );
}

#[test]
fn diff_of_two_runs_shows_exactly_their_differences() {
    let ws = Ws::new(Who::User);
    ws.write("keep.txt", "same\n");
    let a = ws.rehearse(
        "echo 1 > a.txt; echo x > b.txt; echo same > c.txt; echo out-A",
        &[],
    );
    let b = ws.rehearse(
        "echo 2 > a.txt; echo same > c.txt; echo y > d.txt; echo out-B; exit 3",
        &[],
    );
    let (ia, ib) = (
        a.json["run_id"].as_str().unwrap().to_string(),
        b.json["run_id"].as_str().unwrap().to_string(),
    );
    let out = ws
        .command()
        .args(["diff", &ia, &ib, "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["same_evidence"], false);
    let paths = |k: &str| -> Vec<String> {
        d["changes"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(paths("only_in_a"), ["b.txt"]);
    assert_eq!(paths("only_in_b"), ["d.txt"]);
    assert_eq!(paths("different"), ["a.txt"], "c.txt is the same in both");
    assert_eq!(d["exit"]["a"], 0);
    assert_eq!(d["exit"]["b"], 3);
    let so = d["stdout_diff"].as_str().unwrap();
    assert!(so.contains("-out-A") && so.contains("+out-B"), "{so}");
    assert!(d["stderr_diff"].is_null());
    // Human form, and a run compared with itself.
    let out = ws.command().args(["diff", &ia, &ib]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("only in A: created b.txt") && text.contains("exit: A 0 · B 3"),
        "{text}"
    );
    let out = ws.command().args(["diff", &ia, &ia]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("same evidence"));
}
