/* test_lazy_save_fenced_by_optimizer: a lazy checkpoint (sh_checkpoint_save_lazy) is
 * copied on a thread, and the optimizer's step, the next write to what it saves,
 * cannot run before that copy is done: the step is called right after save_lazy, and
 * the checkpoint still holds, bit for bit, the parameters and moments of the moment of
 * the save (which the step did change). A lazy save without the optimizer to fence it
 * is refused on every rank. A save that fails on every rank (its name is taken): the
 * fence returns the error, the optimizer still steps, and rank 0's poll reports the
 * save failed, naming a rank. Embedded engine, real ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "harness.h"
#include "mlp.h"

static const tm_dims DIMS = {.din = 64, .d = 512, .h = 2048, .dout = 8, .nblocks = 4,
                             .root_params = true, .init_bound = 0.1f};
#define CHECK(cond, ...) TH_CHECK(w, cond, __VA_ARGS__)

static size_t entry_bytes(const sh_shard_entry *e)
{
    return ck_box_numel(&e->box) * ck_dtype_size(e->dtype);
}

/* A copy of sd's entries with data in fresh buffers: copied from sd when copy. */
static void clone(const sh_state_dict *sd, sh_state_dict *out, bool copy)
{
    out->n = sd->n;
    out->owns_data = false;
    out->entry = calloc(sd->n, sizeof *out->entry);
    for (size_t i = 0; i < sd->n; i++) {
        out->entry[i] = sd->entry[i];
        size_t n = entry_bytes(&sd->entry[i]);
        out->entry[i].data = n ? malloc(n) : NULL;
        if (n && copy)
            memcpy(out->entry[i].data, sd->entry[i].data, n);
    }
}

static void unclone(sh_state_dict *sd)
{
    for (size_t i = 0; i < sd->n; i++)
        free(sd->entry[i].data);
    free(sd->entry);
}

/* Entries of a and b whose bytes differ. */
static int differing(const sh_state_dict *a, const sh_state_dict *b)
{
    int n = 0;
    for (size_t i = 0; i < a->n; i++)
        n += entry_bytes(&a->entry[i]) &&
             memcmp(a->entry[i].data, b->entry[i].data, entry_bytes(&a->entry[i])) != 0;
    return n;
}

static void fwd_bwd(sh_world *w, tm_model *m, long s, float *x, float *t)
{
    enum { B = 4 };
    ck_err err = {0};
    double loss;
    int rank = sh_world_rank(w), N = sh_world_size(w);
    tm_data(&DIMS, s, B * N, x, t);
    if (tm_fwd_bwd(m, x + (size_t)rank * B * DIMS.din, t + (size_t)rank * B * DIMS.dout, B, 1,
                   &loss, &err))
        th_die(w, "forward and backward", &err);
}

