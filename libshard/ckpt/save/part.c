/* part.c - encoding and decoding part records (see save/part.h). */
#include "save/part.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/enc.h"
#include "io/hash.h"

enum { LEN_AT = 12, HEAD = 16, DIGEST = CK_HASH_LEN };

static void put_fields(ck__wbuf *w, const ck__part *p)
{
    ck__put_bytes(w, CK_PART_MAGIC, 8);
    ck__put_u16(w, CK_FORMAT_MAJOR);
    ck__put_u16(w, CK_FORMAT_MINOR);
    ck__put_u32(w, 0);                       /* the length, patched in */
    ck__put_str(w, p->name);
    ck__put_str(w, p->token);
    ck__put_u64(w, p->rank);
    ck__put_u64(w, p->world);
    ck__put_u32(w, (uint32_t)p->code);
    ck__put_str(w, p->msg);
    ck__put_u64(w, p->file_size);
    ck__put_u32(w, p->block_size);
    ck__put_u8(w, p->hashed);
    ck__put_u64(w, p->n_hashes);
}

size_t ck__part_size(const ck__part *p)
{
    return HEAD + 2 + strlen(p->name) + 2 + strlen(p->token) + 16 + 4 + 2 + strlen(p->msg) +
           8 + 4 + 1 + 8 + (size_t)p->n_hashes * CK_HASH_LEN + DIGEST;
}

int ck__part_encode(const ck__part *p, uint8_t *buf)
{
    ck__wbuf w = { 0 };
    put_fields(&w, p);
    ck__put_bytes(&w, p->hashes, (size_t)p->n_hashes * CK_HASH_LEN);
    if (w.oom) {
        ck__wbuf_free(&w);
        return -ENOMEM;
    }
    uint32_t total = (uint32_t)(w.len + DIGEST);
    for (int i = 0; i < 4; i++)
        w.p[LEN_AT + i] = (uint8_t)(total >> (8 * i));
    memcpy(buf, w.p, w.len);
    int r = ck__sha256(buf, w.len, buf + w.len);
    ck__wbuf_free(&w);
    return r;
}

size_t ck__part_len(const uint8_t *buf, size_t len)
{
    if (len < HEAD)
        return 0;
    return (size_t)buf[LEN_AT] | (size_t)buf[LEN_AT + 1] << 8 | (size_t)buf[LEN_AT + 2] << 16 |
           (size_t)buf[LEN_AT + 3] << 24;
}

int ck__part_decode(const uint8_t *buf, size_t len, ck__part *p, ck_err *err)
{
    memset(p, 0, sizeof *p);
    if (len < HEAD + DIGEST || memcmp(buf, CK_PART_MAGIC, 8) != 0)
        return ck_err_set(err, -EBADMSG, "not a part record (%zu bytes, no CKPART magic)", len);
    ck__rbuf r = ck__rbuf_make(buf, len - DIGEST);
    ck__get_bytes(&r, 8);
    uint16_t major = ck__get_u16(&r), minor = ck__get_u16(&r);
    if (major != CK_FORMAT_MAJOR)
        return ck_err_set(err, -EPROTONOSUPPORT, "part record of format version %u.%u; this "
                          "build reads %u.x", major, minor, CK_FORMAT_MAJOR);
    if (ck__get_u32(&r) != len)
        return ck_err_set(err, -EBADMSG, "part record of %zu bytes says it has %zu", len,
                          ck__part_len(buf, len));
    uint8_t digest[DIGEST];
    int rc = ck__sha256(buf, len - DIGEST, digest);
    if (rc < 0)
        return ck_err_set(err, rc, "hashing a part record: %s", strerror(-rc));
    if (memcmp(digest, buf + len - DIGEST, DIGEST) != 0)
        return ck_err_set(err, -EBADMSG, "part record of %zu bytes: its digest does not match "
                          "its bytes (corrupt)", len);
    ck__get_str(&r, p->name, sizeof p->name);
    ck__get_str(&r, p->token, sizeof p->token);
    p->rank = ck__get_u64(&r);
    p->world = ck__get_u64(&r);
    p->code = (int32_t)ck__get_u32(&r);
    ck__get_str(&r, p->msg, sizeof p->msg);
    p->file_size = ck__get_u64(&r);
    p->block_size = ck__get_u32(&r);
    p->hashed = ck__get_u8(&r) != 0;
    p->n_hashes = ck__get_u64(&r);
    /* The count must match the bytes left exactly: no allocation trusts it. */
    if (r.bad || p->n_hashes != (r.len - r.pos) / CK_HASH_LEN ||
        (r.len - r.pos) % CK_HASH_LEN)
        return ck_err_set(err, -EBADMSG, "part record of %zu bytes is malformed (its fields "
                          "or its hash count)", len);
    p->hashes = ck__get_bytes(&r, (size_t)p->n_hashes * CK_HASH_LEN);
    if (p->code > 0 || p->code < -4095)
        return ck_err_set(err, -EBADMSG, "part record of rank %llu: outcome %d is not an "
                          "errno", (unsigned long long)p->rank, (int)p->code);
    return 0;
}
