-- 0010: experiment and trial ids are never handed out twice. Both tables
-- use rowid ids (INTEGER PRIMARY KEY without AUTOINCREMENT), which SQLite
-- reuses once the newest rows are deleted (DELETE /api/v1/experiments/{id},
-- docs/scheduler.md "Checkpoint retention"); agents key running trials and
-- their work directories on trial ids, so a reused id would meet a deleted
-- trial's leftovers. id_floor keeps the largest id a delete removed; the
-- inserts (scheduler/store/store.c) start above it.
CREATE TABLE id_floor(name TEXT PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;
