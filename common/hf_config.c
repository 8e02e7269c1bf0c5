/*
 * hf_config.c — table-driven configuration (see hf_config.h).
 */
#include "hf_config.h"
#include "hf_err.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Strings copied from a config file, freed by hf_config_free. */
static char *owned[256];
static int n_owned;

static int set_value(hf_cfg_opt *o, const char *val, const char *where, char *err, size_t errlen)
{
    char *end;
    switch (o->type) {
    case HF_CFG_STR:
        *(const char **)o->dest = val;
        return HF_OK;
    case HF_CFG_BOOL:
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes") || !strcmp(val, "on"))
            *(int *)o->dest = 1;
        else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no") || !strcmp(val, "off"))
            *(int *)o->dest = 0;
        else {
            snprintf(err, errlen, "%s: expected true or false, got '%s'", where, val);
            return HF_EINVAL;
        }
        return HF_OK;
    case HF_CFG_INT: {
        errno = 0;
        long long x = strtoll(val, &end, 10);
        if (errno || end == val || *end) {
            snprintf(err, errlen, "%s: expected an integer, got '%s'", where, val);
            return HF_EINVAL;
        }
        if (o->min <= o->max && ((double)x < o->min || (double)x > o->max)) {
            snprintf(err, errlen, "%s: must be between %.0f and %.0f, got %lld", where, o->min, o->max, x);
            return HF_EINVAL;
        }
        *(int64_t *)o->dest = x;
        return HF_OK;
    }
    case HF_CFG_DOUBLE: {
        errno = 0;
        double x = strtod(val, &end);
        if (errno || end == val || *end || !isfinite(x)) {
            snprintf(err, errlen, "%s: expected a number, got '%s'", where, val);
            return HF_EINVAL;
        }
        if (o->min <= o->max && (x < o->min || x > o->max)) {
            snprintf(err, errlen, "%s: must be between %g and %g, got %g", where, o->min, o->max, x);
            return HF_EINVAL;
        }
        *(double *)o->dest = x;
        return HF_OK;
    }
    }
    return HF_EINVAL;
}

static hf_cfg_opt *find(hf_cfg_opt *opts, const char *name, size_t len)
{
    for (hf_cfg_opt *o = opts; o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
    return NULL;
}

static int load_file(hf_cfg_opt *opts, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char line[4096], where[512];
    int lineno = 0, rc = HF_OK;
    if (!f) {
        snprintf(err, errlen, "--config %s: %s", path, strerror(errno));
        return HF_EINVAL;
    }
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line, *eq, *k_end, *v;
        while (*p == ' ' || *p == '\t') p++;
        p[strcspn(p, "\r\n")] = '\0';
        if (*p == '#' || *p == '\0') continue;
        if (!(eq = strchr(p, '='))) {
            snprintf(err, errlen, "%s:%d: expected 'name = value'", path, lineno);
            rc = HF_EINVAL;
            break;
        }
        for (k_end = eq; k_end > p && (k_end[-1] == ' ' || k_end[-1] == '\t'); k_end--) {}
        for (v = eq + 1; *v == ' ' || *v == '\t'; v++) {}
        size_t vl = strlen(v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) v[--vl] = '\0';
        hf_cfg_opt *o = find(opts, p, (size_t)(k_end - p));
        if (!o || !strcmp(o->name, "config")) {
            snprintf(err, errlen, "%s:%d: unknown setting '%.*s'", path, lineno, (int)(k_end - p), p);
            rc = HF_EINVAL;
            break;
        }
        if (n_owned >= (int)(sizeof owned / sizeof owned[0])) { rc = HF_ETOOBIG; break; }
        char *copy = strdup(v);
        if (!copy) { rc = HF_ENOMEM; break; }
        owned[n_owned++] = copy;
        snprintf(where, sizeof where, "%s:%d: %s", path, lineno, o->name);
        if ((rc = set_value(o, copy, where, err, errlen))) break;
    }
    fclose(f);
    return rc;
}