static void opt_step(sh_world *w, tm_model *m, sh_adamw *opt)
{
    ck_err err = {0};
    if (sh_adamw_step(opt, &err) || sh_zero_grad(m->root, &err))
        th_die(w, "optimizer step", &err);
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    sh_mesh *mesh = th_mesh(w, argc, argv);
    int rank = sh_world_rank(w), N = sh_world_size(w);
    ck_err err = {0};
    tm_model m;
    sh_adamw *opt;
    sh_state_dict msd, osd;
    if (tm_build_sharded(w, &DIMS, mesh, 5, &m, &err) || sh_adamw_new(m.root, NULL, &opt, &err) ||
        sh_model_state_dict(m.root, &msd, &err) || sh_optim_state_dict(opt, &osd, &err))
        th_die(w, "setup", &err);
    float *x = malloc(sizeof(float) * 4 * (size_t)N * DIMS.din);
    float *t = malloc(sizeof(float) * 4 * (size_t)N * DIMS.dout);

    /* A private root, named by rank 0. */
    char root[256] = "";
    if (rank == 0) {
        snprintf(root, sizeof root, "%s/lazy-fence.XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp");
        if (!mkdtemp(root))
            root[0] = '\0';
    }
    if (sh_broadcast(sh_world_comm(w), root, sizeof root / 8, CK_I64, 0, NULL, &err) || !root[0])
        th_die(w, "root", &err);

    sh_checkpoint *ck, *unguarded;
    if (sh_checkpoint_new(w, &(sh_checkpoint_opts){.root = root, .optim = opt}, &ck, &err) ||
        sh_checkpoint_new(w, &(sh_checkpoint_opts){.root = root}, &unguarded, &err))
        th_die(w, "checkpoints", &err);
    const sh_state_dict *sd[] = {&msd, &osd};
    if (sh_checkpoint_reserve(ck, sd, 2, NULL, 0, &err))
        th_die(w, "reserve", &err);
    fwd_bwd(w, &m, 0, x, t);     /* moments that are not zero */
    opt_step(w, &m, opt);

    /* The optimizer step right after save_lazy (the gradients ready before it): it must
     * wait for the copy. */
    fwd_bwd(w, &m, 1, x, t);
    sh_state_dict snap_m, snap_o;
    clone(&msd, &snap_m, true);
    clone(&osd, &snap_o, true);
    double stall;
    CHECK(sh_checkpoint_save_lazy(ck, "lazy-1", 1, sd, 2, NULL, 0, &stall, &err) == 0,
          "save_lazy: %s", ck_err_msg(&err));
    opt_step(w, &m, opt);
    CHECK(differing(&msd, &snap_m) > 0 && differing(&osd, &snap_o) > 0, "the step after the "
          "save changed nothing: the test would prove nothing");
    if (sh_checkpoint_wait(ck, &err))
        th_die(w, "wait", &err);
    sh_checkpoint_done d;
    if (rank == 0)
        CHECK(sh_checkpoint_poll(ck, &d, &err) == 1 && d.rc == 0, "lazy-1 did not commit: %s",
              d.msg);
    /* Rank 0 commits: the others read once it says so. */
    if (sh_barrier(sh_world_comm(w), NULL, &err))
        th_die(w, "barrier", &err);
    ck_ckpt *c;
    sh_state_dict got_m, got_o;
    clone(&msd, &got_m, false);
    clone(&osd, &got_o, false);
    if (ck_open(root, "lazy-1", &c, &err) || sh_checkpoint_load_state_dict(c, &got_m, &err) ||
        sh_checkpoint_load_state_dict(c, &got_o, &err))
        th_die(w, "loading lazy-1", &err);
    ck_close(c);
    CHECK(differing(&got_m, &snap_m) == 0 && differing(&got_o, &snap_o) == 0,
          "lazy-1 differs from the state at the save in %d parameter and %d moment shards: "
          "the optimizer wrote them before the copy was done",
          differing(&got_m, &snap_m), differing(&got_o, &snap_o));

    /* Lazy without an optimizer to fence it: refused on every rank. */
    int rc = sh_checkpoint_save_lazy(unguarded, "lazy-2", 2, sd, 2, NULL, 0, &stall, &err);
    CHECK(rc == -EINVAL && strstr(ck_err_msg(&err), "optim"), "a lazy save without the "
          "optimizer gave %d (%s)", rc, ck_err_msg(&err));

    /* A save that fails on every rank: the name is taken. */
    err = (ck_err){0};
    CHECK(sh_checkpoint_save_lazy(ck, "lazy-1", 3, sd, 2, NULL, 0, &stall, &err) == 0,
          "save_lazy of a save that will fail failed at once: %s", ck_err_msg(&err));
    for (int k = 0; k < 2; k++) {
        ck_err f = {0};
        rc = sh_checkpoint_fence(ck, &f);
        CHECK(rc == -EEXIST && strstr(ck_err_msg(&f), "lazy-1"), "fence %d after a failed "
              "save gave %d (%s), not -EEXIST naming it", k + 1, rc, ck_err_msg(&f));
    }
    fwd_bwd(w, &m, 2, x, t);
    opt_step(w, &m, opt);        /* the optimizer steps all the same */
    if (sh_checkpoint_progress(ck, &err))
        th_die(w, "progress", &err);
    if (rank == 0) {
        d = (sh_checkpoint_done){0};
        CHECK(sh_checkpoint_poll(ck, &d, &err) == 1 && d.rc == -EEXIST &&
                  strstr(d.msg, "rank "), "rank 0 learnt of the failed save: %d '%s'", d.rc,
              d.msg);
    }

    sh_checkpoint_free(unguarded);
    sh_checkpoint_free(ck);
    unclone(&snap_m);
    unclone(&snap_o);
    unclone(&got_m);
    unclone(&got_o);
    free(x);
    free(t);
    sh_state_dict_free(&msd);
    sh_state_dict_free(&osd);
    sh_adamw_free(opt);
    tm_free(&m);
    sh_mesh_free(mesh);
    if (rank == 0 && !th_failures()) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0)
            printf("could not remove %s\n", root);
    }
    if (rank == 0 && !th_failures())
        printf("ok: the optimizer step waits for the lazy copy; the checkpoint holds the "
               "state of the save; unguarded lazy saves refused; a failed save's fence "
               "returns its error\n");
    return th_finish(w, th_failures() ? 1 : 0);
}
