/*
 * hf_buf.c — bounded growable buffer (see hf_buf.h).
 */
#include "hf_buf.h"
#include "hf_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

void hf_buf_init(hf_buf *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

static int buf_reserve(hf_buf *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return HF_ETOOBIG;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return HF_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    char *p = realloc(b->data, cap);
    if (!p)
        return HF_ENOMEM;
    b->data = p;
    b->cap = cap;
    return HF_OK;
}

int hf_buf_add(hf_buf *b, const void *p, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return HF_OK;
}

int hf_buf_addstr(hf_buf *b, const char *s) { return hf_buf_add(b, s, strlen(s)); }

int hf_buf_printf(hf_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return HF_EINVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return HF_OK;
}

void hf_buf_consume(hf_buf *b, size_t n)
{
    if (n >= b->len) {
        hf_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

void hf_buf_reset(hf_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void hf_buf_free(hf_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *hf_buf_take(hf_buf *b, size_t *len)
{
    char *p = b->data;
    if (len)
        *len = b->len;
    if (!p)
        p = calloc(1, 1);
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}
