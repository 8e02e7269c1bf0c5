/*
 * hf_buf.h — a growable byte buffer with a hard maximum size (after curl's
 * dynbuf). Everything that grows from network or child-process input goes
 * through one of these, so no peer can make us allocate without bound.
 *
 * The content is always NUL-terminated (the NUL is not counted in len), so
 * text can be used as a C string directly.
 */
#ifndef HF_BUF_H
#define HF_BUF_H

#include <stddef.h>

typedef struct hf_buf {
    char  *data;   /* NULL until the first add */
    size_t len;    /* bytes in use, excluding the NUL */
    size_t cap;    /* bytes allocated */
    size_t max;    /* hard limit on len */
} hf_buf;

/* Initialise an empty buffer that may hold at most max bytes. */
void hf_buf_init(hf_buf *b, size_t max);
/* Append n bytes. RET 0, HF_ETOOBIG (buffer unchanged) or HF_ENOMEM. */
int  hf_buf_add(hf_buf *b, const void *p, size_t n);
int  hf_buf_addstr(hf_buf *b, const char *s);
int  hf_buf_printf(hf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (consumed input), keeping the rest. */
void hf_buf_consume(hf_buf *b, size_t n);
void hf_buf_reset(hf_buf *b);          /* len = 0, memory kept */
void hf_buf_free(hf_buf *b);           /* memory released, may be re-added to */
/* Hand the data to the caller (free() it) and reset the buffer. */
char *hf_buf_take(hf_buf *b, size_t *len);

#endif