int hf_config_parse(hf_cfg_opt *opts, int argc, char **argv, int *npos, char *err, size_t errlen)
{
    char where[256];
    int rc, np = 0;
    const char *cfgfile = NULL;

    for (hf_cfg_opt *o = opts; o->name; o++) {
        if (o->def && (rc = set_value(o, o->def, o->name, err, errlen))) return rc;
        if (o->type == HF_CFG_STR && !o->def) *(const char **)o->dest = NULL;
    }
    /* The config file is named by a flag or the environment, read before both. */
    hf_cfg_opt *cf = find(opts, "config", 6);
    if (cf) {
        if (cf->env && getenv(cf->env)) cfgfile = getenv(cf->env);
        for (int i = 1; i < argc; i++) {
            if (!strcmp(argv[i], "--")) break;
            if (!strcmp(argv[i], "--config") && i + 1 < argc) cfgfile = argv[i + 1];
            else if (!strncmp(argv[i], "--config=", 9)) cfgfile = argv[i] + 9;
        }
        if (cfgfile && (rc = load_file(opts, cfgfile, err, errlen))) return rc;
    }
    for (hf_cfg_opt *o = opts; o->name; o++) {
        const char *v = o->env ? getenv(o->env) : NULL;
        if (v && o != cf) {
            snprintf(where, sizeof where, "environment %s", o->env);
            if ((rc = set_value(o, v, where, err, errlen))) return rc;
        }
    }
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (!strcmp(a, "--")) {
            for (i++; i < argc; i++) argv[1 + np++] = argv[i];
            break;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            argv[1 + np++] = a;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        hf_cfg_opt *o = find(opts, name, nl);
        int negate = 0;
        if (!o && nl > 3 && !strncmp(name, "no-", 3)) {
            o = find(opts, name + 3, nl - 3);
            if (o && o->type != HF_CFG_BOOL) o = NULL;
            negate = 1;
        }
        if (!o) {
            snprintf(err, errlen, "unknown option '--%.*s' (see --help)", (int)nl, name);
            return HF_EINVAL;
        }
        snprintf(where, sizeof where, "--%s", o->name);
        const char *val;
        if (o->type == HF_CFG_BOOL && !eq) val = negate ? "false" : "true";
        else if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else {
            snprintf(err, errlen, "%s needs a value", where);
            return HF_EINVAL;
        }
        if ((rc = set_value(o, val, where, err, errlen))) return rc;
    }
    if (npos) *npos = np;
    return HF_OK;
}

void hf_config_usage(FILE *f, const char *synopsis, const hf_cfg_opt *opts)
{
    fprintf(f, "usage: %s\n\noptions:\n", synopsis);
    for (const hf_cfg_opt *o = opts; o->name; o++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s%s", o->name,
                 o->type == HF_CFG_BOOL ? "" : o->type == HF_CFG_STR ? " S" : " N");
        fprintf(f, "  %-24s %s", flag, o->help ? o->help : "");
        if (o->def) fprintf(f, " (default %s)", o->def);
        if (o->env) fprintf(f, " [$%s]", o->env);
        fputc('\n', f);
    }
}

void hf_config_print(FILE *f, const hf_cfg_opt *opts)
{
    json_t *o = json_object();
    for (const hf_cfg_opt *p = opts; p->name; p++) {
        json_t *v = NULL;
        switch (p->type) {
        case HF_CFG_STR: {
            const char *s = *(const char **)p->dest;
            /* never print secrets */
            v = s ? json_string(strstr(p->name, "token") && !strstr(p->name, "file") ? "***" : s) : json_null();
            break;
        }
        case HF_CFG_INT: v = json_integer(*(int64_t *)p->dest); break;
        case HF_CFG_DOUBLE: v = json_real(*(double *)p->dest); break;
        case HF_CFG_BOOL: v = json_boolean(*(int *)p->dest); break;
        }
        json_object_set_new(o, p->name, v);
    }
    json_dumpf(o, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', f);
    json_decref(o);
}

void hf_config_free(hf_cfg_opt *opts)
{
    (void)opts;
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    n_owned = 0;
}
