/*
 * fuzz_logsearch.c — libFuzzer target for the log-search pattern
 * (scheduler/logsearch.c): ?grep= with regex/icase, and the literal it
 * hands to the trigram index.
 *
 * Input: byte 0 = flags (bit 0 regex, bit 1 icase), then the pattern up to
 * the first '\n', then the line. Invariants (abort on violation): a
 * refused pattern names "grep"; a fixed, case-sensitive match is exactly
 * memmem; and whenever a line matches, it contains the needle (ASCII case
 * folded) — the property that makes asking the index for candidate rows
 * lose no match.
 */
// FUZZ_SOURCES: common/*.c scheduler/logsearch.c scheduler/store.c
// FUZZ_LIBS: -ljansson -lsqlite3 -lcurl -lgnutls -lpthread
#include "hf_err.h"
#include "scheduler/logsearch.h"
#include "scheduler/store.h"

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
        size_t n = strlen(lz);   /* a NUL in the line ends it, as in SQLite's text */
        int m = logsearch_match(p, lz, n);
        if (!regex && !icase && m != (strlen(pat) <= n && memmem(lz, n, pat, strlen(pat)) != NULL)) abort();
        if (m && !contains_icase(lz, n, logsearch_needle(p))) abort();
        logsearch_pat_free(p);
    }
    free(pat);
    free(lz);
    return 0;
}
