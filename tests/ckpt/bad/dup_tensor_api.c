/* dup_tensor_api - ck_decl_tensor with a name already declared fails with -EEXIST and
 * a message naming the tensor, and leaves the declaration usable: the first one is
 * what gets committed. Exit 0 pass, 1 fail, 77 skip. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck/ckpt.h"
#include "ck/decl.h"
#include "ck/save.h"
#include "ck/verify.h"

static char root[4096];
static int failed;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                          \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            failed = 1;                                                                   \
            goto out;                                                                     \
        }                                                                                 \
    } while (0)

static void rm_rf(const char *path)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", path);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/ckpt-dup-api.XXXXXX", tmp && *tmp ? tmp : "/var/tmp");
    if (!mkdtemp(root)) {
        fprintf(stderr, "SKIP: mkdtemp %s: %s\n", root, strerror(errno));
        return 77;
    }
    const char *name = "layers.0.w";
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[CK_MAX_MESH_DIMS];
    ck_save *s = NULL;
    ck_decl *d = NULL;
    ck_ckpt *ck = NULL;
    float data[2][8];
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++)
            data[r][i] = (float)(r * 8 + i);

    CHECK(ck_mesh_parse("2", NULL, &mesh, &err) == 0, "mesh: %s", ck_err_msg(&err));
    ck_placements_default(mesh.ndim, pl);   /* S(0) */
    CHECK(ck_decl_new(&d, &mesh, &err) == 0, "declaration: %s", ck_err_msg(&err));
    uint64_t shape[2] = { 4, 4 };
    CHECK(ck_decl_tensor(d, name, CK_F32, 2, shape, pl, &err) == 0, "first declaration: %s",
          ck_err_msg(&err));

    /* The same declaration again, then one with another dtype and shape. */
    ck_err_clear(&err);
    int r = ck_decl_tensor(d, name, CK_F32, 2, shape, pl, &err);
    CHECK(r == -EEXIST, "second declaration returned %d (%s), expected -EEXIST (%d)", r,
          strerror(-r), -EEXIST);
    CHECK(strstr(ck_err_msg(&err), name), "the message '%s' does not name %s",
          ck_err_msg(&err), name);
    printf("duplicate rejected: %s\n", ck_err_msg(&err));
    ck_err_clear(&err);
    uint64_t other[1] = { 3 };
    r = ck_decl_tensor(d, name, CK_I8, 1, other, pl, &err);
    CHECK(r == -EEXIST, "a declaration with another dtype and shape returned %d (%s), "
          "expected -EEXIST", r, strerror(-r));
    CHECK(strstr(ck_err_msg(&err), name), "the message '%s' does not name %s",
          ck_err_msg(&err), name);

    /* The save goes on with the first declaration. */
    ck_err_clear(&err);
    CHECK(ck_save_begin(&s, root, "dup", 7, d, NULL, &err) == 0, "begin: %s", ck_err_msg(&err));
    for (uint64_t rank = 0; rank < 2; rank++)
        CHECK(ck_save_shard(s, name, rank, data[rank], &err) == 0, "shard of rank %llu: %s",
              (unsigned long long)rank, ck_err_msg(&err));
    ck_save_stats st;
    r = ck_save_commit(s, &st, &err);
    s = NULL;
    CHECK(r == 0, "commit after the rejected duplicate: %s", ck_err_msg(&err));
    CHECK(ck_open(root, "dup", &ck, &err) == 0, "open: %s", ck_err_msg(&err));
    CHECK(ck_get_info(ck)->n_tensors == 1, "the checkpoint holds %llu tensors, expected 1",
          (unsigned long long)ck_get_info(ck)->n_tensors);
    ck_tensor t;
    CHECK(ck_tensor_get(ck, name, &t, &err) == 0, "tensor_get: %s", ck_err_msg(&err));
    CHECK(t.dtype == CK_F32 && t.ndim == 2 && t.shape[0] == 4 && t.shape[1] == 4,
          "the committed tensor is not the first declaration (dtype %d, ndim %d)",
          (int)t.dtype, t.ndim);
    ck_verify_result res;
    CHECK(ck_verify(ck, &(ck_verify_opts){ .deep = true }, &res, &err) == 0, "verify: %s",
          ck_err_msg(&err));
    CHECK(res.problems == 0, "verify found %llu problems", (unsigned long long)res.problems);
out:
    if (s)
        ck_save_abort(s);
    ck_decl_free(d);
    ck_close(ck);
    rm_rf(root);
    if (!failed)
        printf("PASS dup_tensor_api\n");
    return failed;
}
