/* format/enc.h - little-endian record encoding with bounds checks (private to the core).
 *
 * Manifest and catalog values are byte strings built with ck_wbuf and parsed with
 * ck_rbuf. A reader never trusts a length: every get checks that the bytes are
 * there, and a failed get poisons the buffer so one check at the end suffices.
 */
#ifndef CK_FORMAT_ENC_H
#define CK_FORMAT_ENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ck_wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} ck_wbuf;

void ck_wbuf_free(ck_wbuf *w);
void ck_put_bytes(ck_wbuf *w, const void *p, size_t n);
void ck_put_u8(ck_wbuf *w, uint8_t v);
void ck_put_u16(ck_wbuf *w, uint16_t v);
void ck_put_u32(ck_wbuf *w, uint32_t v);
void ck_put_u64(ck_wbuf *w, uint64_t v);
/* u16 length, then the bytes, no NUL */
void ck_put_str(ck_wbuf *w, const char *s);

typedef struct ck_rbuf {
    const uint8_t *p;
    size_t len, pos;
    bool bad;
} ck_rbuf;

static inline ck_rbuf ck_rbuf_make(const void *p, size_t len)
{
    return (ck_rbuf){ .p = p, .len = len, .pos = 0, .bad = false };
}

uint8_t ck_get_u8(ck_rbuf *r);
uint16_t ck_get_u16(ck_rbuf *r);
uint32_t ck_get_u32(ck_rbuf *r);
uint64_t ck_get_u64(ck_rbuf *r);
const void *ck_get_bytes(ck_rbuf *r, size_t n);
/* Copies a u16-length string into out (NUL-terminated); bad if it does not fit or
 * holds a NUL. */
void ck_get_str(ck_rbuf *r, char *out, size_t cap);
/* true when every get succeeded and the value was consumed exactly */
static inline bool ck_rbuf_done(const ck_rbuf *r)
{
    return !r->bad && r->pos == r->len;
}

/* Big-endian keys sort numerically in LMDB's default memcmp order. */
static inline void ck_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static inline uint32_t ck_rd_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void ck_be64(uint8_t *p, uint64_t v)
{
    ck_be32(p, (uint32_t)(v >> 32));
    ck_be32(p + 4, (uint32_t)v);
}
static inline uint64_t ck_rd_be64(const uint8_t *p)
{
    return (uint64_t)ck_rd_be32(p) << 32 | ck_rd_be32(p + 4);
}

#endif
