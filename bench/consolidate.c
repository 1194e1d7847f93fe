/* consolidate - ck_consolidate of a synthetic checkpoint into safetensors, beside a
 * raw read+write of the same bytes in the same run, with its peak RSS. Targets
 * (issue 4): >= 0.8x raw; peak RSS <= 300 MiB. */
#include <stdio.h>

#include "export/safetensors.h"
#include "rsbench.h"
#include "tool.h"

static int consolidate(rsb *b, void *arg)
{
    (void)arg;
    ck_err err = { 0 };
    ck_ckpt *ck;
    char out[PATH_MAX + 8];
    snprintf(out, sizeof out, "%s/st", b->dir);
    if (ck_open(b->dir, "src", &ck, &err) < 0)
        return tool_error(b->prog, "%s", ck_err_msg(&err)), -1;
    ck_consolidate_opts o = { .dir = out };
    int r = ck_consolidate(ck, &o, NULL, &err);
    if (r < 0)
        tool_error(b->prog, "%s", ck_err_msg(&err));
    ck_close(ck);
    return r;
}

int main(int argc, char **argv)
{
    rsb b = { .prog = "consolidate" };
    int rc = rsb_init(&b, argc, argv, "Consolidates a synthetic checkpoint into safetensors, "
                      "beside a raw read+write\nof the same bytes (O_DIRECT, io_uring, 1 MiB x 32 in flight).");
    if (rc >= 0)
        return rc;
    rsb_fig raw, cons;
    rc = EXIT_USAGE;
    if (rsb_make_source(&b) < 0 || rsb_raw_copy(&b, &raw) < 0 ||
        rsb_child(&b, consolidate, NULL, &cons) < 0)
        goto out;
    char sz[32], big[32];
    printf("%s: source: %s on mesh 8 S(0), one tensor of %s\n", b.prog,
           tool_bytes(b.size, sz, sizeof sz), tool_bytes(b.size / 8 * 3, big, sizeof big));
    rsb_print(&b, "raw read+write (reference)", b.size, &raw);
    rsb_print(&b, "consolidate to model.safetensors", b.size, &cons);
    double ratio = raw.secs / cons.secs;
    printf("%s: consolidate / raw = %.2fx (target >= 0.80); peak RSS %llu MiB (target <= 300)\n",
           b.prog, ratio, (unsigned long long)(cons.peak_rss >> 20));
    bool ok = ratio >= 0.8 && cons.peak_rss <= (300ull << 20);
    printf("%s: %s\n", b.prog, ok ? "all targets met" : "TARGET MISSED");
    rc = ok ? 0 : 1;
out:
    rsb_done(&b);
    return rc;
}
