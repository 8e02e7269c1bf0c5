/*
 * cli_args.c — the CLI's small pure parsers: object ids, the target of
 * `kill`, the words of `webhooks`, and moving global flags that precede
 * the subcommand.
 *
 * Id convention (docs/cli.md): experiments and trials are both plain
 * integers on the wire, so a command that takes one kind accepts "7", and
 * also "e7"/"exp7" for experiments and "t7"/"trial7" for trials. `kill`
 * takes either kind, so there a bare number is refused as ambiguous.
 */
#include "cli.h"
#include "hf_err.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int parse_uint(const char *s, int64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s)) return HF_EINVAL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v <= 0) return HF_EINVAL;
    *out = v;
    return HF_OK;
}

/* s without a leading kind prefix, or NULL when it has another prefix. */
static const char *strip_prefix(const char *s, char kind)
{
    static const char *const exp_pfx[] = {"experiment", "exp", "e", NULL};
    static const char *const trial_pfx[] = {"trial", "t", NULL};
    const char *const *pfx = kind == 'e' ? exp_pfx : trial_pfx;
    if (isdigit((unsigned char)*s)) return s;
    for (; *pfx; pfx++) {
        size_t n = strlen(*pfx);
        if (strncasecmp(s, *pfx, n) == 0) {
            const char *r = s + n;
            if (*r == ':' || *r == '-' || *r == '/') r++;
            if (isdigit((unsigned char)*r)) return r;
        }
    }
    return NULL;
}

int cli_parse_id(const char *s, char kind, int64_t *out)
{
    if (!s || !*s) return HF_EINVAL;
    const char *d = strip_prefix(s, kind);
    return d ? parse_uint(d, out) : HF_EINVAL;
}

int cli_parse_kill_target(int argc, char **argv, char *kind, int64_t *id, int *used,
                          char *err, size_t errlen)
{
    *used = 0;
    if (argc < 1) {
        snprintf(err, errlen, "kill needs a target: 'kill exp N' or 'kill trial N' (or e<N> / t<N>)");
        return HF_EINVAL;
    }
    const char *w = argv[0];
    if (!strcasecmp(w, "exp") || !strcasecmp(w, "experiment") || !strcasecmp(w, "trial")) {
        *kind = w[0] == 't' || w[0] == 'T' ? 't' : 'e';
        if (argc < 2 || parse_uint(argv[1], id)) {
            snprintf(err, errlen, "'kill %s' needs a positive integer id, got '%s'", w,
                     argc < 2 ? "" : argv[1]);
            return HF_EINVAL;
        }
        *used = 2;
        return HF_OK;
    }
    if (isdigit((unsigned char)w[0])) {
        snprintf(err, errlen, "'%s' is ambiguous: say 'kill exp %s' or 'kill trial %s' (or e%s / t%s)",
                 w, w, w, w, w);
        return HF_EINVAL;
    }
    if (!cli_parse_id(w, 'e', id)) *kind = 'e';
    else if (!cli_parse_id(w, 't', id)) *kind = 't';
    else {
        snprintf(err, errlen, "cannot parse kill target '%s': use 'kill exp N', 'kill trial N', e<N> or t<N>", w);
        return HF_EINVAL;
    }
    *used = 1;
    return HF_OK;
}

/* ---- webhooks (docs/cli.md "webhooks") ---- */

int cli_webhook_args(int argc, char **argv, char *verb, size_t verblen, int64_t *id, const char **url,
                     char *err, size_t errlen)
{
    static const struct { const char *verb; int nargs; const char *arg; } verbs[] = {
        {"list", 0, NULL}, {"add", 1, "URL"}, {"test", 1, "ID"}, {"delete", 1, "ID"},
    };
    const char *v = argc > 0 ? argv[0] : "list";
    *id = 0;
    *url = NULL;
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strcmp(v, verbs[i].verb) != 0) continue;
        int given = argc > 0 ? argc - 1 : 0;
        if (given != verbs[i].nargs) {
            if (verbs[i].nargs) snprintf(err, errlen, "'webhooks %s' takes one %s, got %d arguments", v, verbs[i].arg, given);
            else snprintf(err, errlen, "'webhooks %s' takes no argument, got %d", v, given);
            return HF_EINVAL;
        }
        snprintf(verb, verblen, "%s", v);
        if (verbs[i].nargs && !strcmp(verbs[i].arg, "URL")) *url = argv[1];
        else if (verbs[i].nargs && parse_uint(argv[1], id)) {
            snprintf(err, errlen, "'%s' is not a webhook id (a positive integer; see 'hyperfarm webhooks')", argv[1]);
            return HF_EINVAL;
        }
        return HF_OK;
    }
    snprintf(err, errlen, "unknown webhooks action '%s': use list, add URL, test ID or delete ID", v);
    return HF_EINVAL;
}

int cli_webhook_events(const char *list, json_t **out, char *err, size_t errlen)
{
    json_t *arr = json_array();
    const char *p = list ? list : "";
    *out = NULL;
    if (!arr) return HF_ENOMEM;
    while (*p) {
        size_t n = strcspn(p, ",");
        while (n && p[n - 1] == ' ') n--;   /* "a, b": spaces around a comma are not part of a filter */
        if (n == 0 || n > 64) {
            snprintf(err, errlen, "--events: a filter is empty or longer than 64 characters in '%s'", list);
            json_decref(arr);
            return HF_EINVAL;
        }
        json_array_append_new(arr, json_stringn(p, n));
        p += strcspn(p, ",");
        if (*p == ',') p++;
        while (*p == ' ') p++;
    }
    if (json_array_size(arr) == 0) {
        snprintf(err, errlen, "--events: give at least one filter (\"*\", \"trial.FAILED\", \"experiment.*\", ...)");
        json_decref(arr);
        return HF_EINVAL;
    }
    *out = arr;
    return HF_OK;
}

/* Global flags that take a value (the rest are booleans). */
static int global_takes_value(const char *a)
{
    static const char *const v[] = {"--url", "--token", "--ca-file", "--timeout-ms", NULL};
    for (int i = 0; v[i]; i++)
        if (!strcmp(a, v[i])) return 1;
    return 0;
}

int cli_split_command(int argc, char **argv, char **out, int *outc)
{
    int i = 1, n = 0, cmd = -1;
    while (i < argc && argv[i][0] == '-' && strcmp(argv[i], "--") != 0) {
        if (global_takes_value(argv[i]) && i + 1 < argc) i += 2;
        else i += 1;
    }
    if (i < argc && strcmp(argv[i], "--") != 0) cmd = i;
    *outc = 0;
    if (cmd < 0) return -1;
    out[n++] = argv[cmd];
    for (int j = 1; j < cmd; j++) out[n++] = argv[j];
    for (int j = cmd + 1; j < argc; j++) out[n++] = argv[j];
    *outc = n;
    return cmd;
}
