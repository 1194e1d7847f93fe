/* ckpt-consolidate - exports a checkpoint's full tensors as Hugging Face safetensors.
 *
 * Whatever mesh the checkpoint was saved on, each tensor is streamed whole, in
 * row-major order, through a bounded buffer: memory does not grow with the tensor.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ck/load.h"
#include "export/safetensors.h"
#include "tool.h"

static const char *prog = "ckpt-consolidate";

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckpt-consolidate ROOT NAME -o DIR [options]\n"
"\n"
"Writes the full tensors of checkpoint NAME of ROOT into DIR as safetensors: a single\n"
"model.safetensors, or, when the data exceeds --max-shard-size,\n"
"model-00001-of-0000N.safetensors files plus model.safetensors.index.json\n"
"(metadata.total_size and weight_map), as transformers' save_pretrained does.\n"
"Tensors are ordered by element size, then name; the same checkpoint always gives\n"
"byte-identical files. Files appear under their names only when complete.\n"
"\n"
"  -o, --output DIR        output directory (created if missing)\n"
"  --max-shard-size SIZE   most data bytes per file (default 5GB)\n"
"  --dtype keep|f32|bf16   convert f32 and bf16 tensors (round to nearest even,\n"
"                          NaN kept); other dtypes are written as they are\n"
"  --filter GLOB           only tensors whose name matches (fnmatch), e.g. 'layers.*'\n"
"  --mem-limit SIZE        write buffers (default 64MiB); peak memory stays about\n"
"                          this plus a few tens of MiB whatever the tensor size\n"
"  --json                  print the result as JSON\n"
"  --no-verify             skip the SHA-256 check of every block read (raw speed,\n"
"                          trusting the storage); by default a block whose bytes\n"
"                          do not match the manifest fails the export, writing nothing\n"
"  -h, --help              this text\n"
"\n"
"Exit status: 0 written, 1 the checkpoint is bad, 2 usage or I/O error.\n");
}

int main(int argc, char **argv)
{
    enum { O_MAX = 256, O_DTYPE, O_FILTER, O_MEM, O_JSON, O_NO_VERIFY };
    static const struct option lo[] = {
        { "output", 1, 0, 'o' }, { "max-shard-size", 1, 0, O_MAX }, { "dtype", 1, 0, O_DTYPE },
        { "filter", 1, 0, O_FILTER }, { "mem-limit", 1, 0, O_MEM }, { "json", 0, 0, O_JSON },
        { "no-verify", 0, 0, O_NO_VERIFY }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    ck_consolidate_opts o = { 0 };
    bool json = false, verify = true;
    ck_err err = { 0 };
    int c;
    while ((c = getopt_long(argc, argv, "ho:", lo, NULL)) != -1) {
        switch (c) {
        case 'o': o.dir = optarg; break;
        case O_FILTER: o.filter = optarg; break;
        case O_JSON: json = true; break;
        case O_NO_VERIFY: verify = false; break;
        case O_MAX:
        case O_MEM: {
            uint64_t v;
            if (ck_size_parse(optarg, &v, &err) < 0 || v == 0 ||
                (c == O_MEM && v < (1u << 20))) {
                tool_error(prog, "--%s: %s", c == O_MAX ? "max-shard-size" : "mem-limit",
                           err.code ? ck_err_msg(&err) : "too small");
                return EXIT_USAGE;
            }
            if (c == O_MAX)
                o.max_shard_size = v;
            else
                o.mem_limit = v;
            break;
        }
        case O_DTYPE:
            if (!strcmp(optarg, "keep")) {
                o.dtype = 0;
            } else if (!strcmp(optarg, "f32") || !strcmp(optarg, "float32")) {
                o.dtype = CK_F32;
            } else if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16")) {
                o.dtype = CK_BF16;
            } else {
                tool_error(prog, "--dtype: '%s' is not keep, f32 or bf16", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (argc - optind != 2 || !o.dir) {
        tool_error(prog, argc - optind > 2 ? "too many arguments"
                                           : "needs ROOT, NAME and -o DIR (see --help)");
        return EXIT_USAGE;
    }
    const char *root = argv[optind], *name = argv[optind + 1];
    ck_ckpt *ck;
    int r = ck_open(root, name, &ck, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    ck_load_verify(ck, verify);
    tool_progress line;
    tool_progress_init(&line, prog, "ckpt-consolidate: writing");
    o.log = tool_log;
    o.progress = tool_progress_update;
    o.cb_arg = &line;
    ck_consolidate_stats st;
    r = ck_consolidate(ck, &o, &st, &err);
    tool_progress_done(&line);
    ck_close(ck);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    double gbs = st.seconds > 0 ? (double)st.bytes / st.seconds / 1e9 : 0;
    if (json) {
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:b, s:f, s:f}", "dir", o.dir,
                              "tensors", (json_int_t)st.tensors, "files", (json_int_t)st.files,
                              "bytes", (json_int_t)st.bytes, "sharded", st.sharded,
                              "seconds", st.seconds, "gbps", gbs);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        char b[32];
        printf("%s: wrote %llu tensors into %llu file%s in %s (%s%s) in %.3f s, %.2f GB/s\n",
               prog, (unsigned long long)st.tensors, (unsigned long long)st.files,
               st.files == 1 ? "" : "s", o.dir, tool_bytes(st.bytes, b, sizeof b),
               st.sharded ? ", with model.safetensors.index.json" : "", st.seconds, gbs);
    }
    return EXIT_OK;
}
