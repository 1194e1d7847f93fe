/* test_checkpoint_from_device: a GPU rank's checkpoint, and its stall.
 *
 * Bits: parameters of odd shapes live in device memory; sh_checkpoint saves them
 * (through ckptd when $CKPTD_SOCKET is set, else embedded), the checkpoint is read
 * back on the CPU with the core's reader and compared bit for bit with the device's
 * bytes, then loaded back onto the device (sh_checkpoint_load_state_dict) and
 * compared again.
 *
 * Stall (--stall-gib 1,8, instead of the above): a parameter of that many GiB is
 * saved twice; the stall of save_async is printed beside a cudaMemcpy device-to-host
 * of the same bytes into pinned memory, measured in the same run, and their ratio
 * (the target is 1.2). No time is asserted. Skips (77) without a GPU. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck/load.h"
#include "harness.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int fwd_none(sh_module *m, const sh_tensor *in, sh_tensor *out, void *u, ck_err *err)
{
    (void)m, (void)in, (void)out, (void)u, (void)err;
    return 0;
}

/* A module whose parameters are `shapes`, fully sharded and materialized on CUDA. */
static sh_module *make(sh_world *w, sh_mesh *mesh, const char *name, int n,
                       const int64_t (*shapes)[2], sh_init_kind init)
{
    ck_err err = {0};
    sh_module *m;
    if (sh_module_new(w, NULL, name, fwd_none, NULL, NULL, &m, &err))
        th_die(w, "module", &err);
    for (int i = 0; i < n; i++) {
        char pn[16];
        snprintf(pn, sizeof pn, "p%d", i);
        sh_param *p;
        if (sh_param_new(m, pn, 2, shapes[i], (sh_init_spec){init, 0.5f}, &p, &err))
            th_die(w, "parameter", &err);
    }
    sh_fsdp_opts o;
    sh_fsdp_opts_default(&o);
    if (sh_fully_shard(m, mesh, &o, &err) || sh_module_to_empty(m, SH_CUDA, &err) ||
        sh_module_reset_parameters(m, 11, &err))
        th_die(w, "materializing on CUDA", &err);
    return m;
}

static int save(sh_world *w, sh_checkpoint *c, const char *name, const sh_state_dict *sd,
                double *stall)
{
    ck_err err = {0};
    const sh_state_dict *sds[1] = {sd};
    sh_checkpoint_done done;
    if (sh_checkpoint_save_async(c, name, 1, sds, 1, NULL, 0, stall, &err) ||
        sh_checkpoint_wait(c, &err))
        th_die(w, name, &err);
    int rc = 0;
    while (sh_checkpoint_poll(c, &done, &err) == 1)
        if (done.rc) {
            printf("FAIL save %s: %s\n", done.name, done.msg);
            rc = 1;
        }
    return rc;
}

/* The entry's bytes on the device and in the checkpoint, both into host memory. */
static void both(sh_world *w, ck_ckpt *ck, const sh_shard_entry *e, size_t bytes,
                 void *device, void *disk)
{
    ck_err err = {0};
    ck_reader *rd;
    if (sh_copy_to_host(w, device, e->data, bytes, &err) ||
        ck_reader_open(ck, e->name, CK_AS_SAVED, &rd, &err) ||
        ck_reader_read(rd, &e->box, 0, bytes, disk, &err))
        th_die(w, e->name, &err);
    ck_reader_close(rd);
}

/* Device bytes against the checkpoint's, read on the CPU. */
static int bits(sh_world *w, sh_mesh *mesh, const char *root)
{
    ck_err err = {0};
    static const int64_t shapes[3][2] = {{37, 129}, {1001, 1}, {5, 3}};
    sh_module *m = make(w, mesh, "bits", 3, shapes, SH_INIT_UNIFORM);
    sh_state_dict sd;
    sh_checkpoint *c;
    if (sh_model_state_dict(m, &sd, &err) ||
        sh_checkpoint_new(w, &(sh_checkpoint_opts){.root = root}, &c, &err))
        th_die(w, "state dict", &err);
    double stall;
    int status = save(w, c, "device-bits", &sd, &stall);
    ck_ckpt *ck = NULL;
    if (!status && ck_open(root, "device-bits", &ck, &err))
        th_die(w, "opening the checkpoint on the CPU", &err);
    size_t total = 0;
    for (size_t i = 0; !status && i < sd.n; i++) {
        const sh_shard_entry *e = &sd.entry[i];
        size_t bytes = ck_box_numel(&e->box) * sizeof(float);
        char *want = malloc(bytes + 1), *got = malloc(bytes + 1);
        both(w, ck, e, bytes, want, got);
        if (memcmp(want, got, bytes)) {
            printf("FAIL %s: the checkpoint differs from the device's bytes\n", e->name);
            status = 1;
        }
        /* Back onto the device, over zeros. */
        if (sh_zero(w, e->data, bytes, &err))
            th_die(w, "zeroing", &err);
        total += bytes;
        free(want);
        free(got);
    }
    if (!status && sh_checkpoint_load_state_dict(ck, &sd, &err))
        th_die(w, "loading onto the device", &err);
    for (size_t i = 0; !status && i < sd.n; i++) {
        const sh_shard_entry *e = &sd.entry[i];
        size_t bytes = ck_box_numel(&e->box) * sizeof(float);
        char *back = malloc(bytes + 1), *disk = malloc(bytes + 1);
        both(w, ck, e, bytes, back, disk);
        if (memcmp(back, disk, bytes)) {
            printf("FAIL %s: loaded onto the device, it differs from the checkpoint\n",
                   e->name);
            status = 1;
        }
        free(back);
        free(disk);
    }
    if (!status)
        printf("ok: %zu tensors, %zu bytes saved from device memory%s, read back on the "
               "CPU and loaded onto the device bit for bit\n", sd.n, total,
               getenv("CKPTD_SOCKET") ? " through ckptd" : " (embedded)");
    ck_close(ck);
    sh_checkpoint_free(c);
    sh_state_dict_free(&sd);
    sh_module_free(m);
    return status;
}

