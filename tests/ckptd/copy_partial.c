/* copy_partial - test machinery: makes a partial copy of a committed checkpoint, as a
 * node's local tier holds its own part (docs/FORMAT.md, "Copies"):
 *
 *   copy_partial SRCROOT NAME DSTROOT SOURCE [FILE...]
 *
 * copies SRCROOT/NAME's manifest and the data files named (none: the manifest alone)
 * into DSTROOT/NAME, marked as made by daemon SOURCE, through the core's own copy
 * stream (ops/copy.h): every block checked against the manifest, committed by rename.
 * Exit 0 committed, 1 refused (the error on stderr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/copy.h"

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: copy_partial SRCROOT NAME DSTROOT SOURCE [FILE...]\n");
        return 2;
    }
    ck_err err = { 0 };
    ck__copy_out *out = NULL;
    ck__copy_in *in = NULL;
    static const char *const none[1];
    uint32_t n = (uint32_t)(argc - 5);
    int r = ck__copy_out_open(argv[1], argv[2], n ? (const char *const *)argv + 5 : none, n, &out,
                              &err);
    if (r == 0) {
        ck__copy_in_opts o = { .root = argv[3], .name = argv[2], .source = argv[4],
                               .manifest_size = out->manifest_size, .files = out->files,
                               .n_files = out->n_files };
        r = ck__copy_in_begin(&o, &in, &err);
    }
    static char buf[1 << 20];
    while (r == 0 && ck__copy_in_left(in)) {
        size_t got;
        if ((r = ck__copy_out_read(out, buf, sizeof buf, &got, &err)) == 0)
            r = ck__copy_in_write(in, buf, got, &err);
    }
    if (r == 0)
        r = ck__copy_in_commit(in, &err);
    ck__copy_in_free(in);
    ck__copy_out_close(out);
    if (r < 0) {
        fprintf(stderr, "copy_partial: %s\n", ck_err_msg(&err));
        return 1;
    }
    printf("copy_partial: %s/%s committed: the manifest and %u data files\n", argv[3], argv[2],
           n);
    return 0;
}
