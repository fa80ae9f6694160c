fn main() {
    let dir = std::env::args().nth(1).map(std::path::PathBuf::from);
    let t = std::time::Instant::now();
    let p = dryrun::policy::Policy::load_cached(
        std::path::Path::new("/etc/dryrun/policy.d"),
        None,
        dir.as_deref(),
    )
    .unwrap();
    let load = t.elapsed();
    let t = std::time::Instant::now();
    let c = dryrun::classify::classify("true", &p, &Default::default());
    println!(
        "load_us={} classify_us={} rules={} score={}",
        load.as_micros(),
        t.elapsed().as_micros(),
        p.rules.len(),
        c.score
    );
}
