/*
 * hf_client.h — a tiny, self-contained client for trials written in C or
 * C++ (docs/design.md §4). Copy this one file next to your program: it needs
 * only libc, no hyperfarm library and no JSON library.
 *
 *     #include "hf_client.h"
 *     int main(void) {
 *         hf_client_init();                        // SIGTERM -> hf_should_stop()
 *         int start = resume_from(hf_checkpoint_dir());
 *         for (int epoch = start; epoch < hf_max_epochs(10); epoch++) {
 *             double lr = hf_hparam_double("lr", 0.01);
 *             ... train ...
 *             hf_report_kv(epoch * 100, epoch, "val_acc", acc);
 *             save_checkpoint(hf_checkpoint_dir(), epoch);
 *             if (hf_should_stop()) return 0;      // the searcher stopped us
 *         }
 *     }
 *
 * Reports are "HYPERFARM {json}" lines on stdout, flushed at once, so the
 * agent sees them as they happen. hf_should_stop() is true after SIGTERM
 * (the agent then waits a grace period before SIGKILL: checkpoint and exit)
 * or when the agent's control file ($HYPERFARM_CONTROL_FILE, i.e.
 * $HYPERFARM_CHECKPOINT_DIR/../control.json) says {"should_stop": true}.
 * The control file is re-read at most every HF_CLIENT_POLL_MS.
 *
 * Everything is static inline: include it in one or many files; the stop
 * flag is per translation unit, so call hf_client_init() and
 * hf_should_stop() from the same file.
 */
#ifndef HF_CLIENT_H
#define HF_CLIENT_H

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HF_CLIENT_POLL_MS 500

static volatile sig_atomic_t hf_client_term_flag;

static inline void hf_client_on_term(int sig)
{
    (void)sig;
    hf_client_term_flag = 1;
}

/* Install the SIGTERM handler (SIGINT too). RET 0, or -1 if sigaction failed. */
static inline int hf_client_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hf_client_on_term;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL)) return -1;
    return 0;
}

/* Where to write and look for checkpoints; "." outside hyperfarm. */
static inline const char *hf_checkpoint_dir(void)
{
    const char *d = getenv("HYPERFARM_CHECKPOINT_DIR");
    return d && *d ? d : ".";
}

/* The hyperparameters as the raw JSON object text ("{}" outside hyperfarm). */
static inline const char *hf_hparams_json(void)
{
    const char *h = getenv("HYPERFARM_HPARAMS");
    return h && *h ? h : "{}";
}

/* Value of the top-level member name of HYPERFARM_HPARAMS if it is a number
 * (or true/false as 1/0), else def. A small scanner, enough for the flat
 * objects the scheduler sends; use a JSON library for anything nested. */
static inline double hf_hparam_double(const char *name, double def)
{
    const char *h = hf_hparams_json(), *p = h;
    size_t n = strlen(name);
    int depth = 0;
    while (*p) {
        if (*p == '{' || *p == '[') { depth++; p++; continue; }
        if (*p == '}' || *p == ']') { depth--; p++; continue; }
        if (*p != '"') { p++; continue; }
        const char *k = ++p;                       /* a string: key or value */
        while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
        size_t klen = (size_t)(p - k);
        if (*p) p++;
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        if (depth != 1 || *q != ':' || klen != n || strncmp(k, name, n) != 0) continue;
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        if (!strncmp(q, "true", 4)) return 1;
        if (!strncmp(q, "false", 5)) return 0;
        char *end;
        double v = strtod(q, &end);
        return end != q && isfinite(v) ? v : def;
    }
    return def;
}

static inline long hf_hparam_int(const char *name, long def)
{
    return (long)hf_hparam_double(name, (double)def);
}

/* HYPERFARM_MAX_EPOCHS (the budget the searcher grants), or def. */
static inline long hf_max_epochs(long def)
{
    const char *e = getenv("HYPERFARM_MAX_EPOCHS");
    char *end;
    long v = e ? strtol(e, &end, 10) : 0;
    return e && end != e && v > 0 ? v : def;
}

static inline int64_t hf_client_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* True once the trial should stop: SIGTERM received or the control file
 * says so. Cheap to call in a training loop. */
static inline int hf_should_stop(void)
{
    static int64_t last;
    static int file_says;
    if (hf_client_term_flag) return 1;
    int64_t now = hf_client_now_ms();
    if (!file_says && now - last >= HF_CLIENT_POLL_MS) {
        char path[4096], buf[512];
        const char *c = getenv("HYPERFARM_CONTROL_FILE");
        last = now;
        if (c && *c) snprintf(path, sizeof path, "%s", c);
        else if (getenv("HYPERFARM_CHECKPOINT_DIR")) snprintf(path, sizeof path, "%s/../control.json", hf_checkpoint_dir());
        else return 0;
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = '\0';
            const char *p = strstr(buf, "\"should_stop\"");
            if (p) {
                p += 13;
                while (*p == ' ' || *p == ':' || *p == '\t') p++;
                file_says = strncmp(p, "true", 4) == 0;
            }
        }
    }
    return file_says;
}

/* Print one report: step (< 0 = none), epoch (< 0 = none), n metrics.
 * Names must be [A-Za-z0-9_.:/-]{1,64}; non-finite values are skipped. */
static inline void hf_report(int64_t step, double epoch, int n, const char *const *names, const double *values)
{
    char line[8192];
    size_t off = 0;
    int sep = 0;
    off += (size_t)snprintf(line, sizeof line, "HYPERFARM {");
    if (step >= 0) { off += (size_t)snprintf(line + off, sizeof line - off, "\"step\": %lld", (long long)step); sep = 1; }
    if (epoch >= 0 && off < sizeof line) {
        off += (size_t)snprintf(line + off, sizeof line - off, "%s\"epoch\": %.17g", sep ? ", " : "", epoch);
        sep = 1;
    }
    for (int i = 0; i < n && off < sizeof line; i++) {
        if (!isfinite(values[i])) continue;
        off += (size_t)snprintf(line + off, sizeof line - off, "%s\"%s\": %.17g", sep ? ", " : "", names[i], values[i]);
        sep = 1;
    }
    if (off >= sizeof line - 2) return;   /* too many metrics for one line: not sent */
    fprintf(stdout, "%s}\n", line);
    fflush(stdout);
}

/* One metric. */
static inline void hf_report_kv(int64_t step, double epoch, const char *name, double value)
{
    hf_report(step, epoch, 1, &name, &value);
}

/* Register a checkpoint file or directory written at step. */
static inline void hf_report_checkpoint(int64_t step, const char *path)
{
    fprintf(stdout, "HYPERFARM {\"step\": %lld, \"checkpoint\": \"", (long long)step);
    for (const char *p = path; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', stdout);
        if ((unsigned char)*p < 0x20) fprintf(stdout, "\\u%04x", (unsigned char)*p);
        else fputc(*p, stdout);
    }
    fputs("\"}\n", stdout);
    fflush(stdout);
}

#endif
