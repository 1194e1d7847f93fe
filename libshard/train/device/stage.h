/* stage.h - shards in device memory into a save's host staging.
 *
 * A save offers a device shard through a fill callback (ck_client_shard_fill,
 * ck_save_shard_fill): the core hands it the place in the staging area (ckptd's
 * memfd, or the embedded data file image) and sh_stage_fill makes that place
 * DMA-able (cudaHostRegister; where that fails the copy goes through pageable
 * memory, slower), queues the device-to-host copy on the checkpoint's side stream,
 * waits for it and releases the registration. The save therefore stalls
 * for the DMA copy only, and the staging holds the bytes before the core reads them.
 *
 * The memory operations are a seam (sh_stage_ops): CUDA's in stage_cuda.c, plain
 * host memory in the CPU tests of this logic. The core never sees CUDA.
 */
#ifndef SH_STAGE_H
#define SH_STAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct sh_stage_ops {
    /* Makes [base, base + len) (page-aligned) DMA-able; -EEXIST: it already was (and
     * stays so). unpin is called after a 0 only. */
    int (*pin)(void *arg, void *base, size_t len);
    void (*unpin)(void *arg, void *base);
    /* Queues a copy of len bytes from the device to host dst. */
    int (*copy)(void *arg, void *dst, const void *src, size_t len);
    /* Returns once every queued copy has landed. */
    int (*wait)(void *arg);
    void *arg;
} sh_stage_ops;

/* The fill argument of one shard. */
typedef struct sh_stage_src {
    const sh_stage_ops *ops;
    const void *data;          /* the shard in device memory */
} sh_stage_src;

/* A ck_fill_fn: bytes [off, off + len) of the shard into dst. */
int sh_stage_fill(void *arg, uint64_t off, void *dst, size_t len);

/* CUDA's operations on a side stream of their own (stage_cuda.c); -ENOTSUP in a build
 * without CUDA. */
int sh_stage_cuda_new(sh_stage_ops **out);
void sh_stage_cuda_free(sh_stage_ops *ops);

#endif
