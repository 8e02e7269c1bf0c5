/*
 * hf_log.h — leveled logging for every hyperfarm program.
 *
 * A line is: "2026-11-21T23:40:01.123Z program LEVEL function: message",
 * or with hf_log_set_format(HF_LOG_JSON) one JSON object per line with the
 * keys time, program, level, func, msg. Lines go to stderr (or the file
 * given to hf_log_set_file). The level test happens in the macro, before
 * any argument is formatted (as Redis's serverLog does), so a disabled
 * debug line costs one comparison.
 *
 * Thread-safe: one write(2) per line.
 */
#ifndef HF_LOG_H
#define HF_LOG_H

#include <stdarg.h>

enum hf_log_level { HF_LOG_DEBUG = 0, HF_LOG_INFO, HF_LOG_WARN, HF_LOG_ERROR, HF_LOG_OFF };
enum hf_log_format { HF_LOG_TEXT = 0, HF_LOG_JSON };

extern int hf_log_level_cur;

/* Name the program shown on every line (pointer kept; use a literal). */
void hf_log_init(const char *program);
void hf_log_set_level(int level);
/* Parse "debug|info|warn|error|off"; RET 0 or HF_EINVAL. */
int  hf_log_parse_level(const char *s, int *level);
void hf_log_set_format(int format);
/* Log to fd instead of stderr (fd stays owned by the caller). */
void hf_log_set_fd(int fd);

void hf_log_write(int level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define HF_LOG_AT(lvl, ...) \
    do { if ((lvl) >= hf_log_level_cur) hf_log_write((lvl), __func__, __VA_ARGS__); } while (0)
#define hf_debug(...) HF_LOG_AT(HF_LOG_DEBUG, __VA_ARGS__)
#define hf_info(...)  HF_LOG_AT(HF_LOG_INFO, __VA_ARGS__)
#define hf_warn(...)  HF_LOG_AT(HF_LOG_WARN, __VA_ARGS__)
#define hf_error(...) HF_LOG_AT(HF_LOG_ERROR, __VA_ARGS__)

#endif
