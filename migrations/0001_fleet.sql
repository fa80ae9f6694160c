-- dryrun fleet store, version 1 (docs/fleet.md, ADR 0011).
-- Applied by `dryrun fleet migrate` as the database's owner (a role that
-- may create roles), once, inside one transaction.

DO $$
BEGIN
    -- Group roles: a host's login role is a member of dryrun_host, a
    -- reviewer's of dryrun_reviewer, whoever publishes policy of dryrun_admin.
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dryrun_host') THEN
        CREATE ROLE dryrun_host NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dryrun_reviewer') THEN
        CREATE ROLE dryrun_reviewer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dryrun_admin') THEN
        CREATE ROLE dryrun_admin NOLOGIN;
    END IF;
END
$$;

CREATE SCHEMA dryrun;
GRANT USAGE ON SCHEMA dryrun TO dryrun_host, dryrun_reviewer, dryrun_admin;

-- One row per host; the host id is the host's login role (session_user):
-- a host cannot speak for another.
CREATE TABLE dryrun.hosts (
    host_id        name PRIMARY KEY DEFAULT session_user,
    version        text NOT NULL,
    landlock_abi   integer NOT NULL,
    policy_version bigint,
    policy_hash    text,
    config_hash    text,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now(),
    published_seq  bigint NOT NULL DEFAULT -1
);

