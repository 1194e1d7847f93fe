/* kd_peer_grow.c - a node's data files as its save writes them, then the manifest of
 * its committed copy: the stream of a PUT begun beside the local write (decision 0204;
 * docs/PROTOCOL.md, "A transfer": a PUT's stream is its data files, then its manifest).
 *
 * The saver says, file by file, how many bytes from its start have landed
 * (kd_grow_landed); a piece is cut only from those, so what is read is what was
 * written. The writers write several of a node's files at once, so pieces are cut
 * from whichever file has the most landed and not yet cut (peer protocol 9, decision
 * 0206): the stream follows every file as it lands rather than the first at a
 * fraction of the write's pace. The files live in the save's pending directory until the local commit
 * renames it to ROOT/NAME: each is opened once it has bytes, from where it is then,
 * and its descriptor outlives the rename. Once the copy is committed, kd_grow_manifest
 * opens it, checks that its data files are the ones this stream declared (the
 * manifest is the truth; a copy that holds others, or other sizes, is never sent as
 * these), and the manifest is attached as the stream's end. The caller (kd_xsend)
 * serializes the cuts and the landed counts under its lock; the reads run outside it. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#include "format/copy.h"
#include "io/rootfs.h"
#include "ops/copy.h"

struct kd_grow {
    char root[PATH_MAX], name[CK_NAME_MAX];
    char pending[PATH_MAX];        /* the files' directory beneath root until the commit */
    int rootfd;
    ck_file *files;
    uint32_t n;
    uint64_t *landed;              /* per file: bytes from its start written */
    uint64_t *cut;                 /* per file: bytes from its start cut */
    uint64_t *base;                /* per file: where it begins in the stream */
    uint64_t data;                 /* the data files' bytes: where the manifest begins */
    int *fd;
    bool *direct;
    uint32_t begun;                /* files cut in part */
    uint32_t whole;                /* files cut whole (empty ones from the start) */
    ck__copy_out *mout;            /* once attached: the committed copy's manifest alone */
};

