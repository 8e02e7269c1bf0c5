/*
 * purge_delete.c — deleting an experiment of many metric points
 * (docs/scheduler.md "Deleting an experiment"), the old way beside the
 * purge, on two copies of one database, with the replication log
 * capturing (as when a standby follows):
 *
 *   before  the delete as it was: every row of the experiment in one
 *           transaction under the core lock (the statements of the old
 *           row_exp_delete, copied below, run under sched_lock);
 *   after   sched_experiment_delete (one small transaction), then
 *           sched_tick until the purge is done, a tick every
 *           BENCH_TICK_GAP_MS (the cron ticks every 100 ms; the gap is
 *           shorter here to keep the run short, the batches are the same).
 *
 * For each: the longest core-lock hold (the transaction, or one tick),
 * the longest wait of a probe thread calling sched_get_stats every
 * millisecond (what any request of the farm waits), the largest
 * replication frame (a standby refuses one over 64 MiB,
 * STANDBY_FRAME_MAX), the WAL's largest size; for the purge also its
 * batches and their total work. Then the ratios.
 *
 *   bin/bench/purge_delete [POINTS [TRIALS [CONCURRENT]]]
 *     POINTS      metric points of the deleted experiment (1000000)
 *     TRIALS      its trials (200)
 *     CONCURRENT  trials reporting at once, interleaved in the table (16)
 */
#include "scheduler/core/sched_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/store/repl.h"
#include "scheduler/store/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BENCH_TICK_GAP_MS 5
#define EXP(name) "{\"name\": \"" name "\", \"objective\": {\"metric\": \"loss\", \"goal\": \"minimize\"}," \
                  "\"searcher\": {\"name\": \"random\", \"max_trials\": 100000, \"seed\": 1}," \
                  "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}," \
                  "\"trial\": {\"command\": [\"true\"]}}"

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "purge_delete: %s: %s\n", what, msg);
    exit(1);
}

static void sql(sqlite3 *db, const char *q)
{
    char *msg = NULL;
    if (sqlite3_exec(db, q, NULL, NULL, &msg) != SQLITE_OK) die(q, msg);
}

static int64_t submit(sched *s, const char *text)
{
    json_t *cfg = json_loads(text, 0, NULL);
    hf_jerr e;
    int64_t id = 0;
    if (!cfg || sched_experiment_submit(s, cfg, &id, &e)) die("submit", e.msg);
    json_decref(cfg);
    return id;
}

/* Experiment x: trials from tid0, points metric points reported by
 * `conc` trials at a time (waves of trials, interleaved within a wave),
 * an event per trial; all ended. */
