/* enc.c - little-endian record encoding (see enc.h). */
#include "format/enc.h"

#include <errno.h>
#include <stdlib.h>

void ck__wbuf_free(ck__wbuf *w)
{
    free(w->p);
    *w = (ck__wbuf){ 0 };
}

void ck__put_bytes(ck__wbuf *w, const void *p, size_t n)
{
    if (w->oom)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 64;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *q = realloc(w->p, cap);
        if (!q) {
            w->oom = true;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    if (n)
        memcpy(w->p + w->len, p, n);
    w->len += n;
}

void ck__put_u8(ck__wbuf *w, uint8_t v)
{
    ck__put_bytes(w, &v, 1);
}

void ck__put_u16(ck__wbuf *w, uint16_t v)
{
    uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    ck__put_bytes(w, b, 2);
}

void ck__put_u32(ck__wbuf *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    ck__put_bytes(w, b, 4);
}

void ck__put_u64(ck__wbuf *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    ck__put_bytes(w, b, 8);
}

void ck__put_str(ck__wbuf *w, const char *s)
{
    size_t n = strlen(s);
    if (n > UINT16_MAX) {
        w->oom = true;   /* callers bound names far below this */
        return;
    }
    ck__put_u16(w, (uint16_t)n);
    ck__put_bytes(w, s, n);
}

const void *ck__get_bytes(ck__rbuf *r, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = true;
        return NULL;
    }
    const void *p = r->p + r->pos;
    r->pos += n;
    return p;
}

static uint64_t get_le(ck__rbuf *r, int n)
{
    const uint8_t *b = ck__get_bytes(r, (size_t)n);
    if (!b)
        return 0;
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

uint8_t ck__get_u8(ck__rbuf *r)
{
    return (uint8_t)get_le(r, 1);
}

uint16_t ck__get_u16(ck__rbuf *r)
{
    return (uint16_t)get_le(r, 2);
}

uint32_t ck__get_u32(ck__rbuf *r)
{
    return (uint32_t)get_le(r, 4);
}

uint64_t ck__get_u64(ck__rbuf *r)
{
    return get_le(r, 8);
}

void ck__get_str(ck__rbuf *r, char *out, size_t cap)
{
    size_t n = ck__get_u16(r);
    const char *s = ck__get_bytes(r, n);
    if (!s || n >= cap || memchr(s, '\0', n)) {
        r->bad = true;
        if (cap)
            out[0] = '\0';
        return;
    }
    memcpy(out, s, n);
    out[n] = '\0';
}

