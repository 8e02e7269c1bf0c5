/*
 * logsearch.c — log search over the store (logsearch.h).
 *
 * The pattern is an application SQL function, hf_grep(seq, line), created
 * on the borrowed reader connection for one query and dropped after it,
 * so only matching rows are turned into JSON. Rows are scanned in seq
 * order (one trial: its (trial_id, seq) index; an experiment: the logs
 * table in rowid order, NOT INDEXED, testing trial membership first), and
 * the function notes the last seq it saw not matching: when the time
 * budget interrupts the scan (a progress handler), every row up to
 * max(that, the last row returned) has been looked at, which is the
 * "next" a client resumes after. Figures: docs/protocol.md "Log search".
 */
#include "scheduler/logsearch.h"

#include "hf_err.h"
#include "hf_time.h"

#include <ctype.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

struct logsearch_pat {
    int     regex, icase;
    char    needle[LOGSEARCH_MAX_PAT + 1];   /* a substring every match contains ("" = none known) */
    char   *fixed;      /* fixed string (lowercased when icase) */
    size_t  flen;
    regex_t re;
    int     re_ok;
};

/* Keep the longer of the best run so far and run[0..n). */
static void keep_run(char *best, const char *run, size_t n)
{
    if (n > strlen(best)) {
        memcpy(best, run, n);
        best[n] = '\0';
    }
}

/* A literal every match of the POSIX ERE pat must contain: the longest
 * run of plain characters outside groups, brackets and alternation, less a
 * last character made optional by a following * ? or {. "" when the
 * pattern has '|' or no such run. Only printable ASCII (the index folds
 * ASCII case as LIKE does). */
static void regex_needle(const char *pat, char *best)
{
    char run[LOGSEARCH_MAX_PAT + 1];
    size_t n = 0;
    int depth = 0;
    best[0] = '\0';
    if (strchr(pat, '|')) return;
    for (const char *c = pat; *c; c++) {
        unsigned char ch = (unsigned char)*c;
        if (ch == '\\' && c[1] && !isalnum((unsigned char)c[1]) && (unsigned char)c[1] < 0x80) {
            c++;
            if (depth == 0 && c[1] != '*' && c[1] != '?' && c[1] != '{') { run[n++] = *c; continue; }
            keep_run(best, run, n);
            n = 0;
            continue;
        }
        if (strchr("*?{", ch) && ch) {
            if (n > 0) n--;   /* the previous character is optional */
            keep_run(best, run, n);
            n = 0;
            if (ch == '{') while (c[1] && *c != '}') c++;
            continue;
        }
        if (ch == '[') {
            keep_run(best, run, n);
            n = 0;
            c++;
            if (*c == '^') c++;
            if (*c == ']') c++;
            while (*c && *c != ']') c++;
            if (!*c) return;
            continue;
        }
        if (ch == '(' || ch == ')') depth += ch == '(' ? 1 : -1;
        if (ch == '+' || ch == '.' || ch == '^' || ch == '$' || ch == '(' || ch == ')' || ch == '\\' || ch >= 0x80 ||
            depth > 0) {
            keep_run(best, run, n);
            n = 0;
            continue;
        }
        /* an ordinary character; a following quantifier is seen next turn */
        run[n++] = (char)ch;
    }
    keep_run(best, run, n);
}