static void fill(sqlite3 *db, int64_t x, int64_t tid0, int64_t trials, int64_t points, int64_t conc)
{
    char q[512];
    sqlite3_stmt *st = NULL;
    sql(db, "BEGIN");
    snprintf(q, sizeof q, "UPDATE experiments SET state='COMPLETED', ended_at=1 WHERE id=%lld", (long long)x);
    sql(db, q);
    for (int64_t t = 0; t < trials; t++) {
        snprintf(q, sizeof q, "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at,ended_at) "
                              "VALUES(%lld,%lld,%lld,'COMPLETED','{\"x\":0.5}',1,1,2)",
                 (long long)(tid0 + t), (long long)x, (long long)t);
        sql(db, q);
        snprintf(q, sizeof q, "INSERT INTO events(time,experiment_id,trial_id,type,detail) "
                              "VALUES(1,%lld,%lld,'COMPLETED','exit 0')", (long long)x, (long long)(tid0 + t));
        sql(db, q);
    }
    if (sqlite3_prepare_v2(db, "INSERT INTO metrics(trial_id,attempt,name,step,epoch,value,time) VALUES(?,1,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        die("prepare", sqlite3_errmsg(db));
    int64_t waves = trials / conc > 0 ? trials / conc : 1, per_wave = points / waves + 1;
    for (int64_t i = 0; i < points; i++) {
        int64_t w = i / per_wave, k = i % conc;
        sqlite3_bind_int64(st, 1, tid0 + (w * conc + k) % trials);
        sqlite3_bind_text(st, 2, i % 2 ? "loss" : "accuracy", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, i / conc);
        sqlite3_bind_double(st, 4, (double)(i / conc) / 100.0);
        sqlite3_bind_double(st, 5, 1.0 / (double)(i + 1));
        sqlite3_bind_int64(st, 6, 1700000000000 + i);
        if (sqlite3_step(st) != SQLITE_DONE) die("insert", sqlite3_errmsg(db));
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sql(db, "COMMIT");
}

/* ---------- the probe: what a request waits for the core lock ---------- */

static struct {
    sched          *s;
    atomic_int      stop;
    _Atomic int64_t max_us;
    int64_t         n;
} probe;

static void *probe_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&probe.stop)) {
        sched_stats ss;
        int64_t t0 = hf_mono_us();
        sched_get_stats(probe.s, &ss);
        int64_t d = hf_mono_us() - t0;
        if (d > atomic_load(&probe.max_us)) atomic_store(&probe.max_us, d);
        probe.n++;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return NULL;
}

static pthread_t probe_start(sched *s)
{
    pthread_t th;
    probe.s = s;
    atomic_store(&probe.stop, 0);
    atomic_store(&probe.max_us, 0);
    probe.n = 0;
    if (pthread_create(&th, NULL, probe_main, NULL)) die("probe", "pthread_create");
    return th;
}

static int64_t probe_end(pthread_t th)
{
    atomic_store(&probe.stop, 1);
    pthread_join(th, NULL);
    return atomic_load(&probe.max_us);
}

/* ---------- measures ---------- */

static int64_t wal_bytes(const char *path)
{
    char w[640];
    struct stat sb;
    snprintf(w, sizeof w, "%s-wal", path);
    return stat(w, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

/* The frames after `after`: how many, the largest changeset, the sum. */
static int frames(int64_t after, int64_t *largest, int64_t *total)
{
    int n = 0;
    *largest = *total = 0;
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0, off = 0;
        int got = repl_stream_read(after, 0, REPL_STREAM_MAX, &buf, &len);
        if (got < 0) die("repl_stream_read", hf_strerror(got));
        if (got == 0) break;
        for (int i = 0; i < got; i++) {
            uint64_t lsn = 0;
            uint32_t clen = 0;
            for (int k = 0; k < 8; k++) lsn = lsn << 8 | buf[off + k];
            for (int k = 0; k < 4; k++) clen = clen << 8 | buf[off + 20 + k];
            if ((int64_t)clen > *largest) *largest = clen;
            *total += clen;
            off += REPL_FRAME_HDR + clen;
            after = (int64_t)lsn;
            n++;
        }
        free(buf);
    }
    return n;
}

typedef struct result {
    int64_t lock_us;      /* the longest core-lock hold */
    int64_t probe_us;     /* the probe's longest wait */
    int64_t frame, nframes, frame_total;
    int64_t wal;          /* the WAL's largest size seen */
    int64_t batches, work_us, request_us;
    int64_t tick_p50_us, tick_p99_us;
    int64_t longest_at;   /* which batch was the longest */
} result;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Open path's store and core with the replication log capturing; one
 * small write first (a description of experiment warm), so that the
 * first write's cold start (the WAL's creation) is not timed. */
static void open_at(const char *path, int64_t warm, store **st, sched **s)
{
    char err[256] = "";
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (store_open(path, st, err, sizeof err)) die("store_open", err);
    if (store_set_sync(*st, STORE_SYNC_FULL)) die("store_set_sync", "FULL");
    repl_set_role(REPL_PRIMARY);
    repl_config rc = {.mode = REPL_ASYNC, .standby_timeout_s = 5, .buffer_bytes = (int64_t)1 << 30};
    if (repl_start(store_db(*st), &rc, err, sizeof err)) die("repl_start", err);
    repl_capture_enable();
    if (sched_new(&cfg, *st, NULL, s, err, sizeof err)) die("sched_new", err);
    json_t *body = json_pack("{ss}", "description", "kept"), *out = NULL;
    hf_jerr e;
    if (!body || sched_experiment_patch(*s, warm, body, NULL, &out, &e)) die("patch", e.msg);
    json_decref(out);
    json_decref(body);
}

static void close_at(store *st, sched *s)
{
    sched_free(s);
    repl_stop();
    store_close(st);
}

/* The delete before the purge: the old row_exp_delete's statements, in
 * one transaction under the core lock (its event and model update left
 * out: they cost nothing beside it). */
static void run_before(const char *path, int64_t x, int64_t y, result *r)
{
    static const char *const old_sql[] = {
        "INSERT INTO id_floor(name,id) VALUES('experiments',coalesce((SELECT max(id) FROM experiments),0)) "
        "ON CONFLICT(name) DO UPDATE SET id=max(id,excluded.id)",
        "INSERT INTO id_floor(name,id) VALUES('trials',coalesce((SELECT max(id) FROM trials),0)) "
        "ON CONFLICT(name) DO UPDATE SET id=max(id,excluded.id)",
        "DELETE FROM metrics WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id=?1)",
        "DELETE FROM logs WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id=?1)",
        "DELETE FROM allocations WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id=?1)",
        "DELETE FROM checkpoints WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id=?1)",
        "DELETE FROM events WHERE experiment_id=?1 OR trial_id IN (SELECT id FROM trials WHERE experiment_id=?1)",
        "DELETE FROM trials WHERE experiment_id=?1",
        "DELETE FROM experiments WHERE id=?1",
    };
    store *st;
    sched *s;
    open_at(path, y, &st, &s);
    int64_t lsn0 = repl_lsn();
    pthread_t th = probe_start(s);
    struct timespec ms = {0, 20000000};
    nanosleep(&ms, NULL);
    sched_lock(s);
    int64_t t0 = hf_mono_us();
    if (store_begin(st)) die("begin", store_errmsg(st));
    for (size_t i = 0; i < sizeof old_sql / sizeof old_sql[0]; i++) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(store_db(st), old_sql[i], -1, &q, NULL) != SQLITE_OK) die("prepare", store_errmsg(st));
        sqlite3_bind_int64(q, 1, x);
        if (store_exec_stmt(q)) die(old_sql[i], store_last_error());
        sqlite3_finalize(q);
    }
    if (store_commit(st)) die("commit", store_errmsg(st));
    r->lock_us = hf_mono_us() - t0;
    r->wal = wal_bytes(path);
    sched_unlock(s);
    nanosleep(&ms, NULL);
    r->probe_us = probe_end(th);
    r->nframes = frames(lsn0, &r->frame, &r->frame_total);
    r->batches = 1;
    r->work_us = r->request_us = r->lock_us;
    close_at(st, s);
}

