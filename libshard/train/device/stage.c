/* stage.c - sh_stage_fill (stage.h): pin the staging pages, copy, wait, unpin. Pinning
 * is what makes the copy a DMA at full speed; where it fails (a runtime that cannot
 * register this memory) the copy still runs, through pageable memory. */
#include <errno.h>
#include <unistd.h>

#include "device/stage.h"

int sh_stage_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    const sh_stage_src *s = arg;
    const sh_stage_ops *o = s->ops;
    if (!len)
        return 0;
    /* Registration works on whole pages. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)dst & ~(page - 1);
    uintptr_t hi = ((uintptr_t)dst + len + page - 1) & ~(page - 1);
    int pin = o->pin(o->arg, (void *)lo, hi - lo);
    int rc = o->copy(o->arg, dst, (const char *)s->data + off, len);
    /* Even a failed copy may have queued work on the pages: wait before unpinning. */
    int wrc = o->wait(o->arg);
    if (!pin)
        o->unpin(o->arg, (void *)lo);
    return rc ? rc : wrc;
}
