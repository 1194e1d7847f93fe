/* ckpt-rm - removes committed checkpoints through the core, never by hand.
 *
 * `rm -rf ROOT/NAME` can race a save of NAME, leaves the catalog listing a checkpoint
 * that is gone, and a crash half-way leaves a directory that still looks committed.
 * Each removal here is ck_root_remove (crash-safe at every step, catalog first, a save
 * in progress refused); --keep-last is ck_root_prune, the retention rule the manager
 * and the trainer use (ck/steps.h).
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "ck/catalog.h"
#include "ck/steps.h"
#include "tool.h"

static const char *prog = "ckpt-rm";

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckpt-rm ROOT NAME...\n"
"       ckpt-rm ROOT --keep-last K [--prefix P]\n"
"\n"
"Removes the committed checkpoints NAME... of ROOT, each crash-safely: after a crash\n"
"at any point a checkpoint is either whole or out of sight, and the catalog never\n"
"lists one that is gone. A name being saved, or removed by another process, is\n"
"refused and named; the other names are still removed.\n"
"\n"
"  --keep-last K   keep the K newest checkpoints named P<digits> (by the number:\n"
"                  step-10 is newer than step-9) and remove the older ones; no\n"
"                  other name (best-model, step-100-2x8) is counted or removed\n"
"  --prefix P      the run's prefix for --keep-last (default step-)\n"
"  -h, --help      this text\n"
"\n"
"Exit status: 0 removed, 2 usage error, no such checkpoint, a name being saved, or\n"
"an I/O error.\n");
}

static void print_removed(void *arg, const char *name)
{
    printf("%s: removed %s/%s\n", prog, (const char *)arg, name);
}

int main(int argc, char **argv)
{
    enum { O_KEEP = 256, O_PREFIX };
    static const struct option lo[] = {
        { "keep-last", 1, 0, O_KEEP }, { "prefix", 1, 0, O_PREFIX }, { "help", 0, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    const char *prefix = NULL;
    long keep = -1;
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_KEEP: {
            char *end;
            keep = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || keep < 1 || keep > 1L << 30) {
                tool_error(prog, "--keep-last: '%s' is not a count of at least 1", optarg);
                return EXIT_USAGE;
            }
            break;
        }
        case O_PREFIX: prefix = optarg; break;
        case 'h': usage(stdout); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    int nargs = argc - optind;
    if (nargs < 1 || (keep < 0 && nargs < 2) || (keep >= 0 && nargs > 1)) {
        tool_error(prog, keep >= 0 ? "--keep-last takes ROOT alone, no names (see --help)"
                                   : "needs ROOT and at least one NAME (see --help)");
        return EXIT_USAGE;
    }
    if (prefix && keep < 0) {
        tool_error(prog, "--prefix goes with --keep-last (see --help)");
        return EXIT_USAGE;
    }
    const char *root = argv[optind];
    ck_err err = { 0 };
    if (keep >= 0) {
        int r = ck_root_prune(root, prefix ? prefix : "step-", (size_t)keep, NULL,
                              print_removed, (void *)root, &err);
        if (r < 0) {
            tool_error(prog, "%s", ck_err_msg(&err));
            return tool_exit_code(r);
        }
        if (r == 0)
            printf("%s: nothing to remove (%ld or fewer checkpoints named %s<step>)\n", prog,
                   keep, prefix ? prefix : "step-");
        return EXIT_OK;
    }
    int worst = 0;
    for (int i = optind + 1; i < argc; i++) {
        ck_err_clear(&err);
        int r = ck_root_remove(root, argv[i], NULL, &err);
        if (r < 0) {
            tool_error(prog, "%s", ck_err_msg(&err));
            if (!worst)
                worst = r;
        } else {
            print_removed((void *)root, argv[i]);
        }
    }
    return tool_exit_code(worst);
}
