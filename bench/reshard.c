/* reshard - ck_reshard on a synthetic checkpoint: by reference (8 -> 4, links) and by
 * copy (8 -> 3, streamed), each beside a raw read+write of the same bytes in the same
 * run, with its peak RSS. Targets (issue 4): by reference < 1 s; copy >= 0.8x raw;
 * peak RSS <= 300 MiB. */
#include <stdio.h>
#include <string.h>

#include "ck/reshard.h"
#include "rsbench.h"
#include "tool.h"

typedef struct job {
    const char *mesh, *name;
    ck_reshard_mode mode;
} job;

static int reshard(rsb *b, void *arg)
{
    const job *j = arg;
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_ckpt *ck;
    ck_mesh_parse(j->mesh, NULL, &mesh, NULL);
    if (ck_open(b->dir, "src", &ck, &err) < 0)
        return tool_error(b->prog, "%s", ck_err_msg(&err)), -1;
    ck_reshard_opts o = { .root = b->dir, .name = j->name, .mesh = &mesh, .mode = j->mode };
    ck_reshard_stats st;
    int r = ck_reshard(ck, &o, &st, &err);
    if (r < 0)
        tool_error(b->prog, "%s", ck_err_msg(&err));
    else if (j->mode == CK_RESHARD_AUTO && st.tensors_copied)
        tool_error(b->prog, "expected every tensor by reference, %llu copied",
                   (unsigned long long)st.tensors_copied);
    ck_close(ck);
    return r;
}

int main(int argc, char **argv)
{
    rsb b = { .prog = "reshard" };
    int rc = rsb_init(&b, argc, argv, "Reshards a synthetic checkpoint by reference and by copy, "
                      "beside a raw read+write\nof the same bytes (O_DIRECT, io_uring, 1 MiB x 32 in flight).");
    if (rc >= 0)
        return rc;
    rsb_fig raw, ref, copy;
    job jref = { "4", "ref4", CK_RESHARD_AUTO }, jcopy = { "3", "copy3", CK_RESHARD_COPY };
    char path[PATH_MAX + 16];
    rc = EXIT_USAGE;
    if (rsb_make_source(&b) < 0 || rsb_raw_copy(&b, &raw) < 0 ||
        rsb_child(&b, reshard, &jref, &ref) < 0 || rsb_child(&b, reshard, &jcopy, &copy) < 0)
        goto out;
    char sz[32];
    printf("%s: source: %s on mesh 8 S(0), one tensor of %s\n", b.prog,
           tool_bytes(b.size, sz, sizeof sz), tool_bytes(b.size / 8 * 3, path, sizeof path));
    rsb_print(&b, "raw read+write (reference)", b.size, &raw);
    rsb_print(&b, "reshard 8 -> 4 by reference", b.size, &ref);
    rsb_print(&b, "reshard 8 -> 3 --copy", b.size, &copy);
    double ratio = raw.secs / copy.secs;
    printf("%s: copy / raw = %.2fx (target >= 0.80); by reference %.3f s (target < 1 s); "
           "peak RSS %llu MiB (target <= 300)\n", b.prog, ratio, ref.secs,
           (unsigned long long)((copy.peak_rss > ref.peak_rss ? copy.peak_rss : ref.peak_rss) >> 20));
    bool ok = ratio >= 0.8 && ref.secs < 1.0 && copy.peak_rss <= (300ull << 20) &&
              ref.peak_rss <= (300ull << 20);
    printf("%s: %s\n", b.prog, ok ? "all targets met" : "TARGET MISSED");
    rc = ok ? 0 : 1;
out:
    rsb_done(&b);
    return rc;
}
