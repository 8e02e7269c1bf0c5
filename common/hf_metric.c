/*
 * hf_metric.c — the HYPERFARM metric-line parser (see hf_metric.h).
 */
#include "hf_metric.h"
#include "hf_err.h"

#include <math.h>
#include <string.h>

int hf_metric_is_line(const char *line, size_t len)
{
    return len >= HF_METRIC_PREFIX_LEN && memcmp(line, HF_METRIC_PREFIX, HF_METRIC_PREFIX_LEN) == 0;
}

int hf_metric_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > HF_METRIC_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '_' || c == '.' || c == ':' || c == '/' || c == '-'))
            return 0;
    }
    return 1;
}

int hf_metric_parse(const char *line, size_t len, hf_metric_report *out, hf_jerr *e)
{
    json_t *o = NULL;
    const char *k;
    json_t *v;
    int rc = HF_OK;

    hf_jerr_clear(e);
    memset(out, 0, offsetof(hf_metric_report, m));
    out->checkpoint[0] = '\0';
    if (!hf_metric_is_line(line, len)) return HF_ENOTFOUND;
    if (len > HF_METRIC_MAX_LINE) {
        hf_jerr_set(e, "", NULL, "metric line longer than %d bytes", HF_METRIC_MAX_LINE);
        return HF_ETOOBIG;
    }
    while (len > HF_METRIC_PREFIX_LEN && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    if (hf_json_parse(line + HF_METRIC_PREFIX_LEN, len - HF_METRIC_PREFIX_LEN, 4, 1, &o, e))
        return HF_EPARSE;

    json_object_foreach(o, k, v) {
        if (strcmp(k, "checkpoint") == 0) {
            if (!json_is_string(v) || json_string_length(v) == 0
                || json_string_length(v) > HF_METRIC_PATH_MAX
                || strlen(json_string_value(v)) != json_string_length(v)) {
                rc = hf_jerr_set(e, "", k, "must be a non-empty path of at most %d bytes", HF_METRIC_PATH_MAX);
                goto end;
            }
            memcpy(out->checkpoint, json_string_value(v), json_string_length(v) + 1);
            continue;
        }
        if (!json_is_number(v)) continue;   /* annotations are allowed and ignored */
        double x = json_number_value(v);
        if (!hf_metric_name_ok(k)) {
            rc = hf_jerr_set(e, "", k, "metric name must be 1-%d characters of [A-Za-z0-9_.:/-]", HF_METRIC_NAME_MAX);
            goto end;
        }
        if (strcmp(k, "step") == 0) {
            if (!json_is_integer(v) && floor(x) != x) { rc = hf_jerr_set(e, "", k, "must be an integer"); goto end; }
            if (x < 0 || x > 9e15) { rc = hf_jerr_set(e, "", k, "must be between 0 and 9e15"); goto end; }
            out->has_step = 1;
            out->step = (int64_t)x;
            continue;
        }
        if (strcmp(k, "epoch") == 0) {
            if (x < 0) { rc = hf_jerr_set(e, "", k, "must be >= 0"); goto end; }
            out->has_epoch = 1;
            out->epoch = x;
        }
        if (out->n >= HF_METRIC_MAX_NAMES) {
            rc = hf_jerr_set(e, "", k, "more than %d metrics in one line", HF_METRIC_MAX_NAMES);
            goto end;
        }
        memcpy(out->m[out->n].name, k, strlen(k) + 1);
        out->m[out->n].value = x;
        out->n++;
    }
    if (out->n == 0 && !out->has_step && out->checkpoint[0] == '\0')
        rc = hf_jerr_set(e, "", NULL, "metric line has no numeric member");
end:
    json_decref(o);
    return rc ? HF_EPARSE : HF_OK;
}
