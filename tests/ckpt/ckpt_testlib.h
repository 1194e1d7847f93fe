/* ckpt_testlib.h - helpers for the checkpoint tests: temp roots, the formula, checks.
 * Header-only so that each test stays one small executable. */
#ifndef CKPT_TESTLIB_H
#define CKPT_TESTLIB_H


#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck/ckpt.h"
#include "ck/load.h"
#include "ck/save.h"
#include "ck/synth.h"
#include "ck/verify.h"

static int tl_failures;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            tl_failures++;                                                      \
        }                                                                       \
    } while (0)

#define REQUIRE(cond, ...)                                                      \
    do {                                                                        \
        int ok_ = tl_failures;                                                  \
        CHECK(cond, __VA_ARGS__);                                               \
        if (tl_failures != ok_)                                                 \
            exit(1);                                                            \
    } while (0)

/* A fresh directory under $TMPDIR (or /var/tmp, a real disk where O_DIRECT works). */
static inline void tl_tmpdir(char *buf, size_t len, const char *tag)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/ck-%s-XXXXXX", base && *base ? base : "/var/tmp", tag);
    REQUIRE(mkdtemp(buf) != NULL, "mkdtemp %s", buf);
}

static inline void tl_rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char sub[PATH_MAX];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            tl_rmtree(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Element at global row-major index k of tensor `tensor`, as stored: computed per
 * element from the formula, independently of ck_synth_fill's odometer. */
static inline void tl_elem(uint64_t seed, uint32_t tensor, size_t itemsize, uint64_t k,
                           uint8_t *out)
{
    uint64_t v = ck_synth_elem(seed, tensor, k);
    for (size_t i = 0; i < itemsize; i++)
        out[i] = (uint8_t)(v >> (8 * (i % 8)));
}

/* The row-major bytes of box b of a tensor of the given shape, from the formula. */
static inline uint8_t *tl_box_bytes(uint64_t seed, uint32_t tensor, size_t itemsize, int ndim,
                                    const uint64_t *shape, const ck_box *b)
{
    uint64_t n = ck_box_numel(b);
    uint8_t *buf = malloc(n * itemsize + 1);
    REQUIRE(buf, "oom");
    for (uint64_t e = 0; e < n; e++) {
        uint64_t rem = e, k = 0, stride = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            uint64_t c = rem % b->len[d];
            rem /= b->len[d];
            k += (b->off[d] + c) * stride;
            stride *= shape[d];
        }
        tl_elem(seed, tensor, itemsize, k, buf + e * itemsize);
    }
    return buf;
}

/* A declaration of one tensor (the tests' saves of one), which fails the test if it
 * cannot be made. */
static inline ck_decl *tl_decl1(const ck_mesh *mesh, const char *name, ck_dtype dtype, int ndim,
                                const uint64_t *shape, const ck_placement *pl)
{
    ck_err err = { 0 };
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, mesh, &err) == 0 &&
            ck_decl_tensor(d, name, dtype, ndim, shape, pl, &err) == 0, "%s", ck_err_msg(&err));
    return d;
}

/* Checks that every shard of every tensor of ck holds the formula's bytes, where
 * tensor "tN" uses formula index N. Returns the number of bad shards. */
typedef struct tl_content {
    ck_ckpt *ck;
    uint64_t seed;
    int bad;
} tl_content;

/* Saves checkpoint name under root on mesh (with dim names names, or NULL): n 2-D
 * tensors "t0".."t<n-1>" of shapes[i] and dtypes[i], tensor i placed as pl[i] (a
 * placement string, one entry per mesh dim), every rank's shard filled with the
 * formula of seed, with the save options so (NULL: the defaults). Fails the test on
 * any error. */