int logsearch_compile(const char *pat, int regex, int icase, logsearch_pat **out, hf_jerr *e)
{
    *out = NULL;
    if (!pat || !*pat) return hf_jerr_set(e, "grep", NULL, "required: a string or, with regex=1, a regular expression");
    size_t n = strlen(pat);
    if (n > LOGSEARCH_MAX_PAT)
        return hf_jerr_set(e, "grep", NULL, "pattern too long: %zu bytes, at most %d", n, LOGSEARCH_MAX_PAT);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)pat[i] < 0x20 || pat[i] == 0x7f)
            return hf_jerr_set(e, "grep", NULL, "control character at byte %zu", i);
    logsearch_pat *p = calloc(1, sizeof *p);
    if (!p) return HF_ENOMEM;
    p->regex = regex;
    p->icase = icase;
    if (regex) {
        int rc = regcomp(&p->re, pat, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0));
        if (rc) {
            char msg[160];
            regerror(rc, &p->re, msg, sizeof msg);
            free(p);
            return hf_jerr_set(e, "grep", NULL, "bad regular expression '%s': %s", pat, msg);
        }
        p->re_ok = 1;
        regex_needle(pat, p->needle);
    } else {
        int ascii = 1;
        for (size_t i = 0; i < n; i++) ascii &= (unsigned char)pat[i] < 0x80 && pat[i] != '%' && pat[i] != '_';
        if (ascii) memcpy(p->needle, pat, n + 1);
        p->fixed = strdup(pat);
        if (!p->fixed) { free(p); return HF_ENOMEM; }
        p->flen = n;
        if (icase)
            for (size_t i = 0; i < n; i++) p->fixed[i] = (char)tolower((unsigned char)p->fixed[i]);
    }
    *out = p;
    return 0;
}

void logsearch_pat_free(logsearch_pat *p)
{
    if (!p) return;
    if (p->re_ok) regfree(&p->re);
    free(p->fixed);
    free(p);
}

/* ASCII case-insensitive memmem; needle already lowercase. */
static int find_icase(const char *h, size_t hl, const char *nd, size_t nl)
{
    if (nl > hl) return 0;
    unsigned char c0 = (unsigned char)nd[0];
    unsigned char C0 = (unsigned char)toupper(c0);
    for (size_t i = 0; i + nl <= hl; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c != c0 && c != C0) continue;
        size_t k = 1;
        while (k < nl && tolower((unsigned char)h[i + k]) == (unsigned char)nd[k]) k++;
        if (k == nl) return 1;
    }
    return 0;
}

int logsearch_match(const logsearch_pat *p, const char *line, size_t len)
{
    if (p->regex) {
        /* regexec needs a NUL-terminated string: lines from the store are;
         * others (tests, fuzzing) are copied. */
        if (line[len] == '\0') return regexec(&p->re, line, 0, NULL, 0) == 0;
        char *tmp = strndup(line, len);
        int m = tmp && regexec(&p->re, tmp, 0, NULL, 0) == 0;
        free(tmp);
        return m;
    }
    if (p->icase) return find_icase(line, len, p->fixed, p->flen);
    return memmem(line, len, p->fixed, p->flen) != NULL;
}

typedef struct scan {
    const logsearch_pat *p;
    int64_t after;         /* where this call started */
    int64_t last_row;      /* newest seq returned */
    int64_t last_miss;     /* newest seq seen that did not match */
    int64_t scanned;
    int64_t deadline;      /* hf_mono_ms */
    int     timed_out;
} scan;

static void fn_grep(sqlite3_context *cx, int argc, sqlite3_value **v)
{
    (void)argc;
    scan *s = sqlite3_user_data(cx);
    const char *line = (const char *)sqlite3_value_text(v[1]);
    int n = sqlite3_value_bytes(v[1]);
    s->scanned++;
    int m = line && logsearch_match(s->p, line, (size_t)n);
    if (!m) s->last_miss = sqlite3_value_int64(v[0]);
    sqlite3_result_int(cx, m);
}

static int on_progress(void *arg)
{
    scan *s = arg;
    if (hf_mono_ms() < s->deadline) return 0;
    if (s->last_miss <= s->after && s->last_row <= s->after) return 0;   /* decide one row first: progress */
    s->timed_out = 1;
    return 1;
}

