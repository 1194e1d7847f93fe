/* ckpt-reshard - re-cuts a checkpoint for another mesh, as a new committed checkpoint.
 *
 * Tensors whose new shards are byte ranges of the old files (dim-0 and replicate
 * changes) are carried by reference: hard links and new extents, no data read. The
 * others (S(1), unaligned cuts, or everything with --copy) are streamed into new
 * files with bounded memory.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ck/load.h"
#include "ck/reshard.h"
#include "tool.h"

static const char *prog = "ckpt-reshard";

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckpt-reshard ROOT NAME --to-mesh SHAPE [options]\n"
"\n"
"Writes checkpoint NAME of ROOT laid out for another mesh, as a new committed\n"
"checkpoint; NAME itself is never modified. Tensors whose new shards are a few\n"
"4 KiB-aligned byte ranges of the old data files (dim-0 sharding, replicate changes)\n"
"are carried by reference: the old files are hard-linked, no tensor data is read, and\n"
"their block hashes carry over. The others are copied into one new data file per\n"
"writing rank, streamed with bounded memory, and hashed afresh.\n"
"\n"
"  --to-mesh SHAPE      target mesh, e.g. 2x8, 4, 2x2x2\n"
"  --placements P       one per target mesh dim, e.g. 'R,S(0)' (default: S(0) on the\n"
"                       last mesh dim, R on the others); 0-D tensors stay replicated\n"
"  --dims NAMES         target mesh dim names, e.g. replicate,shard\n"
"  --name NEW           name of the new checkpoint (default: NAME-SHAPE)\n"
"  --out ROOT2          write it under ROOT2 instead of ROOT (links need the same\n"
"                       file system; across file systems it copies, and says so)\n"
"  --copy               copy every tensor, even those that could be linked\n"
"  --mem-limit SIZE     buffer memory of the copy (default 64MiB)\n"
"  --json               print the result as JSON\n"
"  --progress           progress lines on stderr even when it is no terminal (a\n"
"                       log): one every 2 s and one at the end\n"
"  --no-verify          copy without checking the SHA-256 of every block read (raw\n"
"                       speed, trusting the storage); by default a block that does not\n"
"                       match fails the reshard, so no new hash ever covers bad bytes\n"
"  -h, --help           this text\n"
"\n"
"Exit status: 0 written, 1 the source checkpoint is bad, 2 usage or I/O error\n"
"(including a target layout the tensors cannot take).\n");
}

int main(int argc, char **argv)
{
    enum { O_MESH = 256, O_PL, O_DIMS, O_NAME, O_OUT, O_COPY, O_MEM, O_JSON, O_PROGRESS,
           O_NO_VERIFY };
    static const struct option lo[] = {
        { "to-mesh", 1, 0, O_MESH }, { "placements", 1, 0, O_PL }, { "dims", 1, 0, O_DIMS },
        { "name", 1, 0, O_NAME }, { "out", 1, 0, O_OUT }, { "copy", 0, 0, O_COPY },
        { "mem-limit", 1, 0, O_MEM }, { "json", 0, 0, O_JSON }, { "help", 0, 0, 'h' },
        { "progress", 0, 0, O_PROGRESS }, { "no-verify", 0, 0, O_NO_VERIFY }, { 0, 0, 0, 0 },
    };
    const char *shape = NULL, *pls = NULL, *dims = NULL, *newname = NULL, *out = NULL;
    bool copy = false, json = false, progress = false, verify = true;
    uint64_t mem = 0;
    ck_err err = { 0 };
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_MESH: shape = optarg; break;
        case O_PL: pls = optarg; break;
        case O_DIMS: dims = optarg; break;
        case O_NAME: newname = optarg; break;
        case O_OUT: out = optarg; break;
        case O_COPY: copy = true; break;
        case O_JSON: json = true; break;
        case O_PROGRESS: progress = true; break;
        case O_NO_VERIFY: verify = false; break;
        case O_MEM:
            if (ck_size_parse(optarg, &mem, &err) < 0 || mem < (1u << 20)) {
                tool_error(prog, "--mem-limit: %s", err.code ? ck_err_msg(&err)
                                                             : "at least 1MiB");
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (argc - optind != 2) {
        tool_error(prog, argc - optind < 2 ? "missing ROOT or NAME (see --help)"
                                           : "too many arguments");
        return EXIT_USAGE;
    }
    const char *root = argv[optind], *name = argv[optind + 1];
    if (!shape) {
        tool_error(prog, "--to-mesh is required (see --help)");
        return EXIT_USAGE;
    }
    ck_mesh mesh;
    ck_placement pl[CK_MAX_MESH_DIMS];
    if (ck_mesh_parse(shape, dims, &mesh, &err) < 0 ||
        (pls && ck_placements_parse(pls, mesh.ndim, -1, pl, &err) < 0)) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    char defname[CK_NAME_MAX + 64];
    if (!newname) {
        snprintf(defname, sizeof defname, "%s-%s", name, shape);
        newname = defname;
    }
    ck_ckpt *ck;
    int r = ck_open(root, name, &ck, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    ck_load_verify(ck, verify);
    tool_progress pl_line;
    tool_progress_init(&pl_line, prog, "ckpt-reshard: copying", progress);
    ck_reshard_opts o = { .root = out ? out : root, .name = newname, .mesh = &mesh,
                          .pl = pls ? pl : NULL, .mode = copy ? CK_RESHARD_COPY : CK_RESHARD_AUTO,
                          .mem_limit = mem, .log = tool_log, .progress = tool_progress_update,
                          .cb_arg = &pl_line };
    ck_reshard_stats st;
    r = ck_reshard(ck, &o, &st, &err);
    tool_progress_done(&pl_line);
    ck_close(ck);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        /* A bad source is exit 1; a target it cannot take is a usage error. */
        return tool_exit_code(r);
    }
    char mstr[64], pstr[64] = "default";
    ck_mesh_format(&mesh, mstr, sizeof mstr);
    if (pls)
        ck_placements_format(pl, mesh.ndim, pstr, sizeof pstr);
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:b}",
            "root", o.root, "name", newname, "mesh", mstr, "placements", pstr,
            "tensors_linked", (json_int_t)st.tensors_linked,
            "tensors_copied", (json_int_t)st.tensors_copied,
            "files_linked", (json_int_t)st.files_linked,
            "files_written", (json_int_t)st.files_written,
            "bytes_linked", (json_int_t)st.bytes_linked,
            "bytes_copied", (json_int_t)st.bytes_copied,
            "file_bytes", (json_int_t)st.file_bytes, "seconds", st.seconds,
            "exdev_fallback", st.exdev_fallback);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        char a[32], b[32];
        printf("%s: committed %s/%s on mesh %s (%s): %llu tensors by reference (%s), "
               "%llu copied (%s) in %.3f s\n", prog, o.root, newname, mstr, pstr,
               (unsigned long long)st.tensors_linked, tool_bytes(st.bytes_linked, a, sizeof a),
               (unsigned long long)st.tensors_copied, tool_bytes(st.bytes_copied, b, sizeof b),
               st.seconds);
    }
    return EXIT_OK;
}
