/* test_stage_fill_pins_copies_unpins: the device-to-staging fill of a GPU save
 * (libshard/train/device/stage.c), with plain host memory in place of the device and a
 * recorder in place of cudaHostRegister. One fill pins the whole pages under its
 * destination, copies the shard's bytes from the right offset, waits for the copy
 * and only then unpins; pages that were already pinned stay pinned; a failed pin
 * still copies (pageable) and unpins nothing; a failed copy is still waited for and
 * unpinned. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/stage.h"

typedef struct rec {
    char log[64];            /* 'p'in, 'c'opy, 'w'ait, 'u'npin in call order */
    int n;
    void *pin_base, *unpin_base;
    size_t pin_len;
    int pin_rc, copy_rc;
} rec;

static void note(rec *r, char c)
{
    if (r->n < (int)sizeof r->log - 1)
        r->log[r->n++] = c;
}

static int r_pin(void *arg, void *base, size_t len)
{
    rec *r = arg;
    note(r, 'p');
    r->pin_base = base;
    r->pin_len = len;
    return r->pin_rc;
}

static void r_unpin(void *arg, void *base)
{
    rec *r = arg;
    note(r, 'u');
    r->unpin_base = base;
}

static int r_copy(void *arg, void *dst, const void *src, size_t len)
{
    rec *r = arg;
    note(r, 'c');
    if (r->copy_rc)
        return r->copy_rc;
    memcpy(dst, src, len);
    return 0;
}

static int r_wait(void *arg)
{
    note(arg, 'w');
    return 0;
}

static int failures;
#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("FAIL %s: ", #cond);                                                  \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

static int fill(rec *r, const void *dev, uint64_t off, void *dst, size_t len)
{
    memset(r->log, 0, sizeof r->log);
    r->n = 0;
    r->pin_base = r->unpin_base = NULL;
    sh_stage_ops ops = {r_pin, r_unpin, r_copy, r_wait, r};
    sh_stage_src src = {&ops, dev};
    return sh_stage_fill(&src, off, dst, len);
}

int main(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *staging = aligned_alloc(page, 6 * page), *dev = malloc(3 * page);
    for (size_t i = 0; i < 3 * page; i++)
        dev[i] = (uint8_t)(i * 131 + 7);
    memset(staging, 0xee, 6 * page);
    rec r = {0};

    /* Unaligned destination and length over parts of three pages. */
    uint8_t *dst = staging + page + 10;
    size_t len = 2 * page + 5;
    int rc = fill(&r, dev, 100, dst, len);
    CHECK(rc == 0, "rc %d", rc);
    CHECK(memcmp(dst, dev + 100, len) == 0, "the staging does not hold the shard's bytes");
    CHECK(dst[-1] == 0xee && dst[len] == 0xee, "bytes outside the destination changed");
    CHECK(strcmp(r.log, "pcwu") == 0, "calls %s, not pin, copy, wait, unpin", r.log);
    CHECK(r.pin_base == staging + page && r.pin_len == 3 * page,
          "pinned %p+%zu, not the pages under the destination %p+%zu", r.pin_base,
          r.pin_len, (void *)(staging + page), 3 * page);
    CHECK(r.unpin_base == r.pin_base, "unpinned %p, pinned %p", r.unpin_base, r.pin_base);

    /* Already pinned: copied, left pinned. */
    r.pin_rc = -EEXIST;
    rc = fill(&r, dev, 0, staging, page);
    CHECK(rc == 0 && strcmp(r.log, "pcw") == 0, "rc %d, calls %s", rc, r.log);
    CHECK(memcmp(staging, dev, page) == 0, "an already pinned staging was not filled");

    /* A pin that fails: copied all the same, nothing unpinned. */
    r.pin_rc = -EIO;
    memset(staging + 4 * page, 0, 16);
    rc = fill(&r, dev, 8, staging + 4 * page, 16);
    CHECK(rc == 0 && strcmp(r.log, "pcw") == 0, "rc %d, calls %s", rc, r.log);
    CHECK(memcmp(staging + 4 * page, dev + 8, 16) == 0, "an unpinned staging was not filled");

    /* A copy that fails: waited for, unpinned, its error returned. */
    r.pin_rc = 0;
    r.copy_rc = -EIO;
    rc = fill(&r, dev, 0, staging + 4 * page, 16);
    CHECK(rc == -EIO && strcmp(r.log, "pcwu") == 0, "rc %d, calls %s", rc, r.log);

    /* Nothing to copy: no call at all. */
    rc = fill(&r, dev, 0, staging, 0);
    CHECK(rc == 0 && r.n == 0, "rc %d, calls %s", rc, r.log);

    free(staging);
    free(dev);
    if (!failures)
        printf("ok: pin, copy, wait, unpin; pinned pages kept; unpinnable pages copied; "
               "copy failures reported\n");
    return failures ? 1 : 0;
}
