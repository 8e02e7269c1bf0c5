/*
 * provision_slurm_parse.c — what the Slurm backend reads back from sbatch
 * and squeue (provision_slurm.h). Their output is untrusted input: another
 * version of Slurm, a wrapper script or a broken installation may print
 * anything, so every field is bounded and checked, and nothing here
 * allocates. Fuzzed by tests/fuzz/fuzz_slurm.c.
 */
#include "scheduler/provision/provision_slurm.h"

#include "hf_err.h"

#include <string.h>

/* Is s[0..n) a decimal job id that fits idlen with its NUL? */
static int job_id_ok(const char *s, size_t n, size_t idlen)
{
    if (n == 0 || n >= idlen || n > 18) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

int slurm_parse_sbatch(const char *buf, size_t len, char *id, size_t idlen)
{
    size_t n = 0;
    while (n < len && buf[n] >= '0' && buf[n] <= '9') n++;
    /* the id ends at ';' (a cluster name follows), a newline or the end */
    if (n < len && buf[n] != ';' && buf[n] != '\n' && buf[n] != '\r') return HF_EPARSE;
    if (!job_id_ok(buf, n, idlen)) return HF_EPARSE;
    memcpy(id, buf, n);
    id[n] = 0;
    return 0;
}

/* The state word s[0..n) as PROV_*, or -1 for a job that ended. */
static int state_of(const char *s, size_t n)
{
    static const struct { const char *w; int st; } tab[] = {
        {"PENDING", PROV_PENDING}, {"CONFIGURING", PROV_PENDING}, {"REQUEUED", PROV_PENDING},
        {"RUNNING", PROV_RUNNING}, {"COMPLETING", PROV_RUNNING},  {"SUSPENDED", PROV_RUNNING},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strlen(tab[i].w) == n && memcmp(tab[i].w, s, n) == 0) return tab[i].st;
    return -1;
}

/* One line "ID|STATE|NODES" (l[0..n), no newline) into *j. RET 1 a live
 * job, 0 an ended one, -1 malformed. */
static int parse_line(const char *l, size_t n, prov_job *j)
{
    const char *f[3];
    size_t fl[3];
    size_t k = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && l[i] != '|') continue;
        if (k == 3) return -1;
        f[k] = l + start;
        fl[k++] = i - start;
        start = i + 1;
    }
    if (k != 3 || !job_id_ok(f[0], fl[0], sizeof j->id)) return -1;
    int nodes = 0;
    if (fl[2] == 0 || fl[2] > 5) return -1;
    for (size_t i = 0; i < fl[2]; i++) {
        if (f[2][i] < '0' || f[2][i] > '9') return -1;
        nodes = nodes * 10 + (f[2][i] - '0');
    }
    if (nodes < 1) return -1;
    int st = state_of(f[1], fl[1]);
    if (st < 0) return 0;
    memcpy(j->id, f[0], fl[0]);
    j->id[fl[0]] = 0;
    j->nodes = nodes;
    j->state = st;
    return 1;
}

int slurm_parse_squeue(const char *buf, size_t len, prov_job *jobs, int max, int *n, int *bad)
{
    int rc = 0;
    *n = 0;
    *bad = 0;
    size_t i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        size_t ll = e - i;
        if (ll && buf[i + ll - 1] == '\r') ll--;
        if (ll) {
            prov_job j;
            int r = parse_line(buf + i, ll, &j);
            if (r < 0) (*bad)++;
            else if (r > 0 && *n < max) jobs[(*n)++] = j;
            else if (r > 0) rc = HF_ETOOBIG;
        }
        i = e + 1;
    }
    return rc;
}
