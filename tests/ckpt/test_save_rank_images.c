/* The daemon's way of saving: each rank lays out its data file image in memory from
 * the shared plan (each shard at its file offset, zeros between), the images are
 * written rank by rank on separate threads (in place, no copy), the rest at commit;
 * the result equals the formula and deep-verifies. Misuse gets errors. */
#include <pthread.h>

#include "model/plan.h"
#include "ck/save.h"
#include "save/save_int.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 7;
#define WORLD 6

typedef struct job {
    ck_save *s;
    uint64_t rank;
    int rc;
    ck_err err;
} job;

static void *write_rank(void *arg)
{
    job *j = arg;
    j->rc = ck__save_write_rank(j->s, j->rank, &j->err);
    return NULL;
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "images");
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[2];
    ck_mesh_parse("2x3", NULL, &mesh, NULL);
    ck_placements_parse("R,S(0)", 2, 2, pl, NULL);
    static const uint64_t shapes[3][2] = { { 3001, 77 }, { 2, 9 }, { 640, 256 } };
    ck_save *s;
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    for (int t = 0; t < 3; t++) {
        char tn[8];
        snprintf(tn, sizeof tn, "t%d", t);
        REQUIRE(ck_decl_tensor(d, tn, CK_F32, 2, shapes[t], pl, &err) == 0, "%s", ck_err_msg(&err));
    }
    REQUIRE(ck_save_begin(&s, root, "img", 3, d, &(ck_save_opts){ .block_size = 65536 },
                          &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    CHECK(ck__save_write_rank(s, 0, &err) == -EINVAL, "write before prepare accepted");
    REQUIRE(ck__save_prepare(s, &err) == 0, "%s", ck_err_msg(&err));

    /* Each rank builds its image from the plan alone, as a client would. */
    const ck__plan *p = ck__save_plan(s);
    uint8_t *img[WORLD] = { 0 };
    for (uint64_t r = 0; r < WORLD; r++) {
        uint64_t size = ck__save_rank_bytes(s, r);
        CHECK(size % CK_ALIGN == 0, "rank %llu image size unaligned", (unsigned long long)r);
        if (!size)
            continue;
        REQUIRE(posix_memalign((void **)&img[r], 4096, size) == 0, "oom");
        memset(img[r], 0, size);
        for (uint32_t i = 0; i < ck__plan_nshards(p); i++) {
            const ck__plan_shard *ps = ck__plan_shard_at(p, i);
            if (ps->writer != r || !ps->bytes)
                continue;
            uint8_t *b = tl_box_bytes(seed, ps->tensor, 4, 2, shapes[ps->tensor], &ps->box);
            memcpy(img[r] + ps->file_off, b, ps->bytes);
            free(b);
        }
        REQUIRE(ck__save_rank_image(s, r, img[r], &err) == 0, "%s", ck_err_msg(&err));
    }
    /* Ranks 0..3 on threads now; 4 and 5 are left to the commit. */
    pthread_t th[4];
    job jobs[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (job){ .s = s, .rank = (uint64_t)k };
        pthread_create(&th[k], NULL, write_rank, &jobs[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECK(jobs[k].rc == 0, "rank %d: %s", k, ck_err_msg(&jobs[k].err));
    }
    CHECK(ck__save_write_rank(s, 1, &err) == -EALREADY || ck__save_rank_bytes(s, 1) == 0,
          "second write of rank 1 accepted");
    CHECK(ck__save_write_rank(s, WORLD, &err) == -EINVAL, "rank outside the mesh accepted");
    ck_save_stats st;
    REQUIRE(ck_save_commit(s, &st, &err) == 0, "%s", ck_err_msg(&err));
    for (int r = 0; r < WORLD; r++)
        free(img[r]);
    CHECK(tl_verify_deep(root, "img", seed) == 0, "img has problems");
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %d rank images written in place (%.1f MiB), commit verified\n", WORLD,
           (double)st.file_bytes / (1 << 20));
    return 0;
}
