/* ck/load.h - reading any part of a tensor from a checkpoint saved on any mesh.
 *
 * Loading onto another mesh is the normal case, not a special one: the caller names
 * the part of the full tensor it wants (a box, e.g. its own shard on the new mesh) and
 * a byte range of that box's row-major storage; the reader intersects it with the
 * saved shards, turns each intersection into runs that are contiguous in both the
 * saved and the wanted storage, maps them through the extents to file ranges,
 * coalesces neighbours, and reads them with io_uring straight into place (O_DIRECT
 * where the alignment allows). A dim-0 shard of a row-major tensor is one contiguous
 * byte range, so resharding FSDP checkpoints reads whole extents, never transposes.
 *
 *   ck_reader *rd;
 *   ck_reader_open(ck, "layers.0.w", CK_BF16, &rd, &err);   // or CK_AS_SAVED
 *   ck_box mine;
 *   ck_shard_box(t->ndim, t->shape, &new_mesh, new_pl, my_coord, &mine);
 *   ck_reader_read(rd, &mine, 0, ck_box_numel(&mine) * 2, dst, &err);
 *
 * What comes back is what was saved:
 *   - Every read checks the SHA-256 of every hash block it touches (docs/FORMAT.md):
 *     it reads the whole block, once (a block only partly wanted goes through a small
 *     cache of the handle, so neighbouring reads do not read it again), hashes it on a
 *     pool of threads while the next reads run, and returns only once every block it
 *     used matched the manifest. A mismatch fails the read with -EBADMSG naming the
 *     checkpoint, the data file, the tensor and the block. A checkpoint saved without
 *     hashes has nothing to check. ck_load_verify(ck, false) turns this off.
 *   - A reader may write another dtype than the tensor's: the values are converted
 *     (ck_dtype_convert, torch's Tensor.to()), through a bounded buffer, never their
 *     bits reinterpreted. A conversion that cannot be (complex into real) is refused
 *     when the reader opens, before any read; a value the target cannot hold fails the
 *     read naming the element.
 */
#ifndef CK_LOAD_H
#define CK_LOAD_H

#include "ck/ckpt.h"

typedef struct ck_reader ck_reader;

/* The dtype a load writes when the caller takes the tensor's own. */
#define CK_AS_SAVED ((ck_dtype)0)

/* Whether loads through ck check block hashes (the default: true), for readers and
 * batches opened from now on. false is for raw speed, trusting the storage. */
CK_API void ck_load_verify(ck_ckpt *ck, bool verify);

/* Loads the tensor's record and shard table once, for many reads, which write dtype
 * `as` (CK_AS_SAVED: the tensor's). -EINVAL, naming the tensor and both dtypes, when
 * its values cannot become `as` (complex into real). */
CK_API int ck_reader_open(ck_ckpt *ck, const char *tensor, ck_dtype as, ck_reader **out,
                          ck_err *err);
CK_API void ck_reader_close(ck_reader *rd);
/* The tensor as saved (its own dtype). */
CK_API const ck_tensor *ck_reader_tensor(const ck_reader *rd);

/* Reads bytes [off, off + len) of the row-major storage of box (a box inside the
 * tensor), in the reader's dtype, into dst. off and len are multiples of its element
 * size. */
CK_API int ck_reader_read(ck_reader *rd, const ck_box *box, uint64_t off, uint64_t len, void *dst,
                          ck_err *err);

/* Reads the part of the tensor that `rank` holds on `mesh` with placements pl (the
 * target layout, any mesh) into dst: ck_box_numel(its box) * the reader's itemsize
 * bytes. */
CK_API int ck_reader_read_shard(ck_reader *rd, const ck_mesh *mesh, const ck_placement *pl,
                                uint64_t rank, void *dst, ck_err *err);

/* How many file reads the last ck_reader_read issued after coalescing (tests use it
 * to check that a dim-0 reshard reads each saved extent in one piece). */
CK_API uint64_t ck_reader_last_reads(const ck_reader *rd);

/* Reads len bytes starting at byte off of a saved shard's data into dst, through its
 * extents, with io_uring (the shard as ck_shards_get gives it, not a box), as saved. */
CK_API int ck_shard_read(ck_ckpt *ck, const ck_shard *s, uint64_t off, uint64_t len, void *dst,
                         ck_err *err);

/* ---- a rank's whole load, as one batch ----
 * DCP asks a rank for hundreds of boxes at once. Read one by one, each small box waits
 * for its own round trip; ck_load_many looks each tensor's shards up once, coalesces
 * the reads of every item into one list and keeps it at queue depth through one
 * io_uring. Reads are O_DIRECT wherever the file system allows, also into memory the
 * caller did not align (tensors): those go through aligned bounce buffers and are
 * copied out, which costs a memcpy where the page cache's path costs half the read
 * speed. */
typedef struct ck_load_item {
    const char *tensor;
    ck_box box;                /* the part of the tensor, inside its shape */
    void *dst;                 /* its row-major bytes go here */
    uint64_t len;              /* ck_box_numel(&box) * dtype's size, or the item is refused */
    ck_dtype dtype;            /* what dst holds; CK_AS_SAVED (0): the tensor's dtype */
} ck_load_item;

/* Reads every item. Every item is checked (its tensor, box, size and dtype) before
 * anything is read. Errors name the item's tensor; on error, what the destinations
 * hold is unspecified. */
CK_API int ck_load_many(ck_ckpt *ck, const ck_load_item *items, size_t n, ck_err *err);

/* Which data files a load of items would read, without reading anything: need (one
 * byte per data file of ck, ck_get_info(ck)->n_files) gets 1 for each file some
 * item's bytes lie in, 0 for the others. Each item's tensor and box are checked as
 * ck_load_many checks them (dst and len are not used). A rank restoring from copies
 * on several nodes asks its node for exactly these files (ck_client_restore_fetch):
 * onto the same mesh, its node's own part; onto another, what its new boxes touch. */
CK_API int ck_load_files(ck_ckpt *ck, const ck_load_item *items, size_t n, uint8_t *need,
                         ck_err *err);

/* ---- readers for many threads ----
 * A ck_ckpt and its readers serve one thread at a time. Fills that run on the writer's
 * worker pool (copy resharding, consolidation) read through a ck_readers instead: each
 * call borrows a checkpoint handle of its own (opened on first need, kept for the
 * next call), so reads of different blocks run in parallel. Their reads are verified
 * (unless ck_load_verify turned it off on the handle given to ck_readers_open_ckpt),
 * with one cache of checked blocks for all the threads, so that neighbouring fills
 * read and hash a block they share once; they write the tensors' own dtypes. */
typedef struct ck_readers ck_readers;

CK_API int ck_readers_open(const char *dir, ck_readers **out, ck_err *err);
/* Readers of the open checkpoint ck, which must stay open while they are used: every
 * handle shares its directory and manifest, never looking them up by name again. */
CK_API int ck_readers_open_ckpt(const ck_ckpt *ck, ck_readers **out, ck_err *err);
CK_API void ck_readers_close(ck_readers *rs);
/* ck_reader_read of tensor's box, from any thread. */
CK_API int ck_readers_read(ck_readers *rs, const char *tensor, const ck_box *box, uint64_t off,
                           uint64_t len, void *dst, ck_err *err);

#endif