static int stall(sh_world *w, sh_mesh *mesh, const char *root, double gib)
{
    ck_err err = {0};
    size_t bytes = (size_t)(gib * (1u << 30));
    int64_t shapes[1][2] = {{(int64_t)(bytes / 16384), 4096}};
    sh_module *m = make(w, mesh, "big", 1, (const int64_t(*)[2])shapes, SH_INIT_ONES);
    sh_state_dict sd;
    sh_checkpoint *c;
    if (sh_model_state_dict(m, &sd, &err) ||
        sh_checkpoint_new(w, &(sh_checkpoint_opts){.root = root}, &c, &err))
        th_die(w, "state dict", &err);
    /* Staging made and registered for DMA at start-up, as shard-train does: the first
     * save's stall is then the copy too. */
    const sh_state_dict *sds[] = { &sd };
    double r0 = now_ms();
    if (sh_checkpoint_reserve(c, sds, 1, NULL, 0, &err))
        th_die(w, "reserve", &err);
    double reserve_ms = now_ms() - r0;
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "stall-%gg-1", gib);
    snprintf(n2, sizeof n2, "stall-%gg-2", gib);
    double s1 = 0, s2 = 0;
    int status = save(w, c, n1, &sd, &s1) || save(w, c, n2, &sd, &s2);
    /* The physical reference: the same bytes, device to pinned host memory. */
    void *pinned = NULL;
    double ref = -1;
    if (cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault) == cudaSuccess) {
        for (int k = 0; k < 2; k++) {   /* the second run, pages touched */
            double t0 = now_ms();
            cudaMemcpy(pinned, sd.entry[0].data, bytes, cudaMemcpyDeviceToHost);
            ref = now_ms() - t0;
        }
        cudaFreeHost(pinned);
    }
    /* Where a stall beyond the reference goes: registering the staging pages (done per
     * save), or copying into pageable memory (where registration fails). */
    double reg = -1, pageable = -1;
    char *host = malloc(bytes);
    if (host) {
        memset(host, 0, bytes);
        double t0 = now_ms();
        if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) == cudaSuccess) {
            reg = now_ms() - t0;
            cudaHostUnregister(host);
        }
        t0 = now_ms();
        cudaMemcpy(host, sd.entry[0].data, bytes, cudaMemcpyDeviceToHost);
        pageable = now_ms() - t0;
        free(host);
    }
    printf("stall %g GiB: save_async %.1f ms (first save %.1f ms, after a reserve of "
           "%.1f ms at start-up); cudaMemcpy D2H to pinned memory %.1f ms (%.1f GB/s); ratio "
           "%.2f, first %.2f (target <= 1.2); for reference: cudaHostRegister %.1f ms, "
           "cudaMemcpy D2H to pageable memory %.1f ms\n", gib, s2, s1, reserve_ms, ref,
           ref > 0 ? (double)bytes / ref / 1e6 : 0.0, ref > 0 ? s2 / ref : 0.0,
           ref > 0 ? s1 / ref : 0.0, reg, pageable);
    sh_checkpoint_free(c);
    sh_state_dict_free(&sd);
    sh_module_free(m);
    return status;
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    ck_err err = {0};
    const char *root = NULL, *sizes = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--root"))
            root = argv[i + 1];
        else if (!strcmp(argv[i], "--stall-gib"))
            sizes = argv[i + 1];
    }
    if (sh_world_set_device(w, SH_CUDA, &err)) {
        if (sh_world_rank(w) == 0)
            printf("skip: %s\n", ck_err_msg(&err));
        return th_finish(w, 77);
    }
    if (!root) {
        fprintf(stderr, "usage: test_checkpoint_from_device --root DIR [--stall-gib 1,8]\n");
        return th_finish(w, 2);
    }
    sh_mesh *mesh = th_mesh(w, argc, argv);
    /* Each part saves its own names, so the stall runs apart from the bits. */
    int status = sizes ? 0 : bits(w, mesh, root);
    for (const char *s = sizes; !status && s && *s;) {
        char *end;
        double g = strtod(s, &end);
        if (end == s)
            break;
        status = stall(w, mesh, root, g);
        s = *end == ',' ? end + 1 : end;
    }
    sh_mesh_free(mesh);
    return th_finish(w, status);
}
