/* Eight client processes save one checkpoint concurrently through ckptd: it passes
 * ckpt-verify --deep, holds the formula's bytes, and every tensor equals the same
 * save made with the embedded engine (read back through ck_reader). */
#include "ck/load.h"
#include "kd_testlib.h"

static void compare(const char *ra, const char *rb, const char *na, const char *nb)
{
    ck_ckpt *a, *b;
    ck_err err = { 0 };
    REQUIRE(ck_open(ra, na, &a, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_open(rb, nb, &b, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_get_info(a)->n_tensors == ck_get_info(b)->n_tensors, "tensor counts differ");
    for (uint64_t i = 0; i < ck_get_info(a)->n_tensors; i++) {
        char tn[32];
        snprintf(tn, sizeof tn, "t%llu", (unsigned long long)i);
        ck_reader *x, *y;
        REQUIRE(ck_reader_open(a, tn, CK_AS_SAVED, &x, &err) == 0, "%s", ck_err_msg(&err));
        REQUIRE(ck_reader_open(b, tn, CK_AS_SAVED, &y, &err) == 0, "%s", ck_err_msg(&err));
        const ck_tensor *t = ck_reader_tensor(x);
        ck_box full = { .ndim = t->ndim };
        for (int d = 0; d < t->ndim; d++)
            full.len[d] = t->shape[d];
        uint64_t bytes = ck_box_numel(&full) * ck_dtype_size(t->dtype);
        uint8_t *p = malloc(bytes + 1), *q = malloc(bytes + 1);
        REQUIRE(p && q, "oom");
        CHECK(ck_reader_read(x, &full, 0, bytes, p, &err) == 0, "%s", ck_err_msg(&err));
        CHECK(ck_reader_read(y, &full, 0, bytes, q, &err) == 0, "%s", ck_err_msg(&err));
        CHECK(memcmp(p, q, bytes) == 0, "tensor %s differs between ckptd and embedded saves", tn);
        free(p);
        free(q);
        ck_reader_close(x);
        ck_reader_close(y);
    }
    ck_close(a);
    ck_close(b);
}

int main(void)
{
    char root[PATH_MAX], emb[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kd8");
    tl_tmpdir(emb, sizeof emb, "kd8-emb");
    kd_proc d;
    kd_start(&d, root, NULL);
    pid_t p = kd_synth(root, d.sock, "step-8", "2x4", "12", "48MiB", NULL);
    CHECK(kd_wait_pid(p, 60) == 0, "ckpt-synth through ckptd failed");
    CHECK(kd_verify_tool(root, "step-8") == 0, "ckpt-verify --deep failed");
    CHECK(tl_verify_deep(root, "step-8", 7) == 0, "content differs from the formula");
    p = kd_synth(emb, NULL, "step-8", "2x4", "12", "48MiB", NULL);
    CHECK(kd_wait_pid(p, 60) == 0, "ckpt-synth embedded failed");
    compare(root, emb, "step-8", "step-8");
    CHECK(kd_term(&d, 10) == 0, "ckptd did not exit 0 on SIGTERM");
    CHECK(!kd_sock_alive(d.sock), "socket still answers after exit");
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    tl_rmtree(emb);
    unlink(d.log);
    printf("ok: 8 client processes through ckptd; deep-verified; equal to the embedded save\n");
    return 0;
}