-- Every run's summary, one row per run, kept current by its host.
CREATE TABLE dryrun.runs (
    run_id           text PRIMARY KEY,
    host_id          name NOT NULL DEFAULT session_user,
    state            text NOT NULL,
    decision         text,
    command          text NOT NULL,
    task             text,
    workspace        text NOT NULL,
    intent           jsonb NOT NULL,
    reasons          jsonb NOT NULL DEFAULT '[]',
    changes          jsonb NOT NULL DEFAULT '{}',
    risk_level       text,
    submitter_uid    bigint,
    submitter_name   text,
    submitter_person text,
    -- The PostgreSQL roles of the submitter's person (the fleet config's
    -- people): none of them may decide this run.
    submitter_roles  name[] NOT NULL DEFAULT '{}',
    evidence_hash    text,
    policy_version   bigint,
    policy_hash      text,
    created_at       timestamptz NOT NULL,
    -- When the host's verdict made it wait for a person (the host's clock),
    -- and when the fleet first showed it waiting (the store's).
    waiting_since    timestamptz,
    waiting_visible_at timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX runs_waiting ON dryrun.runs (waiting_since) WHERE state = 'awaiting_approval';
CREATE INDEX runs_host ON dryrun.runs (host_id, created_at);

-- What a reviewer needs of a run waiting for a person (redacted, capped);
-- removed when the run stops waiting.
CREATE TABLE dryrun.evidence (
    run_id   text PRIMARY KEY REFERENCES dryrun.runs (run_id) ON DELETE CASCADE,
    host_id  name NOT NULL DEFAULT session_user,
    summary  jsonb NOT NULL,
    diffs    jsonb NOT NULL DEFAULT '[]',
    egress   jsonb NOT NULL DEFAULT '[]'
);

-- Each host's journal as published: every record's sequence number, hash
-- and predecessor (the state transitions of its runs).
CREATE TABLE dryrun.events (
    host_id name NOT NULL DEFAULT session_user,
    seq     bigint NOT NULL,
    hash    text NOT NULL,
    prev    text NOT NULL,
    kind    text NOT NULL,
    run_id  text,
    state   text,
    at      timestamptz NOT NULL,
    PRIMARY KEY (host_id, seq)
);

-- The journal head at each group commit of a host: insert-only.
CREATE TABLE dryrun.anchors (
    host_id     name NOT NULL DEFAULT session_user,
    seq         bigint NOT NULL,
    hash        text NOT NULL,
    anchored_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (host_id, seq)
);

-- Reviewers' decisions, bound to the evidence they saw. The reviewer is
-- the database's own authentication (session_user), never a column a
-- client fills in: reviewers insert only through dryrun.decide().
CREATE TABLE dryrun.decisions (
    id             bigserial PRIMARY KEY,
    run_id         text NOT NULL REFERENCES dryrun.runs (run_id) ON DELETE CASCADE,
    host_id        name NOT NULL,
    action         text NOT NULL CHECK (action IN ('approve', 'reject')),
    evidence_hash  text NOT NULL,
    override_block boolean NOT NULL DEFAULT false,
    note           text NOT NULL DEFAULT '' CHECK (octet_length(note) <= 4096),
    reviewer_role  name NOT NULL DEFAULT session_user,
    decided_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    outcome        text CHECK (outcome IN ('applied', 'refused')),
    outcome_reason text,
    applied_at     timestamptz,
    journal_seq    bigint
);
-- One live decision per run: a second one while the first is pending or
-- applied is refused.
CREATE UNIQUE INDEX decisions_one_per_run ON dryrun.decisions (run_id)
    WHERE outcome IS NULL OR outcome = 'applied';
CREATE INDEX decisions_pending ON dryrun.decisions (host_id) WHERE outcome IS NULL;

-- The fleet policy: versioned system policy texts, insert-only.
CREATE TABLE dryrun.policies (
    version      bigint PRIMARY KEY,
    text         text NOT NULL,
    hash         text NOT NULL,
    published_by name NOT NULL DEFAULT session_user,
    published_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE dryrun.settings (
    one                    boolean PRIMARY KEY DEFAULT true CHECK (one),
    min_policy_version     bigint NOT NULL DEFAULT 0
);
INSERT INTO dryrun.settings DEFAULT VALUES;

-- Row-level security: a host reads and writes only its own rows.
ALTER TABLE dryrun.hosts ENABLE ROW LEVEL SECURITY;
ALTER TABLE dryrun.runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE dryrun.evidence ENABLE ROW LEVEL SECURITY;
ALTER TABLE dryrun.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE dryrun.anchors ENABLE ROW LEVEL SECURITY;
ALTER TABLE dryrun.decisions ENABLE ROW LEVEL SECURITY;

CREATE POLICY host_own ON dryrun.hosts TO dryrun_host
    USING (host_id = session_user) WITH CHECK (host_id = session_user);
CREATE POLICY host_own ON dryrun.runs TO dryrun_host
    USING (host_id = session_user) WITH CHECK (host_id = session_user);
CREATE POLICY host_own ON dryrun.evidence TO dryrun_host
    USING (host_id = session_user) WITH CHECK (host_id = session_user);
CREATE POLICY host_own ON dryrun.events TO dryrun_host
    USING (host_id = session_user) WITH CHECK (host_id = session_user);
CREATE POLICY host_own ON dryrun.anchors TO dryrun_host
    USING (host_id = session_user) WITH CHECK (host_id = session_user);
CREATE POLICY host_own ON dryrun.decisions TO dryrun_host
    USING (host_id = session_user) WITH CHECK (host_id = session_user);
-- Reviewers and admins read everything.
CREATE POLICY read_all ON dryrun.hosts FOR SELECT TO dryrun_reviewer, dryrun_admin USING (true);
CREATE POLICY read_all ON dryrun.runs FOR SELECT TO dryrun_reviewer, dryrun_admin USING (true);
CREATE POLICY read_all ON dryrun.evidence FOR SELECT TO dryrun_reviewer, dryrun_admin USING (true);
CREATE POLICY read_all ON dryrun.events FOR SELECT TO dryrun_reviewer, dryrun_admin USING (true);
CREATE POLICY read_all ON dryrun.anchors FOR SELECT TO dryrun_reviewer, dryrun_admin USING (true);
CREATE POLICY read_all ON dryrun.decisions FOR SELECT TO dryrun_reviewer, dryrun_admin USING (true);

GRANT SELECT, INSERT, UPDATE ON dryrun.hosts TO dryrun_host;
GRANT SELECT, INSERT, UPDATE ON dryrun.runs TO dryrun_host;
GRANT SELECT, INSERT, UPDATE, DELETE ON dryrun.evidence TO dryrun_host;
GRANT SELECT, INSERT ON dryrun.events TO dryrun_host;
GRANT SELECT, INSERT ON dryrun.anchors TO dryrun_host;
-- A host records a decision's outcome; it never creates one.
GRANT SELECT, UPDATE (outcome, outcome_reason, applied_at, journal_seq) ON dryrun.decisions TO dryrun_host;
GRANT SELECT ON dryrun.policies, dryrun.settings TO dryrun_host, dryrun_reviewer, dryrun_admin;
GRANT SELECT ON dryrun.hosts, dryrun.runs, dryrun.evidence, dryrun.events, dryrun.anchors, dryrun.decisions
    TO dryrun_reviewer, dryrun_admin;
GRANT INSERT ON dryrun.policies TO dryrun_admin;
GRANT UPDATE ON dryrun.settings TO dryrun_admin;

-- A reviewer's decision: who decides is session_user (the database's
-- authentication); the run must wait for a person (or be blocked, with
-- override), its evidence must be the one the reviewer saw, and no role of
-- the submitter's person may decide it. The owning host checks all of
-- this again before it applies anything.
CREATE FUNCTION dryrun.decide(p_run text, p_action text, p_evidence text, p_note text, p_override boolean)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = dryrun, pg_temp AS $$
DECLARE
    r dryrun.runs;
    d bigint;
BEGIN
    IF NOT pg_has_role(session_user, 'dryrun_reviewer', 'MEMBER') THEN
        RAISE EXCEPTION 'role % is not a dryrun reviewer (a member of dryrun_reviewer)', session_user
            USING ERRCODE = '42501';
    END IF;
    SELECT * INTO r FROM dryrun.runs WHERE run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run % in the fleet', p_run USING ERRCODE = 'P0002';
    END IF;
    IF session_user = ANY (r.submitter_roles) THEN
        RAISE EXCEPTION 'role % belongs to %, who submitted run %; the submitter never approves its own run: a different reviewer must',
            session_user, coalesce(r.submitter_person, 'the submitter'), p_run USING ERRCODE = '42501';
    END IF;
    IF r.state <> 'awaiting_approval' AND NOT (p_override AND r.decision = 'blocked' AND r.state = 'rehearsed') THEN
        RAISE EXCEPTION 'run % is %; only a run awaiting approval (or a blocked run, with --override) can be decided',
            p_run, r.state USING ERRCODE = '55000';
    END IF;
    IF r.evidence_hash IS DISTINCT FROM p_evidence THEN
        RAISE EXCEPTION 'run %: the evidence changed since it was shown (evidence hash %, not %); look at it again',
            p_run, r.evidence_hash, p_evidence USING ERRCODE = '55000';
    END IF;
    BEGIN
        INSERT INTO dryrun.decisions (run_id, host_id, action, evidence_hash, override_block, note, reviewer_role)
        VALUES (p_run, r.host_id, p_action, p_evidence, coalesce(p_override, false), coalesce(p_note, ''), session_user)
        RETURNING id INTO d;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'run % has a decision already', p_run USING ERRCODE = '55000';
    END;
    PERFORM pg_notify('dryrun_decision', r.host_id || ' ' || d);
    RETURN d;
END
$$;
REVOKE ALL ON FUNCTION dryrun.decide(text, text, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dryrun.decide(text, text, text, text, boolean) TO dryrun_reviewer;

-- A new fleet policy version: numbered by the database, announced.
CREATE FUNCTION dryrun.publish_policy(p_text text, p_hash text, p_minimum boolean)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = dryrun, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    IF NOT pg_has_role(session_user, 'dryrun_admin', 'MEMBER') THEN
        RAISE EXCEPTION 'role % may not publish fleet policy (a member of dryrun_admin may)', session_user
            USING ERRCODE = '42501';
    END IF;
    LOCK TABLE dryrun.policies IN EXCLUSIVE MODE;
    SELECT coalesce(max(version), 0) + 1 INTO v FROM dryrun.policies;
    INSERT INTO dryrun.policies (version, text, hash, published_by) VALUES (v, p_text, p_hash, session_user);
    IF p_minimum THEN
        UPDATE dryrun.settings SET min_policy_version = v;
    END IF;
    PERFORM pg_notify('dryrun_policy', v::text);
    RETURN v;
END
$$;
REVOKE ALL ON FUNCTION dryrun.publish_policy(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION dryrun.publish_policy(text, text, boolean) TO dryrun_admin;

CREATE TABLE dryrun.schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
GRANT SELECT ON dryrun.schema_version TO dryrun_host, dryrun_reviewer, dryrun_admin;
