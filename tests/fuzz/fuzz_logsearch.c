/*
 * fuzz_logsearch.c — libFuzzer target for the log-search pattern
 * (scheduler/api/logsearch.c): ?grep= with regex/icase, and the literal it
 * hands to the trigram index.
 *
 * Input: byte 0 = flags (bit 0 regex, bit 1 icase), then the pattern up to
 * the first '\n', then the line. Invariants (abort on violation): a
 * refused pattern names "grep"; a fixed, case-sensitive match is exactly
 * memmem; and whenever a line matches, it contains the needle (ASCII case
 * folded) — the property that makes asking the index for candidate rows
 * lose no match. Issue 27: a regex with a back-reference escape (\1..\9
 * outside brackets) never compiles; a match answers 1, 0 or HF_ETOOBIG
 * (a limit) and the same twice, and takes at most 2 s (the match limit
 * bounds it: ~6 ms a line with the JIT).
 */
// FUZZ_SOURCES: common/*.c scheduler/api/logsearch.c scheduler/store/store.c scheduler/store/repl.c scheduler/store/repl_ring.c
// FUZZ_LIBS: -ljansson -lsqlite3 -lcurl -lgnutls -lpcre2-8 -lpthread
#include "hf_err.h"
#include "hf_time.h"
#include "scheduler/api/logsearch.h"
#include "scheduler/store/store.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const store_migration store_migrations[] = {{0, NULL, NULL}};   /* store.c links; no store is opened */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int contains_icase(const char *h, size_t hl, const char *n)
{
    size_t nl = strlen(n);
    for (size_t i = 0; i + nl <= hl; i++) {
        size_t k = 0;
        while (k < nl && tolower((unsigned char)h[i + k]) == tolower((unsigned char)n[k])) k++;
        if (k == nl) return 1;
    }
    return nl == 0;
}

/* Does pat have \1..\9 where PCRE2 would read a back-reference: an
 * unescaped backslash before a digit, outside a bracket expression and
 * \Q...\E? (A coarse model: brackets end at the first unescaped ']'
 * after the first member.) */
static int has_backref(const char *pat)
{
    int in_br = 0;
    for (const char *c = pat; *c; c++) {
        if (*c == '\\' && c[1] == 'Q') return 0;   /* literal text follows: not modelled */
        if (*c == '\\' && c[1]) {
            if (!in_br && c[1] >= '1' && c[1] <= '9') return 1;
            c++;
            continue;
        }
        if (!in_br && *c == '[') {
            in_br = 1;
            if (c[1] == '^') c++;
            if (c[1] == ']') c++;
            continue;
        }
        if (in_br && *c == '[' && (c[1] == ':' || c[1] == '.' || c[1] == '=')) return 0;   /* not modelled */
        if (in_br && *c == ']') in_br = 0;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    int regex = data[0] & 1, icase = (data[0] >> 1) & 1;
    const char *rest = (const char *)data + 1;
    size_t rl = size - 1;
    const char *nl = memchr(rest, '\n', rl);
    size_t pl = nl ? (size_t)(nl - rest) : rl;
    char *pat = strndup(rest, pl);
    const char *line = nl ? nl + 1 : "";
    size_t ll = nl ? rl - pl - 1 : 0;
    char *lz = malloc(ll + 1);
    if (!pat || !lz) { free(pat); free(lz); return 0; }
    memcpy(lz, line, ll);
    lz[ll] = '\0';
    logsearch_pat *p = NULL;
    hf_jerr e;
    hf_jerr_clear(&e);
    int rc = logsearch_compile(pat, regex, icase, &p, &e);
    if (rc) {
        if (rc != HF_EINVAL || strcmp(e.field, "grep")) abort();
    } else {
        if (regex && has_backref(pat)) abort();
        size_t n = strlen(lz);   /* a NUL in the line ends it, as in SQLite's text */
        int64_t t0 = hf_mono_ms();
        int m = logsearch_match(p, lz, n);
        if (hf_mono_ms() - t0 > 2000) abort();
        if (m != 0 && m != 1 && m != HF_ETOOBIG) abort();
        if (logsearch_match(p, lz, n) != m) abort();
        if (!regex && !icase && m != (strlen(pat) <= n && memmem(lz, n, pat, strlen(pat)) != NULL)) abort();
        if (m == 1 && !contains_icase(lz, n, logsearch_needle(p))) abort();
        logsearch_pat_free(p);
    }
    free(pat);
    free(lz);
    return 0;
}
