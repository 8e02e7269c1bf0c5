/*
 * repl_capture.c — what the replication log's capture costs the core per
 * metric row (docs/scheduler.md "Replication", "Metric rows are logged by
 * the core, not the session"; issue 31's standby figures), on one real
 * database through the store's own writer (store_begin/store_commit, the
 * prepared ST_METRIC_INSERT), in one run:
 *
 *   off      capture off (no standby ever asked): the baseline;
 *   session  capture on, the metric rows recorded by SQLite's session (as
 *            before): its pre-update hook at every INSERT, and the row
 *            read back by key when the changeset is taken;
 *   logged   capture on, the rows logged by the writer itself
 *            (repl_conn_metric_log / repl_conn_metric_row), as
 *            row_metric_insert does now.
 *
 * Each transaction is a heartbeat's shape: ROWS metric INSERTs and one
 * agents-like UPDATE (so the session is never empty). Per mode, REPS
 * transactions, alternating session and logged after the baseline (the
 * capture cannot be turned off again); printed: the median transaction
 * (BEGIN to COMMIT, the changeset included), the frame's bytes, and the
 * ratios to off. Synchronous=NORMAL and no flush thread: the fsync is the
 * same in every mode and is not what is measured.
 *
 *   bin/bench/repl_capture [ROWS [REPS]]   (defaults 3200 and 60)
 */
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/store/repl.h"
#include "scheduler/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "repl_capture: %s: %s\n", what, msg);
    exit(1);
}

static void sql(sqlite3 *db, const char *q)
{
    char *msg = NULL;
    if (sqlite3_exec(db, q, NULL, NULL, &msg) != SQLITE_OK) die(q, msg);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { OFF, SESSION, LOGGED };
static const char *const mode_name[] = {"off", "session", "logged"};
static int64_t next_step;

/* One heartbeat-shaped transaction in mode m. RET its microseconds. */
static double txn(store *st, int m, int rows)
{
    sqlite3 *db = store_db(st);
    int64_t t0 = hf_mono_us();
    if (store_begin(st)) die("begin", store_errmsg(st));
    repl_conn *rc = store_repl(st);
    int logged = m == LOGGED && repl_conn_metric_log(rc);
    if (m == LOGGED && !logged) die("logged", "repl_conn_metric_log refused: capture off or another layout");
    sqlite3_stmt *ins = store_stmt(st, ST_METRIC_INSERT);
    for (int i = 0; i < rows; i++) {
        int64_t step = next_step++;
        double value = 1.0 / (double)(step + 1), epoch = (double)step / 100.0;
        const char *name = i % 2 ? "loss" : "val_acc";
        sqlite3_bind_int64(ins, 1, 1 + i % 8);
        sqlite3_bind_int64(ins, 2, 1);
        sqlite3_bind_text(ins, 3, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 4, step);
        sqlite3_bind_double(ins, 5, epoch);
        sqlite3_bind_double(ins, 6, value);
        sqlite3_bind_int64(ins, 7, 1700000000000 + step);
        if (store_exec_stmt(ins)) die("insert", store_last_error());
        if (logged) {
            repl_metric_row r = {.seq = sqlite3_last_insert_rowid(db), .trial_id = 1 + i % 8, .attempt = 1,
                                 .name = name, .has_step = 1, .step = step, .has_epoch = 1, .epoch = epoch,
                                 .value = value, .time = 1700000000000 + step};
            if (repl_conn_metric_row(rc, &r)) die("metric_row", "out of memory");
        }
    }
    sql(db, "UPDATE agents SET last_heartbeat = last_heartbeat + 1 WHERE id = 1");
    if (store_commit(st)) die("commit", store_errmsg(st));
    return (double)(hf_mono_us() - t0);
}

int main(int argc, char **argv)
{
    int rows = argc > 1 ? atoi(argv[1]) : 3200, reps = argc > 2 ? atoi(argv[2]) : 60;
    if (rows < 1 || reps < 2) die("usage", "repl_capture [ROWS >= 1 [REPS >= 2]]");
    hf_log_set_level(HF_LOG_WARN);
    char dir[] = "/tmp/hf-repl-capture-XXXXXX", path[64], err[256] = "";
    if (!mkdtemp(dir)) die("mkdtemp", "failed");
    snprintf(path, sizeof path, "%s/hf.db", dir);
    store *st = NULL;
    if (store_open(path, &st, err, sizeof err)) die("store_open", err);
    if (store_set_sync(st, STORE_SYNC_NORMAL)) die("store_set_sync", "NORMAL");
    sqlite3 *db = store_db(st);
    sql(db, "PRAGMA foreign_keys=OFF");   /* the bench's trials and agent need no parents */
    sql(db, "INSERT INTO agents(id,name,host,slots,state,last_heartbeat,registered_at) VALUES(1,'bench','h',1,'ALIVE',1,1)");
    repl_set_role(REPL_PRIMARY);
    repl_config rcf = {.mode = REPL_ASYNC, .standby_timeout_s = 5, .buffer_bytes = (int64_t)1 << 30};
    if (repl_start(db, &rcf, err, sizeof err)) die("repl_start", err);

    double *us[3];
    int n[3] = {0, 0, 0};
    for (int m = 0; m < 3; m++)
        if (!(us[m] = calloc((size_t)reps, sizeof(double)))) die("calloc", "out of memory");
    for (int i = 0; i < 3; i++) txn(st, OFF, rows);   /* warm: the WAL's growth, the page cache */
    for (int i = 0; i < reps; i++) us[OFF][n[OFF]++] = txn(st, OFF, rows);
    repl_capture_enable();
    int64_t lsn0 = repl_lsn(), bytes[3] = {0, 0, 0};
    for (int i = 0; i < 2 * reps; i++) {
        int m = i % 2 ? LOGGED : SESSION;
        int64_t before = repl_lsn();
        us[m][n[m]++] = txn(st, m, rows);
        uint8_t *buf = NULL;
        size_t len = 0;
        if (repl_stream_read(before, 0, (size_t)1 << 30, &buf, &len) == 1) bytes[m] += (int64_t)len;
        free(buf);
    }
    if (repl_lsn() - lsn0 != 2 * reps) die("log", "a transaction sent no frame");
    double med[3];
    for (int m = 0; m < 3; m++) {
        qsort(us[m], (size_t)n[m], sizeof(double), cmp_d);
        med[m] = us[m][n[m] / 2];
    }
    printf("repl_capture: %d metric rows + 1 UPDATE a transaction, %d transactions a mode\n", rows, reps);
    printf("%-9s %14s %14s %10s\n", "mode", "median ms", "frame bytes", "vs off");
    for (int m = 0; m < 3; m++)
        printf("%-9s %14.3f %14lld %10.2f\n", mode_name[m], med[m] / 1000.0,
               m == OFF ? 0LL : (long long)(bytes[m] / n[m]), med[m] / med[OFF]);
    printf("logged / session: %.2f\n", med[LOGGED] / med[SESSION]);
    printf("REPL_CAPTURE {\"rows\": %d, \"off_ms\": %.3f, \"session_ms\": %.3f, \"logged_ms\": %.3f}\n", rows,
           med[OFF] / 1000.0, med[SESSION] / 1000.0, med[LOGGED] / 1000.0);
    repl_stop();
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) { /* best effort */ }
    return 0;
}
