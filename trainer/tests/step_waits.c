/* step_never_waits_for_the_device - a training step queues its work and returns: the
 * loss, the cross-entropy's sum and the gradient norm stay in device memory, so on a
 * GPU the host never drains the queue inside a step (no cudaStreamSynchronize, no
 * read of a device value). Counted through sh_world_host_waits, which every call that
 * makes the host wait for the device goes through; on CPU ranks the calls are the
 * same, so the count is the same. Two micro-batches, clipping on, FSDP over a mesh,
 * f32 and bf16; then tr_step_result waits exactly once and brings back a loss and a
 * norm. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "step.h"

static int run(sh_world *w, const char *corpus, bool bf16)
{
    ck_err err = {0};
    tr_config cfg = {.vocab = 256, .seq = 16, .layers = 2, .dim = 32, .heads = 4, .seed = 7};
    sh_mesh *mesh;
    tr_model m;
    tr_data data;
    sh_adamw *opt;
    int shape[1] = {sh_world_size(w)};
    const char *names[] = {"shard"};
    if (sh_mesh_new(w, 1, shape, names, &mesh, &err) ||
        tr_data_open(&data, corpus, cfg.seq, cfg.seed, &err) ||
        tr_model_build(w, &cfg, &m, &err) ||
        tr_model_materialize(&m, mesh, &(tr_fsdp){.bf16 = bf16}, &err) ||
        sh_adamw_new(m.root, NULL, &opt, &err)) {
        fprintf(stderr, "setup: %s\n", ck_err_msg(&err));
        return 1;
    }
    tr_step_buf b = {0};
    tr_step_cfg sc = {4 * sh_world_size(w), 2, 1e-3f, 1.0f};
    int bad = 0;
    for (int s = 0; s < 3; s++) {
        long before = sh_world_host_waits(w);
        if (tr_step(&m, opt, &data, &sc, &b, &err)) {
            fprintf(stderr, "step: %s\n", ck_err_msg(&err));
            return 1;
        }
        long during = sh_world_host_waits(w) - before;
        double loss, norm;
        before = sh_world_host_waits(w);
        if (tr_step_result(&b, &loss, &norm, &err)) {
            fprintf(stderr, "result: %s\n", ck_err_msg(&err));
            return 1;
        }
        long reading = sh_world_host_waits(w) - before;
        printf("%s step %d: %ld host waits inside the step, %ld to read loss %.6f norm %.4f\n",
               bf16 ? "bf16" : "f32", s + 1, during, reading, loss, norm);
        if (during != 0 || reading != 1 || !(loss > 0.0 && loss < 10.0) || !(norm > 0.0) ||
            !isfinite(norm)) {
            fprintf(stderr, "FAIL: want 0 waits inside the step, 1 to read, a finite loss "
                    "and a positive norm\n");
            bad++;
        }
    }
    tr_step_buf_free(&b);
    sh_adamw_free(opt);
    tr_model_free(&m);
    tr_data_close(&data);
    sh_mesh_free(mesh);
    return bad;
}

int main(int argc, char **argv)
{
    ck_err err = {0};
    sh_world *w;
    if (sh_init(&argc, &argv, &w, &err)) {
        fprintf(stderr, "skip: sh_init: %s\n", ck_err_msg(&err));
        return 77;
    }
    /* A corpus of this rank's own: a few kilobytes of text. */
    char corpus[] = "/var/tmp/step-waits.XXXXXX";
    int fd = mkstemp(corpus);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "%s: %s\n", corpus, strerror(errno));
        return 1;
    }
    for (int i = 0; i < 200; i++)
        fprintf(f, "line %d of a small corpus, the quick brown fox %d\n", i, i * 7 % 13);
    fclose(f);
    int bad = run(w, corpus, false) + run(w, corpus, true);
    unlink(corpus);
    sh_finalize(w);
    if (!bad)
        printf("ok: no host waits inside a step\n");
    return bad ? 1 : 0;
}
