-- 0015_replication: the replication log's position (docs/scheduler.md,
-- "Replication"). repl_state.lsn is bumped inside every replicated
-- transaction, so a snapshot says which LSN it holds; term counts
-- promotions (one repl_terms row each); cluster names the lineage a standby
-- must share with its primary.
CREATE TABLE repl_state(id INTEGER PRIMARY KEY CHECK (id = 1), term INTEGER NOT NULL,
                        lsn INTEGER NOT NULL, cluster TEXT NOT NULL);
INSERT INTO repl_state VALUES (1, 1, 0, lower(hex(randomblob(16))));
CREATE TABLE repl_terms(term INTEGER PRIMARY KEY, start_lsn INTEGER NOT NULL,
                        started_at INTEGER NOT NULL, by TEXT NOT NULL);
INSERT INTO repl_terms VALUES (1, 0, CAST(strftime('%s','now') AS INTEGER) * 1000, 'init');
