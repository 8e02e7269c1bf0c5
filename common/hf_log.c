/*
 * hf_log.c — formatting and writing of log lines (see hf_log.h).
 */
#include "hf_log.h"
#include "hf_err.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int hf_log_level_cur = HF_LOG_INFO;
static const char *log_program = "hyperfarm";
static int log_format = HF_LOG_TEXT;
static int log_fd = 2;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};

void hf_log_init(const char *program) { if (program) log_program = program; }
void hf_log_set_level(int level) { hf_log_level_cur = level; }
void hf_log_set_format(int format) { log_format = format; }
void hf_log_set_fd(int fd) { log_fd = fd; }

int hf_log_parse_level(const char *s, int *level)
{
    for (int i = 0; i <= HF_LOG_OFF; i++) {
        if (s && strcasecmp(s, level_names[i]) == 0) { *level = i; return HF_OK; }
    }
    if (s && strcasecmp(s, "warning") == 0) { *level = HF_LOG_WARN; return HF_OK; }
    return HF_EINVAL;
}

void hf_log_write(int level, const char *func, const char *fmt, ...)
{
    char msg[2048], line[4096], ts[40];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n;

    if (level < 0 || level > HF_LOG_ERROR) level = HF_LOG_ERROR;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = (int)strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - (size_t)n, ".%03dZ", (int)(tv.tv_usec / 1000));

    if (log_format == HF_LOG_JSON) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "time", ts, "program", log_program,
                              "level", level_names[level], "func", func ? func : "", "msg", msg);
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        n = snprintf(line, sizeof line, "%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        n = snprintf(line, sizeof line, "%s %s %s %s: %s\n", ts, log_program, level_names[level],
                     func ? func : "-", msg);
    }
    if (n < 0) return;
    if ((size_t)n >= sizeof line) { n = sizeof line - 1; line[n - 1] = '\n'; }
    ssize_t w = write(log_fd, line, (size_t)n);
    (void)w;
}
