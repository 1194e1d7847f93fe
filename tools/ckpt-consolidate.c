/* ckpt-consolidate - exports a checkpoint's full tensors as Hugging Face safetensors.
 *
 * Whatever mesh the checkpoint was saved on, each tensor is streamed whole, in
 * row-major order, through a bounded buffer: memory does not grow with the tensor.
 * With --model-only it exports the model alone, under its own keys, for
 * from_pretrained.
 */
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
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
"Tensors are ordered by element size, then key; the same checkpoint always gives\n"
"byte-identical files. Files appear under their names only when complete; an\n"
"interrupted run (SIGINT, SIGTERM) removes its temporary files.\n"
"\n"
"  -o, --output DIR        output directory (created if missing)\n"
"  --model-only            only the model's tensors, under the model's own keys: those\n"
"                          under its prefix in the state dict ('app.model.' or\n"
"                          'model.', whichever the checkpoint has), prefix cut off\n"
"  --prefix P              the model's prefix, given (implies --model-only; '' takes\n"
"                          every tensor, keys as they are)\n"
"  --key-map FILE          rename keys by a JSON object of rules \"FROM\": \"TO\" (or\n"
"                          null: leave the tensor out); one '*' in FROM matches any\n"
"                          text, which a '*' in TO repeats; exact keys win, then the\n"
"                          first matching pattern; keys no rule matches stay\n"
"  --max-shard-size SIZE   most data bytes per file (default 5GB)\n"
"  --dtype keep|DTYPE      convert every float tensor to DTYPE (bf16, f32, f16, f64,\n"
"                          f8e4m3, f8e5m2 or torch's names), as torch's .to() does;\n"
"                          integer and bool tensors are written as they are\n"
"  --filter GLOB           only tensors whose name matches (fnmatch), e.g. 'layers.*'\n"
"  --mem-limit SIZE        write buffers (default 64MiB); peak memory stays about\n"
"                          this plus a few tens of MiB whatever the tensor size\n"
"  --json                  print the result as JSON\n"
"  --progress              progress lines on stderr even when it is no terminal (a\n"
"                          log): one every 2 s and one at the end\n"
"  --no-verify             skip the SHA-256 check of every block read (raw speed,\n"
"                          trusting the storage); by default a block whose bytes\n"
"                          do not match the manifest fails the export, writing nothing\n"
"  -h, --help              this text\n"
"\n"
"Exit status: 0 written, 1 the checkpoint is bad, 2 usage or I/O error; interrupted,\n"
"it dies of the signal (the shell's 130 or 143).\n");
}

/* The signal that interrupts the export, 0 until one does. Process-wide because a
 * signal handler has nothing else to reach; the export polls it (o.cancel). */
static atomic_int interrupted;

static void on_signal(int sig)
{
    atomic_store(&interrupted, sig);
}

/* SIGINT and SIGTERM stop the export, which removes its temporary files; the tool then
 * dies of the same signal, so that a shell or a batch system sees the interruption. A
 * signal ignored from the start stays ignored (a script's background job ignores
 * SIGINT, so that Ctrl-C stops only what runs in the foreground). */
static void catch_signals(void)
{
    static const int sigs[] = { SIGINT, SIGTERM };
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old, sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
}

static int die_of_signal(void)
{
    int sig = atomic_load(&interrupted);
    tool_error(prog, "interrupted by %s: its temporary files are removed",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
    signal(sig, SIG_DFL);
    raise(sig);
    return 128 + sig;    /* not reached */
}

int main(int argc, char **argv)
{
    enum { O_MAX = 256, O_DTYPE, O_FILTER, O_MEM, O_JSON, O_MODEL, O_PREFIX, O_KEYMAP,
           O_PROGRESS, O_NO_VERIFY };
    static const struct option lo[] = {
        { "output", 1, 0, 'o' }, { "max-shard-size", 1, 0, O_MAX }, { "dtype", 1, 0, O_DTYPE },
        { "filter", 1, 0, O_FILTER }, { "mem-limit", 1, 0, O_MEM }, { "json", 0, 0, O_JSON },
        { "model-only", 0, 0, O_MODEL }, { "prefix", 1, 0, O_PREFIX },
        { "key-map", 1, 0, O_KEYMAP }, { "progress", 0, 0, O_PROGRESS },
        { "no-verify", 0, 0, O_NO_VERIFY }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    ck_consolidate_opts o = { 0 };
    bool json = false, model_only = false, progress = false, verify = true;
    const char *key_map = NULL;
    ck_err err = { 0 };
    int c;
    while ((c = getopt_long(argc, argv, "ho:", lo, NULL)) != -1) {
        switch (c) {
        case 'o': o.dir = optarg; break;
        case O_FILTER: o.filter = optarg; break;
        case O_JSON: json = true; break;
        case O_MODEL: model_only = true; break;
        case O_PREFIX: o.prefix = optarg; break;
        case O_KEYMAP: key_map = optarg; break;
        case O_PROGRESS: progress = true; break;
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
            } else if (ck_dtype_parse(optarg, &o.dtype, &err) < 0) {
                tool_error(prog, "--dtype: %s", ck_err_msg(&err));
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
    ck_key_map *map = NULL;
    if (key_map && ck_key_map_load(key_map, &map, &err) < 0) {
        tool_error(prog, "--key-map: %s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    o.rename = map ? ck_key_map_rename : NULL;
    o.rename_arg = map;
    ck_ckpt *ck;
    int r = ck_open(root, name, &ck, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        ck_key_map_free(map);
        return tool_exit_code(r);
    }
    ck_load_verify(ck, verify);
    char prefix[CK_NAME_MAX];
    if (model_only && !o.prefix) {
        if ((r = ck_export_model_prefix(ck, prefix, sizeof prefix, &err)) < 0) {
            tool_error(prog, "%s (--prefix P)", ck_err_msg(&err));
            ck_close(ck);
            ck_key_map_free(map);
            return tool_exit_code(r);
        }
        o.prefix = prefix;
    }
    tool_progress line;
    tool_progress_init(&line, prog, "ckpt-consolidate: writing", progress);
    o.log = tool_log;
    o.progress = tool_progress_update;
    o.cb_arg = &line;
    o.cancel = &interrupted;
    catch_signals();
    ck_consolidate_stats st;
    r = ck_consolidate(ck, &o, &st, &err);
    tool_progress_done(&line);
    ck_close(ck);
    ck_key_map_free(map);
    /* A signal that came once every file had its name stopped nothing: it is reported
     * as the success it is. */
    if (r < 0 && atomic_load(&interrupted))
        return die_of_signal();
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    double gbs = st.seconds > 0 ? (double)st.bytes / st.seconds / 1e9 : 0;
    if (json) {
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:b, s:f, s:f, s:s?}", "dir", o.dir,
                              "tensors", (json_int_t)st.tensors, "files", (json_int_t)st.files,
                              "bytes", (json_int_t)st.bytes, "sharded", st.sharded,
                              "seconds", st.seconds, "gbps", gbs, "prefix", o.prefix);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        char b[32];
        printf("%s: wrote %llu tensors%s%s%s into %llu file%s in %s (%s%s) in %.3f s, "
               "%.2f GB/s\n", prog, (unsigned long long)st.tensors,
               o.prefix ? " of the model (prefix '" : "", o.prefix ? o.prefix : "",
               o.prefix ? "' cut off)" : "", (unsigned long long)st.files,
               st.files == 1 ? "" : "s", o.dir, tool_bytes(st.bytes, b, sizeof b),
               st.sharded ? ", with model.safetensors.index.json" : "", st.seconds, gbs);
    }
    return EXIT_OK;
}
