/* outside_testlib.h - what lies outside a checkpoint root must stay as it was (issue 21,
 * docs/FORMAT.md "Links and special files"): a tree of files made beside the root, a
 * fingerprint of every byte and mode in it taken before and after, links planted in the
 * root that point into it, and a small save to plant them around. Header-only, as
 * ckpt_testlib.h. */
#ifndef OUTSIDE_TESTLIB_H
#define OUTSIDE_TESTLIB_H

#include <fcntl.h>

#include "ck/save.h"
#include "save/save_int.h"
#include "ckpt_testlib.h"

static inline void ol_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

/* Makes dir: two files, and a subdirectory with one (a home directory's .bashrc and a
 * thesis, as the report of issue 21 found them deleted). */
static inline void ol_outside(const char *dir)
{
    char p[PATH_MAX];
    REQUIRE(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    snprintf(p, sizeof p, "%s/.bashrc", dir);
    ol_write(p, "export PATH=$HOME/bin:$PATH\n");
    snprintf(p, sizeof p, "%s/manifest.mdb", dir);
    ol_write(p, "not a manifest, and nobody's to overwrite\n");
    snprintf(p, sizeof p, "%s/docs", dir);
    REQUIRE(mkdir(p, 0755) == 0, "mkdir %s", p);
    snprintf(p, sizeof p, "%s/docs/thesis.tex", dir);
    ol_write(p, "\\documentclass{book}\n");
}

static inline uint64_t ol_fnv(const char *path)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char buf[4096];
    ssize_t n;
    while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 0x100000001b3ull;
    if (fd >= 0)
        close(fd);
    return h;
}

static inline int ol_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends to out (capacity cap) one line per entry under dir, recursively, in name
 * order: its path, type, mode, size, modification time and, for a file, a hash of
 * its bytes. */
static inline void ol_fingerprint(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    REQUIRE(d, "opendir %s", dir);
    char *names[256];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, ol_cmp);
    for (size_t i = 0; i < n; i++) {
        char p[PATH_MAX];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        REQUIRE(lstat(p, &st) == 0, "lstat %s", p);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s %o %lld %lld.%09ld %016llx\n", p, (unsigned)st.st_mode,
                 (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                 S_ISREG(st.st_mode) ? (unsigned long long)ol_fnv(p) : 0ull);
        if (S_ISDIR(st.st_mode))
            ol_fingerprint(p, out, cap);
        free(names[i]);
    }
}

/* A fingerprint of dir, malloc'd. */
static inline char *ol_snapshot(const char *dir)
{
    char *s = calloc(1, 1 << 16);
    REQUIRE(s, "out of memory");
    ol_fingerprint(dir, s, 1 << 16);
    return s;
}

/* That dir is as it was when before was taken. */
static inline void ol_same(const char *dir, const char *before, const char *what)
{
    char *after = ol_snapshot(dir);
    CHECK(!strcmp(before, after), "%s changed %s, outside the root:\nbefore:\n%safter:\n%s",
          what, dir, before, after);
    free(after);
}

static inline void ol_link(const char *target, const char *path)
{
    REQUIRE(symlink(target, path) == 0, "symlink %s -> %s", path, target);
}

/* Starts a small save of ROOT/NAME (one rank, one 2-D f32 tensor of the formula,
 * seed 5) and prepares it: its pending directory exists. src lives as long as *s. */
static inline int ol_begin(const char *root, const char *name, ck_save **s, ck_synth_src *src,
                           ck_err *err)
{
    static const uint64_t shape[2] = { 64, 48 };
    ck_mesh mesh;
    ck_placement pl[1];
    ck_mesh_parse("1", NULL, &mesh, NULL);
    ck_placements_parse("R", 1, 2, pl, NULL);
    ck_save_opts so = { .hash_threads = 1, .block_size = 4096 };
    ck_decl *d = tl_decl1(&mesh, "t0", CK_F32, 2, shape, pl);
    int r = ck_save_begin(s, root, name, 7, d, &so, err);
    ck_decl_free(d);
    if (r < 0)
        return r;
    *src = (ck_synth_src){ .seed = 5, .tensor = 0, .itemsize = 4, .ndim = 2,
                           .shape = { shape[0], shape[1] } };
    uint32_t coord[1] = { 0 };
    ck_shard_box(2, shape, &mesh, pl, coord, &src->box);
    if ((r = ck_save_shard_fill(*s, "t0", 0, ck_synth_fill, src, err)) == 0)
        r = ck__save_prepare(*s, err);
    if (r < 0)
        ck_save_abort(*s);
    return r;
}

/* The whole save: 0, or the error (with err's message). */
static inline int ol_save(const char *root, const char *name, ck_err *err)
{
    ck_save *s;
    ck_synth_src src;
    int r = ol_begin(root, name, &s, &src, err);
    return r < 0 ? r : ck_save_commit(s, NULL, err);
}

#endif
