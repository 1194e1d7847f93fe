/* data.h - byte-level tokens from a text file, in a deterministic shuffled order.
 *
 * The tokenizer is the identity on bytes (vocabulary 256). An epoch cuts the corpus
 * into windows of T + 1 bytes that start every T bytes from an offset in [0, T), and
 * visits them in a shuffled order; offset and order come from a splitmix64 generator
 * whose state at the start of each epoch is kept, so a checkpoint that stores it and
 * the position (samples consumed by all ranks together) continues the exact sequence.
 *
 * Sample k (a global index) is the same whatever the number of ranks: ranks read
 * disjoint slices of each step's samples.
 */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ck/error.h"

typedef struct tr_data_state {
    uint64_t pos;          /* samples consumed, all ranks together */
    uint64_t epoch;        /* the epoch that rng_epoch starts */
    uint64_t rng_epoch;    /* generator state at the start of that epoch */
} tr_data_state;

typedef struct tr_data {
    uint8_t *text;
    size_t len;
    int T;
    uint64_t nwin;         /* windows per epoch */
    tr_data_state st;
    uint64_t offset;       /* this epoch's window offset */
    uint32_t *perm;        /* this epoch's window order */
    uint64_t rng_next;     /* generator state at the start of the next epoch */
} tr_data;

/* Reads the corpus (at least 2 T + 1 bytes). The shuffle starts from seed. */
int tr_data_open(tr_data *d, const char *path, int T, uint64_t seed, ck_err *err);
void tr_data_close(tr_data *d);
/* Continues from a saved state (the position may lie in a later epoch). */
void tr_data_restore(tr_data *d, const tr_data_state *st);
/* Sample k >= the epoch start's: T input tokens and the T next-byte targets. */
void tr_data_sample(tr_data *d, uint64_t k, int *tok, int *tgt);
/* The entropy of the corpus's byte frequencies, in nats: the loss of the best model
 * that ignores context. */
double tr_data_unigram_entropy(const tr_data *d);

#endif
