/* data.c - see data.h. */
#include "data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Draws the offset and order of epoch st.epoch from st.rng_epoch. */
static void draw_epoch(tr_data *d)
{
    uint64_t s = d->st.rng_epoch;
    d->offset = splitmix64(&s) % (uint64_t)d->T;
    for (uint64_t i = 0; i < d->nwin; i++)
        d->perm[i] = (uint32_t)i;
    for (uint64_t i = d->nwin - 1; i > 0; i--) {    /* Fisher-Yates */
        uint64_t j = splitmix64(&s) % (i + 1);
        uint32_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->rng_next = s;
}

int tr_data_open(tr_data *d, const char *path, int T, uint64_t seed, ck_err *err)
{
    *d = (tr_data){0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return ck_err_set(err, -errno, "data file %s: %s", path, strerror(errno));
    int rc = 0;
    if (fseek(f, 0, SEEK_END) || ftell(f) < 0)
        rc = ck_err_set(err, -EIO, "data file %s: cannot find its size", path);
    long n = rc ? 0 : ftell(f);
    if (!rc && n < 2L * T + 1)
        rc = ck_err_set(err, -EINVAL, "data file %s: %ld bytes, fewer than 2 x seq + 1 = %d",
                        path, n, 2 * T + 1);
    if (!rc && !(d->text = malloc((size_t)n)))
        rc = ck_err_set(err, -ENOMEM, "data file %s: out of memory", path);
    if (!rc && (fseek(f, 0, SEEK_SET) || fread(d->text, 1, (size_t)n, f) != (size_t)n))
        rc = ck_err_set(err, -EIO, "data file %s: short read", path);
    fclose(f);
    d->len = (size_t)n;
    d->T = T;
    /* Every offset in [0, T) leaves this many whole windows of T + 1 bytes. */
    d->nwin = (d->len - 1 - (size_t)T) / (size_t)T;
    if (!rc && !(d->perm = malloc(sizeof(uint32_t) * d->nwin)))
        rc = ck_err_set(err, -ENOMEM, "data: out of memory");
    if (rc) {
        tr_data_close(d);
        return rc;
    }
    tr_data_restore(d, &(tr_data_state){0, 0, seed});
    return 0;
}

void tr_data_close(tr_data *d)
{
    free(d->text);
    free(d->perm);
    *d = (tr_data){0};
}

void tr_data_restore(tr_data *d, const tr_data_state *st)
{
    d->st = *st;
    draw_epoch(d);
}

void tr_data_sample(tr_data *d, uint64_t k, int *tok, int *tgt)
{
    while (k / d->nwin > d->st.epoch) {
        d->st.epoch++;
        d->st.rng_epoch = d->rng_next;
        draw_epoch(d);
    }
    const uint8_t *w = d->text + d->offset + (uint64_t)d->perm[k % d->nwin] * (uint64_t)d->T;
    for (int t = 0; t < d->T; t++) {
        tok[t] = w[t];
        tgt[t] = w[t + 1];
    }
}

double tr_data_unigram_entropy(const tr_data *d)
{
    uint64_t count[256] = {0};
    for (size_t i = 0; i < d->len; i++)
        count[d->text[i]]++;
    double h = 0.0;
    for (int b = 0; b < 256; b++)
        if (count[b]) {
            double p = (double)count[b] / (double)d->len;
            h -= p * log(p);
        }
    return h;
}
