/* io/staging.h - memory that a checkpoint's bytes are staged in (private to the core:
 * the client's staging slots, async/client.c).
 *
 * A save's stall is the copy of the shards into staging. A page touched for the first
 * time costs a fault and a zeroing, several times the copy itself, so staging is
 * faulted in when it is made (ck__staging_map), outside any save, and reused from save
 * to save, its pages faulted in by several threads at once. The pages, as measured
 * (decision 0046):
 *
 *   1. hugetlb pages (MFD_HUGETLB / MAP_HUGETLB), when the pool has enough: reserved,
 *      they cost neither faults nor compaction;
 *   2. else 4 KiB pages. Not transparent huge pages asked for by MADV_HUGEPAGE: the
 *      kernel compacts memory for them on the spot, and 256 MiB took 0.02 s or 0.22 s
 *      by how fragmented memory was, against a steady 0.06 s for 4 KiB pages, with the
 *      copy into either at the same speed.
 * ck__staging.pages says which, so the caller can log the fallback once.
 */
#ifndef CK_IO_STAGING_H
#define CK_IO_STAGING_H

#include <stdint.h>

#include "ck/error.h"

typedef enum ck__staging_pages {
    CK_PAGES_SMALL = 0,        /* 4 KiB pages */
    CK_PAGES_HUGETLB,          /* 2 MiB hugetlb pages */
} ck__staging_pages;

enum {
    CK_STAGING_MEMFD = 1,      /* a sealed memfd (fixed size) that another process may map */
    CK_STAGING_SMALL_PAGES = 2 /* 4 KiB pages, no huge page attempt */
};

typedef struct ck__staging {
    int fd;                    /* the memfd; -1 for anonymous memory or none */
    uint8_t *map;              /* NULL when none */
    uint64_t size;             /* a multiple of 2 MiB */
    ck__staging_pages pages;
} ck__staging;

#define CK_STAGING_NONE ((ck__staging){ .fd = -1 })

/* Maps at least size bytes (rounded up to 2 MiB), every page faulted in, into *s
 * (which must be CK_STAGING_NONE). flags: CK_STAGING_*. */
int ck__staging_map(ck__staging *s, uint64_t size, unsigned flags, ck_err *err);
/* Unmaps and closes; *s becomes CK_STAGING_NONE. */
void ck__staging_unmap(ck__staging *s);
/* "hugetlb 2 MiB pages", "4 KiB pages". */
const char *ck__staging_pages_name(ck__staging_pages p);

#endif
