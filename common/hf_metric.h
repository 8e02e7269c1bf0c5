/*
 * hf_metric.h — parser for the trial report line (docs/design.md §4):
 *
 *     HYPERFARM {"step": 1200, "epoch": 2, "train_loss": 0.41}
 *
 * A literal "HYPERFARM " prefix, then one JSON object. Numeric members are
 * metrics; "step" and "epoch" place them on the x axis; a string member
 * "checkpoint" registers a checkpoint path. Other members (strings, bools,
 * nested values) are ignored, so trials may add their own annotations.
 * Lines, names and the number of metrics per line are bounded; trials are
 * untrusted input.
 */
#ifndef HF_METRIC_H
#define HF_METRIC_H

#include "hf_json.h"

#include <stddef.h>
#include <stdint.h>

#define HF_METRIC_PREFIX      "HYPERFARM "
#define HF_METRIC_PREFIX_LEN  10
#define HF_METRIC_MAX_LINE    16384   /* bytes, prefix included */
#define HF_METRIC_MAX_NAMES   64      /* metrics per line */
#define HF_METRIC_NAME_MAX    64      /* bytes per metric name */
#define HF_METRIC_PATH_MAX    1024    /* bytes of a checkpoint path */

typedef struct hf_metric_kv {
    char   name[HF_METRIC_NAME_MAX + 1];
    double value;
} hf_metric_kv;

typedef struct hf_metric_report {
    int          has_step;
    int64_t      step;
    int          has_epoch;
    double       epoch;
    size_t       n;                          /* metrics in m[] (step/epoch excluded) */
    hf_metric_kv m[HF_METRIC_MAX_NAMES];
    char         checkpoint[HF_METRIC_PATH_MAX + 1];  /* "" when absent */
} hf_metric_report;

/* Does line (len bytes, no newline needed) start with the prefix? */
int hf_metric_is_line(const char *line, size_t len);

/* Parse one line. RET 0; HF_ENOTFOUND if the prefix is absent (an ordinary
 * log line); HF_ETOOBIG for an over-long line; HF_EPARSE with e filled for
 * anything malformed (bad JSON, not an object, bad name, no metric at all). */
int hf_metric_parse(const char *line, size_t len, hf_metric_report *out, hf_jerr *e);

/* Is name acceptable as a metric name? ([A-Za-z0-9_.:/-], 1..64 bytes) */
int hf_metric_name_ok(const char *name);

#endif
