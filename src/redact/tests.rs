use super::*;

fn shapes(text: &str) -> (String, Redactions) {
    let mut t = Redactions::default();
    let out = Redactor::default().redact_str(text, &mut t);
    (out, t)
}

fn kinds(t: &Redactions) -> Vec<&str> {
    t.kinds.keys().map(String::as_str).collect()
}

const GHP: &str = "ghp_R8kQ2vX9mN4pL7tY1wZ3aB6cD0eF5gH8jK2m";
const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIDx9G3k0rYQm8W1pS7nV2tL4cJ6hF8bE0aZ5uX3yK9qD\n-----END PRIVATE KEY-----";
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

#[test]
fn given_values_are_replaced_with_their_name() {
    let r = Redactor::new(
        [("DEPLOY_TOKEN", "s3cr3t-deploy-value"), ("LANG", "C.UTF-8")],
        [("GH_HOST_TOKEN", "host-value-42")],
    );
    let mut t = Redactions::default();
    let out = r.redact_str(
        "a s3cr3t-deploy-value b host-value-42 c s3cr3t-deploy-value C.UTF-8",
        &mut t,
    );
    assert_eq!(
        out,
        "a [redacted:env:DEPLOY_TOKEN] b [redacted:env:GH_HOST_TOKEN] c [redacted:env:DEPLOY_TOKEN] C.UTF-8"
    );
    assert_eq!(t.count, 3);
    assert_eq!(t.kinds["env:DEPLOY_TOKEN"], 2);
    assert!(
        !format!("{r:?}").contains("s3cr3t"),
        "Debug shows names only"
    );
}

#[test]
fn short_common_numeric_and_configuration_values_are_kept() {
    let r = Redactor::new(
        [
            ("DEBUG", "1"),
            ("MODE", "true"),
            ("SHORT", "abcde"),
            ("PORT_LIST", "8080443"),
            ("STAGE", "production"),
            ("PATH", "/usr/local/bin:/usr/bin"),
            ("LC_ALL", "de_DE.UTF-8"),
            ("HOME", "/home/someone"),
        ],
        [],
    );
    let text = "1 true abcde 8080443 production /usr/local/bin:/usr/bin de_DE.UTF-8 /home/someone";
    let mut t = Redactions::default();
    assert_eq!(r.redact_str(text, &mut t), text);
    assert_eq!(t.count, 0);
    // Host values have no name exemption.
    let r = Redactor::new([], [("HOME", "/home/someone")]);
    assert_eq!(
        r.redact_str("at /home/someone", &mut t),
        "at [redacted:env:HOME]"
    );
}

#[test]
fn the_longest_given_value_wins() {
    let r = Redactor::new([("A", "abcdef123"), ("B", "abcdef123456")], []);
    let mut t = Redactions::default();
    assert_eq!(
        r.redact_str("abcdef123456 abcdef123", &mut t),
        "[redacted:env:B] [redacted:env:A]"
    );
}

#[test]
fn aws_access_key_ids() {
    let (o, t) = shapes("id AKIAIOSFODNN7EXAMPLE and ASIAY34FZKBOKMUTVV7A.");
    assert_eq!(
        o,
        "id [redacted:aws_access_key] and [redacted:aws_access_key]."
    );
    assert_eq!(t.kinds["aws_access_key"], 2);
    // Too short, or inside a longer word: kept.
    let (o, _) = shapes("AKIA1234 XAKIAIOSFODNN7EXAMPLE");
    assert_eq!(o, "AKIA1234 XAKIAIOSFODNN7EXAMPLE");
}