static inline void tl_save_formula_opts(const char *root, const char *name, const char *mesh_s,
                                        const char *names, const uint64_t (*shapes)[2],
                                        const ck_dtype *dtypes, const char *const *pl,
                                        uint32_t n, uint64_t seed, const ck_save_opts *so)
{
    ck_err err = { 0 };
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse(mesh_s, names, &mesh, NULL) == 0, "mesh %s", mesh_s);
    uint64_t world = ck_mesh_world(&mesh);
    ck_synth_src *src = calloc((size_t)n * world, sizeof *src);
    REQUIRE(src, "out of memory");
    ck_save *s;
    ck_decl *d;
    char tn[16];
    ck_placement p[CK_MAX_MESH_DIMS];
    REQUIRE(ck_decl_new(&d, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    for (uint32_t t = 0; t < n; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        REQUIRE(ck_placements_parse(pl[t], mesh.ndim, 2, p, NULL) == 0, "%s", pl[t]);
        REQUIRE(ck_decl_tensor(d, tn, dtypes[t], 2, shapes[t], p, &err) == 0, "%s",
                ck_err_msg(&err));
    }
    REQUIRE(ck_save_begin(&s, root, name, 1, d, so, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    for (uint32_t t = 0; t < n; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        REQUIRE(ck_placements_parse(pl[t], mesh.ndim, 2, p, NULL) == 0, "%s", pl[t]);
        for (uint64_t r = 0; r < world; r++) {
            uint32_t c[CK_MAX_MESH_DIMS];
            ck_synth_src *x = &src[t * world + r];
            ck_mesh_coord(&mesh, r, c);
            *x = (ck_synth_src){ .seed = seed, .tensor = t, .itemsize = ck_dtype_size(dtypes[t]),
                                 .ndim = 2, .shape = { shapes[t][0], shapes[t][1] } };
            ck_shard_box(2, shapes[t], &mesh, p, c, &x->box);
            REQUIRE(ck_save_shard_fill(s, tn, r, ck_synth_fill, x, &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    }
    REQUIRE(ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));
    free(src);
}

static inline void tl_save_formula(const char *root, const char *name, const char *mesh_s,
                                   const char *names, const uint64_t (*shapes)[2],
                                   const ck_dtype *dtypes, const char *const *pl, uint32_t n,
                                   uint64_t seed)
{
    tl_save_formula_opts(root, name, mesh_s, names, shapes, dtypes, pl, n, seed, NULL);
}

static inline int tl_check_tensor(const ck_tensor *t, void *arg)
{
    tl_content *c = arg;
    uint32_t idx = (uint32_t)strtoul(t->name + 1, NULL, 10);
    size_t is = ck_dtype_size(t->dtype);
    ck_shard *sh;
    uint32_t n;
    ck_err err = { 0 };
    if (ck_shards_get(c->ck, t, &sh, &n, &err) < 0) {
        fprintf(stderr, "tensor %s: %s\n", t->name, ck_err_msg(&err));
        c->bad++;
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t bytes = ck_box_numel(&sh[i].box) * is;
        uint8_t *want = tl_box_bytes(c->seed, idx, is, t->ndim, t->shape, &sh[i].box);
        uint8_t *got = malloc(bytes + 1);
        REQUIRE(got, "oom");
        int r = ck_shard_read(c->ck, &sh[i], 0, bytes, got, &err);
        if (r < 0 || memcmp(want, got, bytes) != 0) {
            fprintf(stderr, "tensor %s shard %u: %s\n", t->name, i,
                    r < 0 ? ck_err_msg(&err) : "bytes differ from the formula");
            c->bad++;
        }
        free(want);
        free(got);
    }
    free(sh);
    return 0;
}

static inline int tl_check_content(ck_ckpt *ck, uint64_t seed)
{
    tl_content c = { .ck = ck, .seed = seed };
    ck_err err = { 0 };
    if (ck_tensors_each(ck, tl_check_tensor, &c, &err) < 0) {
        fprintf(stderr, "walking tensors: %s\n", ck_err_msg(&err));
        return 1;
    }
    return c.bad;
}

static inline void tl_print_problem(void *arg, const char *msg)
{
    fprintf(stderr, "%s: %s\n", (const char *)arg, msg);
}

/* Opens ROOT/NAME, deep-verifies it and checks its content; returns problems found. */
static inline uint64_t tl_verify_deep(const char *root, const char *name, uint64_t seed)
{
    ck_ckpt *ck;
    ck_err err = { 0 };
    if (ck_open(root, name, &ck, &err) < 0) {
        fprintf(stderr, "open %s/%s: %s\n", root, name, ck_err_msg(&err));
        return 1;
    }
    ck_verify_opts o = { .deep = true, .problem = tl_print_problem, .cb_arg = (void *)name };
    ck_verify_result res;
    uint64_t problems = 1;
    if (ck_verify(ck, &o, &res, &err) == 0)
        problems = res.problems + (res.unhashed ? 1 : 0);
    else
        fprintf(stderr, "verify %s: %s\n", name, ck_err_msg(&err));
    problems += (uint64_t)tl_check_content(ck, seed);
    ck_close(ck);
    return problems;
}

#endif
