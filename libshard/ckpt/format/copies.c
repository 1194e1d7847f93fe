/* copies.c - one checkpoint read through several copies of it (ck_open_copies; see
 * ck/ckpt.h and docs/FORMAT.md, "Copies").
 *
 * After a node is lost, the data files of a checkpoint are spread over copies: this
 * node's own part, the replicas and fetched copies in its local tier, the durable
 * tier's complete copy. The handle reads the manifest of the first copy and each data
 * file beneath the first copy that holds it, so the loads above (ck/load.h) read as
 * from one directory. Mixing is safe only between copies of one checkpoint: every
 * other copy's manifest is compared with the first's where it identifies the save
 * (its name, step and commit time), where it says what the data files are (names,
 * sizes, writing ranks, and the whole checkpoint's counts) and every block hash; the
 * hashes are then checked on every read, as for any checkpoint.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/reader_int.h"

/* The first block hash record where a's and b's differ, said into what; 0 when none
 * does. Both tables are walked in key order, once: O(blocks). */
static int same_hashes(ck_ckpt *a, ck_ckpt *b, char *what, size_t len, ck_err *err)
{
    MDB_cursor *ca = NULL, *cb = NULL;
    int rc = mdb_cursor_open(a->txn, a->db_hashes, &ca);
    if (rc == MDB_SUCCESS)
        rc = mdb_cursor_open(b->txn, b->db_hashes, &cb);
    if (rc != MDB_SUCCESS) {
        if (ca)
            mdb_cursor_close(ca);
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", a->mpath, mdb_strerror(rc));
    }
    MDB_val ka, va, kb, vb;
    int ra = mdb_cursor_get(ca, &ka, &va, MDB_FIRST), rb = mdb_cursor_get(cb, &kb, &vb, MDB_FIRST);
    while (ra == MDB_SUCCESS && rb == MDB_SUCCESS) {
        if (ka.mv_size != kb.mv_size || memcmp(ka.mv_data, kb.mv_data, ka.mv_size) ||
            va.mv_size != vb.mv_size || memcmp(va.mv_data, vb.mv_data, va.mv_size))
            break;
        ra = mdb_cursor_get(ca, &ka, &va, MDB_NEXT);
        rb = mdb_cursor_get(cb, &kb, &vb, MDB_NEXT);
    }
    if (ra == MDB_SUCCESS && ka.mv_size == 12) {
        uint32_t f = ck__rd_be32(ka.mv_data);
        snprintf(what, len, "the SHA-256 of block %llu of %s",
                 (unsigned long long)ck__rd_be64((const uint8_t *)ka.mv_data + 4),
                 f < a->info.n_files ? a->files[f].name : "a data file it does not have");
    } else if (ra == MDB_SUCCESS || rb == MDB_SUCCESS) {
        snprintf(what, len, "the block hashes recorded");
    }
    mdb_cursor_close(ca);
    mdb_cursor_close(cb);
    return 0;
}

/* What differs between the checkpoints a and b are copies of, into what ("" : they are
 * copies of one checkpoint). */
static int same_checkpoint(ck_ckpt *a, ck_ckpt *b, char *what, size_t len, ck_err *err)
{
    const ck_info *x = &a->info, *y = &b->info;
    what[0] = '\0';
    if (strcmp(x->name, y->name))
        snprintf(what, len, "the name (%s, %s)", x->name, y->name);
    else if (x->step != y->step)
        snprintf(what, len, "the step (%llu, %llu)", (unsigned long long)x->step,
                 (unsigned long long)y->step);
    else if (x->time_ns != y->time_ns)
        snprintf(what, len, "the commit time (%llu, %llu ns): two saves of the name",
                 (unsigned long long)x->time_ns, (unsigned long long)y->time_ns);
    else if (x->n_files != y->n_files || x->block_size != y->block_size ||
             x->hashed != y->hashed || x->n_tensors != y->n_tensors ||
             x->n_shards != y->n_shards || x->n_blobs != y->n_blobs ||
             x->data_bytes != y->data_bytes || x->tensor_bytes != y->tensor_bytes ||
             x->mesh.ndim != y->mesh.ndim ||
             memcmp(x->mesh.size, y->mesh.size, sizeof x->mesh.size))
        snprintf(what, len, "the mesh, counts or sizes of the manifest");
    for (uint32_t f = 0; !what[0] && f < x->n_files; f++)
        if (strcmp(a->files[f].name, b->files[f].name) || a->files[f].size != b->files[f].size ||
            a->files[f].rank != b->files[f].rank)
            snprintf(what, len, "data file %u (%s of %llu bytes, %s of %llu)", f, a->files[f].name,
                     (unsigned long long)a->files[f].size, b->files[f].name,
                     (unsigned long long)b->files[f].size);
    return what[0] ? 0 : same_hashes(a, b, what, len, err);
}

/* Takes copy o (opened, checked to be ck's checkpoint) into ck as copy number i: its
 * directory's descriptor, and the files it holds that no nearer copy does. */
static int take(ck_ckpt *ck, ck_ckpt *o, uint32_t i, ck_err *err)
{
    ck__copy_dir *c = &ck->copies[i];
    c->fd = fcntl(o->dirfd, F_DUPFD_CLOEXEC, 0);
    if (c->fd < 0)
        return ck_err_set(err, -errno, "%s: %s", o->dir, strerror(errno));
    snprintf(c->dir, sizeof c->dir, "%s", o->dir);
    ck->n_copies = i + 1;
    for (uint32_t f = 0; f < ck->info.n_files; f++)
        if (ck->from[f] == CK__NOWHERE && ck_file_held(o, f))
            ck->from[f] = i;
    return 0;
}

int ck_open_copies(const char *const *dirs, size_t n, ck_ckpt **out, ck_err *err)
{
    if (n == 0 || n > CK_COPIES_MAX)
        return ck_err_set(err, -EINVAL, "%zu copies to open a checkpoint through (1 to %d)", n,
                          CK_COPIES_MAX);
    ck_ckpt *ck;
    int r = ck_open_dir(dirs[0], &ck, err);
    if (r < 0 || n == 1) {
        if (r == 0)
            *out = ck;
        return r;
    }
    uint32_t nf = ck->info.n_files;
    ck->copies = calloc(n, sizeof *ck->copies);
    ck->from = malloc((nf ? nf : 1) * sizeof *ck->from);
    if (!ck->copies || !ck->from) {
        ck_close(ck);
        return ck_err_set(err, -ENOMEM, "%s: out of memory", dirs[0]);
    }
    ck->copies[0].fd = ck->dirfd;
    snprintf(ck->copies[0].dir, sizeof ck->copies[0].dir, "%s", ck->dir);
    ck->n_copies = 1;
    for (uint32_t f = 0; f < nf; f++)
        ck->from[f] = ck_file_held(ck, f) ? 0 : CK__NOWHERE;
    for (size_t i = 1; r == 0 && i < n; i++) {
        ck_ckpt *o;
        char what[CK_ERR_MSG_MAX / 2];
        if ((r = ck_open_dir(dirs[i], &o, err)) < 0)
            break;
        r = same_checkpoint(ck, o, what, sizeof what, err);
        if (r == 0 && what[0])
            r = ck_err_set(err, -EBADMSG, "%s and %s are copies of different checkpoints, not "
                           "one to read through both: %s differs", ck->dir, o->dir, what);
        if (r == 0)
            r = take(ck, o, (uint32_t)i, err);
        ck_close(o);
    }
    if (r < 0) {
        ck_close(ck);
        return r;
    }
    ck__copies_unite(ck);
    *out = ck;
    return 0;
}
