-- 0001_init.sql — the scheduler's first schema (docs/design.md §7).
-- Every table the scheduler needs; later changes come as 0002_*.sql etc.
-- Times are milliseconds since the Unix epoch. JSON columns hold compact text.

CREATE TABLE experiments (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL,
    state         TEXT    NOT NULL,           -- ACTIVE|PAUSED|COMPLETED|CANCELED
    config        TEXT    NOT NULL,           -- the submitted file, as validated
    max_trials    INTEGER NOT NULL,           -- may grow through /extend
    searcher_done INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    ended_at      INTEGER
);

CREATE TABLE agents (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL UNIQUE,
    host           TEXT    NOT NULL,
    slots          INTEGER NOT NULL,
    gpus           TEXT    NOT NULL DEFAULT '[]',
    version        TEXT,
    state          TEXT    NOT NULL,          -- ALIVE|LOST
    registered_at  INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL
);

CREATE TABLE trials (
    id            INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    idx           INTEGER NOT NULL,           -- creation index within the experiment
    state         TEXT    NOT NULL,
    hparams       TEXT    NOT NULL,
    budget        INTEGER NOT NULL,
    parent_trial  INTEGER,
    attempt       INTEGER NOT NULL DEFAULT 0, -- bumped at every placement
    restarts      INTEGER NOT NULL DEFAULT 0,
    agent_id      INTEGER,                    -- rank 0's agent of the current attempt
    port          INTEGER,
    exit_code     INTEGER,
    objective     REAL,                       -- best objective value (raw, not sign-normalised)
    latest        TEXT,                       -- JSON: latest value of every metric
    best          TEXT,                       -- JSON: best value of every metric
    kill_state    TEXT,                       -- pending kill: state to reach once the agent confirms
    kill_reason   TEXT,
    fail_agent    INTEGER,                    -- agent of the last failed attempt
    fail_streak   INTEGER NOT NULL DEFAULT 0, -- consecutive failures on fail_agent
    created_at    INTEGER NOT NULL,
    started_at    INTEGER,
    ended_at      INTEGER,
    UNIQUE (experiment_id, idx)
);
CREATE INDEX trials_exp ON trials(experiment_id, id);

CREATE TABLE metrics (
    seq      INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt  INTEGER NOT NULL,
    name     TEXT    NOT NULL,
    step     INTEGER,
    epoch    REAL,
    value    REAL    NOT NULL,
    time     INTEGER NOT NULL
);
CREATE INDEX metrics_trial_name ON metrics(trial_id, name, seq);
CREATE INDEX metrics_trial_seq ON metrics(trial_id, seq);

CREATE TABLE logs (
    seq      INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt  INTEGER NOT NULL,
    stream   TEXT    NOT NULL,
    line     TEXT    NOT NULL,
    time     INTEGER NOT NULL
);
CREATE INDEX logs_trial ON logs(trial_id, seq);

-- One row per worker (rank) of a placed attempt; released_at set when the
-- slots are given back. Active rows rebuild agent capacity after a restart.
CREATE TABLE allocations (
    trial_id    INTEGER NOT NULL REFERENCES trials(id),
    attempt     INTEGER NOT NULL,
    rank        INTEGER NOT NULL,
    agent_id    INTEGER NOT NULL REFERENCES agents(id),
    slots       INTEGER NOT NULL,
    gpus        TEXT    NOT NULL DEFAULT '[]',
    started     INTEGER NOT NULL DEFAULT 0,
    exited      INTEGER NOT NULL DEFAULT 0,
    exit_code   INTEGER,
    created_at  INTEGER NOT NULL,
    released_at INTEGER,
    PRIMARY KEY (trial_id, attempt, rank)
);
CREATE INDEX allocations_active ON allocations(released_at);

CREATE TABLE checkpoints (
    id       INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt  INTEGER NOT NULL,
    path     TEXT    NOT NULL,
    step     INTEGER,
    time     INTEGER NOT NULL
);
CREATE INDEX checkpoints_trial ON checkpoints(trial_id, id);

-- Every state change of a trial (and of an experiment) is a row here.
CREATE TABLE events (
    id            INTEGER PRIMARY KEY,
    time          INTEGER NOT NULL,
    experiment_id INTEGER,
    trial_id      INTEGER,
    type          TEXT    NOT NULL,
    detail        TEXT
);
CREATE INDEX events_trial ON events(trial_id, id);