static void run_after(const char *path, int64_t x, int64_t y, result *r)
{
    store *st;
    sched *s;
    hf_jerr e;
    sched_stats ss;
    open_at(path, y, &st, &s);
    int64_t lsn0 = repl_lsn();
    pthread_t th = probe_start(s);
    int64_t t0 = hf_mono_us();
    if (sched_experiment_delete(s, x, &e)) die("delete", e.msg);
    r->request_us = hf_mono_us() - t0;
    r->lock_us = r->request_us;
    size_t cap = 1024, nt = 0;
    int64_t *ticks = malloc(cap * sizeof *ticks);
    if (!ticks) die("malloc", "ticks");
    for (;;) {
        sched_get_stats(s, &ss);
        if (!ss.experiments_purging) break;
        struct timespec gap = {0, BENCH_TICK_GAP_MS * 1000000L};
        nanosleep(&gap, NULL);
        t0 = hf_mono_us();
        sched_tick(s);
        int64_t d = hf_mono_us() - t0;
        if (d > r->lock_us) { r->lock_us = d; r->longest_at = r->batches; }
        if (nt == cap && !(ticks = realloc(ticks, (cap *= 2) * sizeof *ticks))) die("realloc", "ticks");
        ticks[nt++] = d;
        r->work_us += d;
        r->batches++;
        int64_t w = wal_bytes(path);
        if (w > r->wal) r->wal = w;
    }
    r->probe_us = probe_end(th);
    r->nframes = frames(lsn0, &r->frame, &r->frame_total);
    qsort(ticks, nt, sizeof *ticks, cmp_i64);
    r->tick_p50_us = nt ? ticks[nt / 2] : 0;
    r->tick_p99_us = nt ? ticks[nt * 99 / 100] : 0;
    free(ticks);
    close_at(st, s);
}

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[1 << 16];
    size_t n;
    int rc = a && b ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n) rc = -1;
    if (a) fclose(a);
    if (b && fclose(b)) rc = -1;
    return rc;
}