int kd_grow_open(const char *root, const char *dir, const char *name, const ck_file *files,
                 uint32_t n, kd_grow **out, ck_err *err)
{
    *out = NULL;
    kd_grow *g = calloc(1, sizeof *g);
    if (g) {
        g->rootfd = -1;
        g->files = malloc((n ? n : 1) * sizeof *g->files);
        g->landed = calloc(n ? n : 1, sizeof *g->landed);
        g->cut = calloc(n ? n : 1, sizeof *g->cut);
        g->base = malloc((n ? n : 1) * sizeof *g->base);
        g->fd = malloc((n ? n : 1) * sizeof *g->fd);
        g->direct = calloc(n ? n : 1, sizeof *g->direct);
    }
    if (!g || !g->files || !g->landed || !g->cut || !g->base || !g->fd || !g->direct) {
        kd_grow_free(g);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    g->n = n;
    for (uint64_t i = 0; i < n; g->data += files[i++].size) {
        g->fd[i] = -1;
        g->base[i] = g->data;
        g->whole += !files[i].size;
    }
    memcpy(g->files, files, n * sizeof *files);
    snprintf(g->root, sizeof g->root, "%s", root);
    snprintf(g->name, sizeof g->name, "%s", name);
    const char *rel = ck__rel(root, dir);
    if (!rel || snprintf(g->pending, sizeof g->pending, "%s", rel) >= (int)sizeof g->pending) {
        kd_grow_free(g);
        return ck_err_set(err, -EINVAL, "%s: not beneath the local root %s", dir, root);
    }
    if ((g->rootfd = ck__root_open(root, err)) < 0) {
        int r = g->rootfd;
        kd_grow_free(g);
        return r;
    }
    *out = g;
    return 0;
}

void kd_grow_landed(kd_grow *g, uint32_t f, uint64_t bytes)
{
    if (f < g->n && bytes <= g->files[f].size && bytes > g->landed[f])
        g->landed[f] = bytes;
}

/* File f, from its pending directory, or from the committed copy once renamed. */
static int open_file(kd_grow *g, uint32_t f, ck_err *err)
{
    char rel[PATH_MAX];
    const char *dirs[2] = { g->pending, g->name };
    int fd = -ENOENT;
    for (int i = 0; i < 2 && fd == -ENOENT; i++)
        if (snprintf(rel, sizeof rel, "%s/%s", dirs[i], g->files[f].name) < (int)sizeof rel)
            fd = ck__openat_reg(g->rootfd, rel, O_RDONLY, 0);
    if (fd < 0)
        return ck_err_set(err, fd, "%s/%s/%s (being written): %s", g->root, g->pending,
                          g->files[f].name, ck__why(fd));
    g->fd[f] = fd;
    g->direct[f] = ck__direct_on(fd);
    return 0;
}

/* The file to cut next: the one with the most landed and not yet cut (rounded down
 * to 4096 bytes short of its end, so that the receiver's O_DIRECT writes stay
 * aligned), a file not yet begun only while fewer than CK_COPY_BEGUN_MAX are; its
 * bytes ready into *avail. UINT32_MAX: none has any. */
static uint32_t pick(const kd_grow *g, uint64_t *avail)
{
    uint32_t best = UINT32_MAX;
    *avail = 0;
    for (uint32_t f = 0; f < g->n; f++) {
        uint64_t a = g->landed[f] - g->cut[f];
        if (g->landed[f] < g->files[f].size)
            a -= a % CK_COPY_OUT_ALIGN;
        if (a > *avail && (g->cut[f] || g->begun < CK_COPY_BEGUN_MAX)) {
            best = f;
            *avail = a;
        }
    }
    return best;
}

int kd_grow_cut(kd_grow *g, size_t max, ck__copy_cut *k, uint64_t *at, ck_err *err)
{
    *k = (ck__copy_cut){ .fd = -1 };
    if (g->whole == g->n) {
        if (!g->mout)
            return -EAGAIN;
        int r = ck__copy_out_cut(g->mout, max, k, err);
        *at = g->data + k->off;
        return r < 0 ? r : k->len > 0;
    }
    uint64_t avail;
    uint32_t f = pick(g, &avail);
    if (f == UINT32_MAX)
        return -EAGAIN;
    int r = g->fd[f] < 0 ? open_file(g, f, err) : 0;
    if (r < 0)
        return r;
    /* Its own descriptor, as a copy's cut has: the reads run at once. */
    if ((k->fd = fcntl(g->fd[f], F_DUPFD_CLOEXEC, 0)) < 0)
        return ck_err_set(err, -errno, "%s/%s: %s", g->root, g->files[f].name,
                          strerror(errno));
    k->item = f + 1;
    k->off = g->cut[f];
    k->len = avail < max ? (size_t)avail : max;
    k->direct = g->direct[f];
    *at = g->base[f] + k->off;
    g->begun += !g->cut[f];
    g->cut[f] += k->len;
    if (g->cut[f] == g->files[f].size) {
        g->begun--;
        g->whole++;
    }
    return 1;
}

int kd_grow_read(const kd_grow *g, ck__copy_cut *k, void *buf, ck_err *err)
{
    if (k->item == 0)
        return ck__copy_cut_read(g->mout, k, buf, err);
    const char *file = g->files[k->item - 1].name;
    int r = ck__copy_pread(k->fd, &k->direct, buf, k->len, k->off);
    ck__copy_cut_drop(k);
    return r < 0 ? ck_err_set(err, r, "%s/%s (being written): %s", g->root, file,
                              r == -EBADMSG ? "shorter than what was written" : strerror(-r))
                 : 0;
}

int kd_grow_manifest(const kd_grow *g, ck__copy_out **out, ck_err *err)
{
    *out = NULL;
    ck__copy_out *all;
    int r = ck__copy_out_open(g->root, g->name, NULL, 0, &all, err);
    if (r < 0)
        return r;
    uint32_t *idx = ck__files_by_name(all->files, all->n_files);
    if (!idx)
        r = ck_err_set(err, -ENOMEM, "out of memory");
    else if (all->n_files != g->n)
        r = ck_err_set(err, -ESTALE, "%s/%s holds %u data file(s); %u were sent as they were "
                       "written", g->root, g->name, all->n_files, g->n);
    for (uint32_t i = 0; r == 0 && i < g->n; i++) {
        int64_t id = ck__file_find(all->files, idx, all->n_files, g->files[i].name);
        if (id < 0 || all->files[id].size != g->files[i].size)
            r = ck_err_set(err, -ESTALE, "%s/%s: data file %s %s", g->root, g->name,
                           g->files[i].name, id < 0 ? "is not in it" : "has another size");
    }
    free(idx);
    ck__copy_out_close(all);
    /* The stream's end: the manifest alone. */
    static const char *const none[1];
    return r < 0 ? r : ck__copy_out_open(g->root, g->name, none, 0, out, err);
}

void kd_grow_attach(kd_grow *g, ck__copy_out *manifest)
{
    g->mout = manifest;
}

bool kd_grow_attached(const kd_grow *g, uint64_t *size, uint8_t sha256[CK_SHA256_LEN])
{
    if (g->mout) {
        *size = g->mout->manifest_size;
        memcpy(sha256, g->mout->manifest_sha256, CK_SHA256_LEN);
    }
    return g->mout != NULL;
}

uint64_t kd_grow_data_bytes(const kd_grow *g)
{
    return g->data;
}

void kd_grow_free(kd_grow *g)
{
    if (!g)
        return;
    for (uint32_t i = 0; g->fd && i < g->n; i++)
        if (g->fd[i] >= 0)
            close(g->fd[i]);
    if (g->rootfd >= 0)
        close(g->rootfd);
    ck__copy_out_close(g->mout);
    free(g->files);
    free(g->landed);
    free(g->cut);
    free(g->base);
    free(g->fd);
    free(g->direct);
    free(g);
}
