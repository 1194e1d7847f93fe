/* save/part.h - a rank's part record, the proof that its data file is durable (private
 * to the core; the layout is docs/FORMAT.md, "Part records").
 *
 * Encoding and decoding only: what a record must agree with (the save's plan) is
 * checked by ck__save_adopt, which owns the plan. */
#ifndef CK_SAVE_PART_H
#define CK_SAVE_PART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/save.h"
#include "save/commit.h"

#define CK_PART_MAGIC "CKPART\0\0"

typedef struct ck__part {
    char name[CK_NAME_MAX];
    char token[CK_TOKEN_MAX];
    uint64_t rank, world;
    int32_t code;                    /* 0 or -errno */
    char msg[CK_ERR_MSG_MAX];
    uint64_t file_size;
    uint32_t block_size;
    bool hashed;
    uint64_t n_hashes;
    const uint8_t *hashes;           /* n_hashes * CK_HASH_LEN bytes; into the record */
} ck__part;

/* Bytes of p's record. */
size_t ck__part_size(const ck__part *p);
/* Writes p's record into buf (ck__part_size(p) bytes). 0 or -ENOMEM. */
int ck__part_encode(const ck__part *p, uint8_t *buf);
/* The length a record says it has (0 when buf is too short to say). */
size_t ck__part_len(const uint8_t *buf, size_t len);
/* Decodes len bytes; -EBADMSG (or -EPROTONOSUPPORT for a major version it does not
 * read) with a message naming what is wrong. out->hashes points into buf. */
int ck__part_decode(const uint8_t *buf, size_t len, ck__part *out, ck_err *err);

#endif