int main(int argc, char **argv)
{
    int64_t points = argc > 1 ? atoll(argv[1]) : 1000000, trials = argc > 2 ? atoll(argv[2]) : 200,
            conc = argc > 3 ? atoll(argv[3]) : 16;
    if (points < 1 || trials < 1 || conc < 1) die("usage", "purge_delete [POINTS [TRIALS [CONCURRENT]]]");
    char dir[] = "/tmp/hf_purge_bench_XXXXXX", base[600], a[600], b[600], err[256];
    if (!mkdtemp(dir)) die("mkdtemp", "failed");
    snprintf(base, sizeof base, "%s/base.db", dir);
    snprintf(a, sizeof a, "%s/before.db", dir);
    snprintf(b, sizeof b, "%s/after.db", dir);
    hf_log_set_level(HF_LOG_WARN);

    store *st;
    sched *s;
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (store_open(base, &st, err, sizeof err) || sched_new(&cfg, st, NULL, &s, err, sizeof err)) die("open", err);
    int64_t x = submit(s, EXP("deleted")), y = submit(s, EXP("kept"));
    sched_free(s);
    int64_t t0 = hf_mono_ms();
    fill(store_db(st), x, 1, trials, points, conc);
    fill(store_db(st), y, trials + 1, 4, 1000, 4);
    store_close(st);   /* folds the WAL in */
    printf("purge_delete: an experiment of %lld metric points over %lld trials (%lld at a time), beside one kept; "
           "built in %.1f s\n", (long long)points, (long long)trials, (long long)conc,
           (double)(hf_mono_ms() - t0) / 1000.0);
    if (copy_file(base, a) || copy_file(base, b)) die("copy", base);

    result before = {0}, after = {0};
    run_before(a, x, y, &before);
    run_after(b, x, y, &after);

    const double MiB = 1048576.0;
    printf("before (one transaction): core lock held %.1f ms; probe's longest wait %.1f ms; largest frame %.2f MiB "
           "(%lld frames, %.2f MiB); WAL %.1f MiB\n",
           (double)before.lock_us / 1000.0, (double)before.probe_us / 1000.0, (double)before.frame / MiB,
           (long long)before.nframes, (double)before.frame_total / MiB, (double)before.wal / MiB);
    printf("after  (purge):           delete request %.2f ms; tick p50 %.1f ms, p99 %.1f ms, longest %.1f ms (batch %lld); "
           "probe's longest wait %.1f ms; "
           "largest frame %.2f MiB (%lld frames, %.2f MiB); WAL at most %.1f MiB; %lld batches, %.1f s of work "
           "(at one batch per 100 ms tick: %.0f s)\n",
           (double)after.request_us / 1000.0, (double)after.tick_p50_us / 1000.0,
           (double)after.tick_p99_us / 1000.0, (double)after.lock_us / 1000.0, (long long)after.longest_at,
           (double)after.probe_us / 1000.0,
           (double)after.frame / MiB, (long long)after.nframes, (double)after.frame_total / MiB,
           (double)after.wal / MiB, (long long)after.batches, (double)after.work_us / 1e6,
           (double)after.batches * 0.1);
    printf("ratio before/after: longest core-lock hold %.0fx, probe's longest wait %.0fx, largest frame %.0fx\n",
           (double)before.lock_us / (double)(after.lock_us ? after.lock_us : 1),
           (double)before.probe_us / (double)(after.probe_us ? after.probe_us : 1),
           (double)before.frame / (double)(after.frame ? after.frame : 1));
    unlink(base);
    unlink(a);
    unlink(b);
    rmdir(dir);
    return 0;
}
