/* format/enc.h - little-endian record encoding with bounds checks (private to the core).
 *
 * Manifest and catalog values are byte strings built with ck__wbuf and parsed with
 * ck__rbuf. A reader never trusts a length: every get checks that the bytes are
 * there, and a failed get poisons the buffer so one check at the end suffices.
 */
#ifndef CK_FORMAT_ENC_H
#define CK_FORMAT_ENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ck__wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} ck__wbuf;

void ck__wbuf_free(ck__wbuf *w);
void ck__put_bytes(ck__wbuf *w, const void *p, size_t n);
void ck__put_u8(ck__wbuf *w, uint8_t v);
void ck__put_u16(ck__wbuf *w, uint16_t v);
void ck__put_u32(ck__wbuf *w, uint32_t v);
void ck__put_u64(ck__wbuf *w, uint64_t v);
/* u16 length, then the bytes, no NUL */
void ck__put_str(ck__wbuf *w, const char *s);

typedef struct ck__rbuf {
    const uint8_t *p;
    size_t len, pos;
    bool bad;
} ck__rbuf;

static inline ck__rbuf ck__rbuf_make(const void *p, size_t len)
{
    return (ck__rbuf){ .p = p, .len = len, .pos = 0, .bad = false };
}

uint8_t ck__get_u8(ck__rbuf *r);
uint16_t ck__get_u16(ck__rbuf *r);
uint32_t ck__get_u32(ck__rbuf *r);
uint64_t ck__get_u64(ck__rbuf *r);
const void *ck__get_bytes(ck__rbuf *r, size_t n);
/* Copies a u16-length string into out (NUL-terminated); bad if it does not fit or
 * holds a NUL. */
void ck__get_str(ck__rbuf *r, char *out, size_t cap);
/* true when every get succeeded and the value was consumed exactly */
static inline bool ck__rbuf_done(const ck__rbuf *r)
{
    return !r->bad && r->pos == r->len;
}

/* Big-endian keys sort numerically in LMDB's default memcmp order. */
static inline void ck__be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static inline uint32_t ck__rd_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void ck__be64(uint8_t *p, uint64_t v)
{
    ck__be32(p, (uint32_t)(v >> 32));
    ck__be32(p + 4, (uint32_t)v);
}
static inline uint64_t ck__rd_be64(const uint8_t *p)
{
    return (uint64_t)ck__rd_be32(p) << 32 | ck__rd_be32(p + 4);
}

#endif