#[test]
fn aws_secret_keys_in_assignments() {
    let (o, t) = shapes("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n");
    assert_eq!(o, "AWS_SECRET_ACCESS_KEY=[redacted:aws_secret_key]\n");
    assert_eq!(kinds(&t), ["aws_secret_key"]);
    let (o, _) = shapes(r#"{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}"#);
    assert_eq!(
        o,
        r#"{"aws_secret_access_key": "[redacted:aws_secret_key]"}"#
    );
}

#[test]
fn forge_chat_and_payment_tokens() {
    for (text, kind) in [
        (GHP, "github_token"),
        ("gho_16C7e42F292c6912E7710c838347Ae178B4a", "github_token"),
        ("ghs_16C7e42F292c6912E7710c838347Ae178B4a", "github_token"),
        (
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV012345",
            "github_token",
        ),
        ("glpat-xz8LmQ2vR9tY3wK6pN1s", "gitlab_token"),
        (
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "slack_token",
        ),
        ("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
        ("AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "gcp_api_key"),
    ] {
        let (o, t) = shapes(&format!("token is: {text} ."));
        assert!(!o.contains(text), "{kind}: {o}");
        assert!(t.kinds.contains_key(kind), "{kind}: {t:?} {o}");
    }
}

#[test]
fn private_key_blocks_whole_or_cut_short() {
    let (o, t) = shapes(&format!("before\n{PEM}\nafter\n"));
    assert_eq!(o, "before\n[redacted:private_key]\nafter\n");
    assert_eq!(kinds(&t), ["private_key"]);
    let rsa = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEpAIBAAKCAQEA\n";
    let (o, _) = shapes(&format!("x {rsa}"));
    assert_eq!(o, "x [redacted:private_key]");
    // GCP service-account JSON: the key with escaped newlines.
    let json = r#"{"type": "service_account", "private_key_id": "3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n", "client_email": "x@p.iam.gserviceaccount.com"}"#;
    let (o, t) = shapes(json);
    assert!(!o.contains("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"), "{o}");
    assert!(
        !o.contains("3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098"),
        "{o}"
    );
    assert!(o.contains("x@p.iam.gserviceaccount.com"), "{o}");
    assert_eq!(t.kinds["private_key"], 1);
    // A public key or certificate is not a secret.
    let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
    assert_eq!(shapes(cert).0, cert);
}

#[test]
fn jwts() {
    let (o, t) = shapes(&format!("Authorization: Bearer {JWT}\n"));
    assert_eq!(o, "Authorization: Bearer [redacted:jwt]\n");
    assert_eq!(kinds(&t), ["jwt"]);
}

#[test]
fn keyword_assignments() {
    for (text, want) in [
        ("password=hunter22", "password=[redacted:assignment]"),
        ("passwd: letmein", "passwd: [redacted:assignment]"),
        ("DB_PASSWORD=short1", "DB_PASSWORD=[redacted:assignment]"),
        (
            "url?token=abc123&x=1",
            "url?token=[redacted:assignment]&x=1",
        ),
        ("secret = 'two words'", "secret = '[redacted:assignment]'"),
        (
            r#""api_key": "k-9""#,
            r#""api_key": "[redacted:assignment]""#,
        ),
        ("--password=p4ss", "--password=[redacted:assignment]"),
    ] {
        assert_eq!(shapes(text).0, want, "{text}");
    }
    // Placeholders and prose are kept.
    for text in [
        "password=$DB_PASSWORD",
        "token=${TOKEN}",
        "password: ********",
        "token=<your token>",
        "api_key: null",
        "the password is not set",
        "tokenizer=fast",
        "sort_key=created_at",
    ] {
        assert_eq!(shapes(text).0, text);
    }
}

#[test]
fn high_entropy_values_assigned_to_secret_names() {
    let (o, t) = shapes("export FOO_TOKEN=Zx8q2LmV9rT4wY7pK1sN6bC3\n");
    assert_eq!(o, "export FOO_TOKEN=[redacted:high_entropy]\n");
    assert_eq!(kinds(&t), ["high_entropy"]);
    let (o, _) = shapes(r#"{"signing_key": "q8Vd2LmZ9rT4wY7pK1sN6bC3xE5"}"#);
    assert_eq!(o, r#"{"signing_key": "[redacted:high_entropy]"}"#);
    // Low entropy, or too short: kept.
    for text in [
        "CACHE_KEY=aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "PRIMARY_KEY=user_id",
        "NEXT_TOKEN=abc",
    ] {
        assert_eq!(shapes(text).0, text);
    }
}

/// Output with nothing a detector could match passes no gate (and so
/// compiles no detector); one literal a shape needs opens its gate.
#[test]
fn plain_output_opens_no_gate() {
    for plain in [
        &b"Cargo.toml\nREADME.md\nsrc\n"[..],
        b" M src/lib.rs\n?? notes.txt\n",
        b"test result: ok. 12 passed; 0 failed\n",
    ] {
        assert!(
            !may_match_a_detector(plain),
            "{}",
            String::from_utf8_lossy(plain)
        );
    }
    assert!(may_match_a_detector(b"export API_KEY=x"));
    assert!(may_match_a_detector(b"id AKIA..."));
}

#[test]
fn benign_output_is_untouched() {
    let text = "commit 3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098\n\
                id 123e4567-e89b-12d3-a456-426614174000\n\
                /home/me/site/blog/2024-01-01-hello.md\n\
                42 3.14159 1700000000 -17 0xdeadbeef\n\
                sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
                Merged pull request #12 (squash)\n\
                key: value\n\
                tokens: 1234\n";
    let (o, t) = shapes(text);
    assert_eq!(o, text);
    assert_eq!(t.count, 0);
}

#[test]
fn bytes_that_are_not_utf8_are_scrubbed_and_kept() {
    let mut input = vec![0xff, 0xfe, b' '];
    input.extend_from_slice(GHP.as_bytes());
    input.extend_from_slice(&[b' ', 0xc3, 0x28, 0x80]);
    let mut t = Redactions::default();
    let out = Redactor::default().redact_bytes(&input, &mut t);
    let mut want = vec![0xff, 0xfe, b' '];
    want.extend_from_slice(b"[redacted:github_token]");
    want.extend_from_slice(&[b' ', 0xc3, 0x28, 0x80]);
    assert_eq!(out, want);
    assert_eq!(t.count, 1);
}

#[test]
fn growth_is_bounded() {
    let r = Redactor::new(
        [("A_VERY_LONG_VARIABLE_NAME_THAT_MAKES_MARKERS_BIG", "abcdef")],
        [],
    );
    let text = "abcdef ".repeat(10_000);
    let mut t = Redactions::default();
    let out = r.redact_bytes(text.as_bytes(), &mut t);
    assert!(out.len() <= text.len() + CUT_MARKER.len(), "{}", out.len());
    assert!(out.ends_with(CUT_MARKER.as_bytes()));
    assert!(!out.windows(7).any(|w| w == b"abcdef "));
}

#[test]
fn output_grows_only_into_the_room_below_the_cap() {
    let r = Redactor::new([("SOME_TOKEN", "abcdef")], []);
    let mut t = Redactions::default();
    let (out, cut) = r.redact_output(b"x abcdef y", 1024, &mut t, &mut []);
    assert_eq!(out, b"x [redacted:env:SOME_TOKEN] y");
    assert!(!cut);
    let text = "abcdef\n".repeat(100);
    let (out, cut) = r.redact_output(text.as_bytes(), text.len(), &mut t, &mut []);
    assert!(cut);
    assert_eq!(out.len(), text.len());
    assert!(out.ends_with(CUT_MARKER.as_bytes()));
    assert!(!out.windows(6).any(|w| w == b"abcdef"));
}

#[test]
fn redacting_twice_changes_nothing_more() {
    let text = format!("{GHP} password=hunter22 {JWT} FOO_TOKEN=Zx8q2LmV9rT4wY7pK1sN6bC3");
    let (once, t1) = shapes(&text);
    let (twice, t2) = shapes(&once);
    assert_eq!(once, twice);
    assert_eq!(t1.count, 4, "{once}");
    assert_eq!(t2.count, 0);
}

#[test]
fn entropy() {
    assert_eq!(shannon_entropy(b"aaaa"), 0.0);
    assert!((shannon_entropy(b"abcd") - 2.0).abs() < 1e-9);
}
