/* test_ops_refuse_bad_shapes: the GPT's ops of sh/ops.h refuse shapes they cannot run
 * (negative sizes, score rows that are not whole T x T matrices, no classes, no
 * positions) with -EINVAL and a message naming the op, before any kernel touches
 * memory; an empty shape is a no-op, and a 0-byte buffer is NULL. One CPU rank. */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "sh/ops.h"

static void refused(sh_world *w, int rc, const ck_err *err, const char *op)
{
    TH_CHECK(w, rc == -EINVAL, "%s: rc %d, want -EINVAL", op, rc);
    TH_CHECK(w, strstr(ck_err_msg(err), op) != NULL, "%s: message '%s' does not name it", op,
             ck_err_msg(err));
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    float a[12] = {0}, b[4] = {0};
    int tok[2] = {0, 0};
    double loss = -1;
    ck_err err = {0};
    refused(w, sh_layernorm(w, a, b, b, a, b, b, -1, 3, &err), &err, "layernorm");
    refused(w, sh_layernorm_bwd(w, a, b, b, a, a, b, b, b, 2, -3, &err), &err,
            "layernorm backward");
    refused(w, sh_softmax_causal(w, a, 5, 2, &err), &err, "causal softmax");
    refused(w, sh_softmax_causal(w, a, 4, 0, &err), &err, "causal softmax");
    refused(w, sh_softmax_causal_bwd(w, a, a, 3, 2, 1.0f, &err), &err,
            "causal softmax backward");
    refused(w, sh_embed(w, a, tok, b, b, 2, 0, 2, &err), &err, "embedding");
    refused(w, sh_embed_bwd(w, a, a, a, tok, -2, 1, 2, 3, &err), &err, "embedding backward");
    refused(w, sh_bias_add(w, a, b, 3, -4, &err), &err, "bias");
    refused(w, sh_bias_grad(w, b, a, -3, 4, &err), &err, "bias gradient");
    refused(w, sh_cross_entropy(w, a, a, tok, 2, 0, 1.0f, &loss, &err), &err,
            "cross-entropy");
    /* Empty shapes run and change nothing. */
    TH_CHECK(w, sh_layernorm(w, a, b, b, a, b, b, 0, 3, &err) == 0, "empty layernorm: %s",
             ck_err_msg(&err));
    TH_CHECK(w, sh_cross_entropy(w, a, a, tok, 0, 3, 1.0f, &loss, &err) == 0 && loss == 0.0,
             "empty cross-entropy: loss %g, %s", loss, ck_err_msg(&err));
    void *p = (void *)1;
    TH_CHECK(w, sh_buffer_alloc(w, 0, &p, &err) == 0 && p == NULL, "a 0-byte buffer: %p", p);
    sh_buffer_free(w, p);
    p = (void *)1;
    TH_CHECK(w, sh_host_buffer_alloc(w, 0, &p, &err) == 0 && p == NULL,
             "a 0-byte host buffer: %p", p);
    TH_CHECK(w, sh_host_buffer_alloc(w, 64, &p, &err) == 0 && p, "a host buffer: %s",
             ck_err_msg(&err));
    if (p)
        memset(p, 7, 64);
    sh_host_buffer_free(w, p);
    if (!th_failures() && sh_world_rank(w) == 0)
        printf("ok: the GPT's ops refuse bad shapes, naming the op\n");
    return th_finish(w, th_failures() ? 1 : 0);
}