int logsearch_run(store *sto, int64_t trial_id, int64_t exp_id, const logsearch_pat *p, int64_t after,
                  int64_t limit, int64_t budget_ms, json_t **out)
{
    static const char *const q_trial =
        "SELECT seq,trial_id,stream,line,time FROM logs WHERE trial_id=?1 AND seq>?2 AND hf_grep(seq,line) "
        "ORDER BY seq LIMIT ?3";
    static const char *const q_exp =
        "SELECT seq,trial_id,stream,line,time FROM logs NOT INDEXED WHERE seq>?2 AND trial_id IN "
        "(SELECT id FROM trials WHERE experiment_id=?1) AND hf_grep(seq,line) ORDER BY seq LIMIT ?3";
    /* With a needle of 3+ characters: only the rows the trigram index
     * (schema/0009_insight.sql) says contain it, in rowid order (CROSS
     * JOIN: the index drives, else the planner walks logs_trial and sorts). */
    static const char *const q_exp_fts =
        "SELECT l.seq,l.trial_id,l.stream,l.line,l.time FROM logs_fts f CROSS JOIN logs l ON l.seq=f.rowid "
        "WHERE f.line LIKE ?4 AND f.rowid>?2 AND l.trial_id IN (SELECT id FROM trials WHERE experiment_id=?1) "
        "AND hf_grep(l.seq,l.line) ORDER BY f.rowid LIMIT ?3";
    int64_t t0 = hf_mono_ms();
    scan s = {.p = p, .after = after, .last_row = after, .last_miss = after, .deadline = t0 + (budget_ms > 0 ? budget_ms : LOGSEARCH_BUDGET_MS)};
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    int64_t last_row = after, n = 0;
    json_t *arr = json_array();
    *out = NULL;
    if (!arr) { rc = HF_ENOMEM; goto end; }
    if (sqlite3_create_function(db, "hf_grep", 2, SQLITE_UTF8, &s, fn_grep, NULL, NULL) != SQLITE_OK) goto end;
    sqlite3_progress_handler(db, 20000, on_progress, &s);
    int indexed = trial_id <= 0 && strlen(p->needle) >= 3;
    if (sqlite3_prepare_v2(db, trial_id > 0 ? q_trial : indexed ? q_exp_fts : q_exp, -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, trial_id > 0 ? trial_id : exp_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    if (indexed) {
        char like[LOGSEARCH_MAX_PAT + 3];
        snprintf(like, sizeof like, "%%%s%%", p->needle);
        sqlite3_bind_text(st, 4, like, -1, SQLITE_TRANSIENT);
    }
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *stream = (const char *)sqlite3_column_text(st, 2);
        const char *line = (const char *)sqlite3_column_text(st, 3);
        last_row = s.last_row = sqlite3_column_int64(st, 0);
        json_t *l = json_string(line ? line : "");
        json_array_append_new(arr, json_pack("{sIsIsssosI}", "seq", (json_int_t)last_row, "trial_id",
                                             (json_int_t)sqlite3_column_int64(st, 1), "stream", stream ? stream : "",
                                             "line", l ? l : json_string("?"),
                                             "time", (json_int_t)sqlite3_column_int64(st, 4)));
        n++;
    }
    if (src != SQLITE_DONE && !(src == SQLITE_INTERRUPT && s.timed_out)) { rc = store_rc(src); goto end; }
    int truncated = s.timed_out || n >= limit;
    /* Complete scan: next = the newest row looked at; cut by the limit:
     * the last row returned; cut by time: everything up to the newer of
     * the last returned and the last missed has been looked at. */
    int64_t next = n >= limit && !s.timed_out ? last_row : (last_row > s.last_miss ? last_row : s.last_miss);
    *out = json_pack("{sOsIsbsIsbsI}", "logs", arr, "next", (json_int_t)next, "truncated", truncated, "scanned",
                     (json_int_t)s.scanned, "indexed", indexed, "ms", (json_int_t)(hf_mono_ms() - t0));
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(arr);
    sqlite3_finalize(st);
    sqlite3_progress_handler(db, 0, NULL, NULL);
    sqlite3_create_function(db, "hf_grep", 2, SQLITE_UTF8, NULL, NULL, NULL, NULL);
    store_reader_put(sto, db);
    return rc;
}

const char *logsearch_needle(const logsearch_pat *p)
{
    return p->needle;
}
