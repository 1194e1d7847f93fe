/* ckpt-verify - checks checkpoints: structure always, every data byte with --deep.
 *
 * It reports every problem it finds, each naming the tensor, shard or file, and
 * never writes to what it reads.
 */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ck/catalog.h"
#include "ck/compare.h"
#include "ck/load.h"
#include "ck/verify.h"
#include "tool.h"

static const char *prog = "ckpt-verify";

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckpt-verify ROOT [NAME] [--deep] [--threads N] [--json] [--progress]\n"
"       ckpt-verify ROOT NAME --against [ROOT2/]OTHER [--mem-limit SIZE] [--json]\n"
"                   [--progress]\n"
"\n"
"Checks checkpoint NAME of ROOT, or every committed checkpoint of ROOT: the format\n"
"version is known, every record decodes, data files exist with their recorded sizes,\n"
"extents lie inside their files and never overlap, each shard is where its\n"
"placements put it (a tensor stored as a box list: its boxes lie inside it), and\n"
"every element of every tensor is covered by exactly one shard. A partial copy (a\n"
"node's part in its local tier, or a peer's replica of it) is said to be one, and\n"
"its data files checked are those it holds. Without NAME it also\n"
"reports what lies under ROOT/.pending: saves in progress (their writer holds the\n"
"save's lock) and the debris of saves whose writer died; and when ROOT is a node's\n"
"local tier, the roots below it are checked the same way, each named: the replicas\n"
"kept for other daemons (ROOT/.replicas/ID) and the copies fetched to restore from\n"
"(ROOT/.fetched/N); anything else planted there (a link, a FIFO, a file) is refused,\n"
"named, and never opened. Any tier can be checked: a local tier, one replica root\n"
"(ROOT/.replicas/ID), one fetched root, or the durable root.\n"
"\n"
"  --deep        also re-read every data block and compare its SHA-256 with the\n"
"                manifest (in parallel); a mismatch names the tensors it holds\n"
"  --threads N   hash threads for --deep (default: one per CPU)\n"
"  --json        machine-readable output\n"
"  --against [ROOT2/]OTHER\n"
"                instead: check that NAME and OTHER (under ROOT, or ROOT2) hold the\n"
"                same tensors (names, dtypes, shapes, every element bit for bit)\n"
"                whatever their meshes; reports the first differing element of each\n"
"                differing tensor. Exit 0 equal, 1 different\n"
"  --mem-limit SIZE  read buffers of --against (default 64MiB)\n"
"  --progress    progress lines on stderr even when it is no terminal (a log):\n"
"                one every 2 s and one at the end\n"
"  -h, --help    this text\n"
"\n"
"Exit status: 0 every checkpoint is good (saves in progress are no problem), 1 a\n"
"problem was found (or debris of a dead writer's save lies under .pending, or\n"
"something planted among a local tier's roots), 2 usage or I/O error.\n");
}

typedef struct ctx {
    bool json;
    bool progress;           /* --progress */
    json_t *problems;        /* of the checkpoint being checked */
    const char *name;
    tool_progress prog_line;
} ctx;

static void on_problem(void *arg, const char *msg)
{
    ctx *c = arg;
    if (c->json) {
        json_array_append_new(c->problems, json_string(msg));
    } else {
        tool_progress_done(&c->prog_line);
        printf("%s: %s\n", c->name, msg);
    }
}

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    tool_progress_update(&((ctx *)arg)->prog_line, done, total);
}

/* Verifies one checkpoint; returns its exit code. */
static int verify_one(const char *root, const char *name, bool deep, unsigned threads,
                      ctx *c, json_t *out)
{
    ck_err err = { 0 };
    ck_ckpt *ck;
    c->name = name;
    c->problems = json_array();
    json_t *j = json_pack("{s:s, s:s}", "name", name, "root", root);
    int code = EXIT_OK;
    int r = ck_open(root, name, &ck, &err);
    if (r == -ENOENT) {
        /* Maybe it never got past .pending: say so rather than "no such". */
        char who[256] = "", pend[PATH_MAX];
        int state = ck_name_probe(root, name, who, sizeof who, NULL);
        if ((state == CK_NAME_BUSY || state == CK_NAME_DEBRIS) &&
            ck_pending_dir(root, pend, sizeof pend) == 0) {
            ck_err_clear(&err);
            if (state == CK_NAME_BUSY)
                ck_err_set(&err, -EBADMSG, "%s is a save in progress under %s (its writer, %s, "
                           "is alive): not committed yet", name, pend, who);
            else
                ck_err_set(&err, -EBADMSG, "%s is an incomplete save under %s: it was never "
                           "committed", name, pend);
            r = -EBADMSG;
        }
    }
    if (r < 0) {
        code = tool_exit_code(r);
        if (c->json)
            json_array_append_new(c->problems, json_string(ck_err_msg(&err)));
        else
            tool_error(prog, "%s", ck_err_msg(&err));
    } else {
        ck_verify_result res;
        char copy[512];
        tool_copy_line(ck, copy, sizeof copy);
        tool_progress_init(&c->prog_line, prog, "ckpt-verify: hashing", c->progress);
        ck_verify_opts o = { .deep = deep, .threads = threads, .problem = on_problem,
                             .progress = on_progress, .cb_arg = c };
        r = ck_verify(ck, &o, &res, &err);
        tool_progress_done(&c->prog_line);
        ck_close(ck);
        if (r < 0) {
            code = EXIT_USAGE;
            tool_error(prog, "%s: %s", name, ck_err_msg(&err));
        } else {
            code = res.problems ? EXIT_BAD : EXIT_OK;
            double gbs = res.deep_seconds > 0 ? (double)res.bytes_hashed / res.deep_seconds / 1e9 : 0;
            json_object_set_new(j, "tensors", json_integer((json_int_t)res.tensors));
            json_object_set_new(j, "shards", json_integer((json_int_t)res.shards));
            json_object_set_new(j, "files", json_integer((json_int_t)res.files));
            if (deep) {
                json_object_set_new(j, "blocks_hashed", json_integer((json_int_t)res.blocks_hashed));
                json_object_set_new(j, "bytes_hashed", json_integer((json_int_t)res.bytes_hashed));
                json_object_set_new(j, "deep_seconds", json_real(res.deep_seconds));
                json_object_set_new(j, "deep_gbps", json_real(gbs));
                json_object_set_new(j, "unhashed", json_boolean(res.unhashed));
            }
            if (copy[0])
                json_object_set_new(j, "copy", json_string(copy));
            if (!c->json) {
                char b[32];
                printf("%s: %s: %s%s%llu tensors, %llu shards, %llu files", name,
                       res.problems ? "BAD" : "ok", copy, copy[0] ? "; " : "",
                       (unsigned long long)res.tensors,
                       (unsigned long long)res.shards, (unsigned long long)res.files);
                if (deep && res.unhashed)
                    printf("; no hashes recorded (saved with --no-hash): data not checked");
                else if (deep)
                    printf("; %llu blocks (%s) re-hashed in %.2f s, %.2f GB/s",
                           (unsigned long long)res.blocks_hashed,
                           tool_bytes(res.bytes_hashed, b, sizeof b), res.deep_seconds, gbs);
                if (res.problems)
                    printf("; %llu problem%s", (unsigned long long)res.problems,
                           res.problems == 1 ? "" : "s");
                printf("\n");
            }
        }
    }
    json_object_set_new(j, "ok", json_boolean(code == EXIT_OK));
    json_object_set_new(j, "problems", c->problems);
    json_array_append_new(out, j);
    return code;
}

/* Every committed checkpoint of root, and what lies under its .pending; returns the
 * worst exit code. */
static int verify_root(const char *root, bool deep, unsigned threads, ctx *c, json_t *out,
                       json_t *pending)
{
    ck_err err = { 0 };
    ck_scan sc;
    int code = EXIT_OK;
    if (ck_root_scan(root, &sc, &err) < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < sc.n_committed; i++) {
        int rc = verify_one(root, sc.committed[i], deep, threads, c, out);
        if (rc > code)
            code = rc;
    }
    /* A save in progress is no problem of the root; the debris of a dead writer is a
     * crash to report. */
    char pend[PATH_MAX];
    ck_pending_dir(root, pend, sizeof pend);
    for (size_t i = 0; i < sc.n_pending; i++) {
        char who[256];
        int live = ck_pending_live(root, sc.pending[i], who, sizeof who, &err);
        if (live < 0) {
            tool_error(prog, "%s", ck_err_msg(&err));
            code = EXIT_USAGE;
            continue;
        }
        json_array_append_new(pending, json_pack("{s:s, s:b, s:s?}", "entry", sc.pending[i],
                                                 "live", live, "owner", live ? who : NULL));
        if (!c->json && live)
            printf("%s/%s: a save in progress (its writer, %s, holds its lock): not "
                   "committed yet\n", pend, sc.pending[i], who);
        else if (!c->json)
            printf("%s/%s: debris of an incomplete save whose writer died (nothing holds "
                   "its lock; the next recovery removes it: a ckptd's start, or the "
                   "start of an embedded trainer or CheckpointManager)\n", pend, sc.pending[i]);
        if (!live && code < EXIT_BAD)
            code = EXIT_BAD;
    }
    if (!c->json && sc.n_committed == 0)
        printf("%s: no committed checkpoints\n", root);
    ck_scan_free(&sc);
    return code;
}

typedef struct strays {
    bool json;
    json_t *out;
} strays;

static void on_stray(void *arg, const char *path, const char *what)
{
    strays *st = arg;
    if (st->json)
        json_array_append_new(st->out, json_pack("{s:s, s:s}", "path", path, "is", what));
    else
        printf("%s: %s, where only a root ckptd made belongs: refused, never followed\n",
               path, what);
}

static void on_diff(void *arg, const char *msg)
{
    ctx *c = arg;
    if (c->json) {
        json_array_append_new(c->problems, json_string(msg));
    } else {
        tool_progress_done(&c->prog_line);
        printf("%s\n", msg);
    }
}

/* --against: compares ROOT/NAME with [ROOT2/]OTHER; returns the exit code. */
static int against(const char *root, const char *name, const char *spec, uint64_t mem,
                   ctx *c)
{
    char root2[4096];
    const char *other = spec, *slash = strrchr(spec, '/');
    snprintf(root2, sizeof root2, "%s", root);
    if (slash) {
        snprintf(root2, sizeof root2, "%.*s", (int)(slash - spec), spec);
        other = slash + 1;
    }
    ck_err err = { 0 };
    ck_ckpt *a = NULL, *b = NULL;
    int r = ck_open(root, name, &a, &err);
    if (r == 0)
        r = ck_open(root2, other, &b, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        ck_close(a);
        return tool_exit_code(r);
    }
    /* A comparison reports the first element that differs, which a load's block check
     * would hide behind "SHA-256 mismatch"; --deep is the check of the hashes. */
    ck_load_verify(a, false);
    ck_load_verify(b, false);
    c->problems = json_array();
    tool_progress_init(&c->prog_line, prog, "ckpt-verify: comparing", c->progress);
    ck_compare_opts o = { .mem_limit = mem, .diff = on_diff, .progress = on_progress,
                          .cb_arg = c };
    ck_compare_result res;
    r = ck_compare(a, b, &o, &res, &err);
    tool_progress_done(&c->prog_line);
    ck_close(a);
    ck_close(b);
    if (r < 0) {
        tool_error(prog, "%s vs %s: %s", name, spec, ck_err_msg(&err));
        json_decref(c->problems);
        return tool_exit_code(r);
    }
    if (c->json) {
        json_t *j = json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:o}", "name", name,
                              "against", spec, "equal", res.differing == 0,
                              "tensors", (json_int_t)res.tensors,
                              "differing", (json_int_t)res.differing,
                              "bytes_compared", (json_int_t)res.bytes_compared,
                              "differences", c->problems);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        json_decref(c->problems);
        char bb[32];
        if (res.differing)
            printf("%s vs %s: DIFFER: %llu of %llu tensors\n", name, spec,
                   (unsigned long long)res.differing, (unsigned long long)res.tensors);
        else
            printf("%s vs %s: equal: %llu tensors, %s compared\n", name, spec,
                   (unsigned long long)res.tensors, tool_bytes(res.bytes_compared, bb, sizeof bb));
    }
    return res.differing ? EXIT_BAD : EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "deep", 0, 0, 'd' }, { "threads", 1, 0, 't' }, { "json", 0, 0, 'j' },
        { "help", 0, 0, 'h' }, { "against", 1, 0, 'a' }, { "mem-limit", 1, 0, 'm' },
        { "progress", 0, 0, 'p' }, { 0, 0, 0, 0 },
    };
    const char *against_spec = NULL;
    uint64_t mem = 0;
    ck_err merr = { 0 };
    bool deep = false;
    ctx c = { 0 };
    unsigned threads = 0;
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (opt) {
        case 'd': deep = true; break;
        case 'j': c.json = true; break;
        case 'p': c.progress = true; break;
        case 't':
            errno = 0;
            unsigned long v = strtoul(optarg, &end, 10);
            if (errno || *end || !optarg[0] || optarg[0] == '-' || v > 256) {
                tool_error(prog, "--threads: '%s' is not a number in 0..256", optarg);
                return EXIT_USAGE;
            }
            threads = (unsigned)v;
            break;
        case 'a': against_spec = optarg; break;
        case 'm':
            if (ck_size_parse(optarg, &mem, &merr) < 0) {
                tool_error(prog, "--mem-limit: %s", ck_err_msg(&merr));
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    int nargs = argc - optind;
    if (nargs < 1 || nargs > 2) {
        tool_error(prog, nargs < 1 ? "missing ROOT (see --help)" : "too many arguments");
        return EXIT_USAGE;
    }
    const char *root = argv[optind];
    if (against_spec) {
        if (nargs != 2 || deep) {
            tool_error(prog, "--against needs ROOT and NAME, and goes without --deep");
            return EXIT_USAGE;
        }
        return against(root, argv[optind + 1], against_spec, mem, &c);
    }
    json_t *out = json_array();
    int code = EXIT_OK;
    json_t *pending = json_array(), *refused = json_array();
    if (nargs == 2) {
        code = verify_one(root, argv[optind + 1], deep, threads, &c, out);
    } else {
        code = verify_root(root, deep, threads, &c, out, pending);
        ck_err err = { 0 };
        ck_tier_root *sub;
        size_t n;
        bool listed = ck_tier_roots(root, &sub, &n, &err) == 0;
        if (!listed) {
            tool_error(prog, "%s", ck_err_msg(&err));
            n = 0;
            code = EXIT_USAGE;
        }
        for (size_t i = 0; i < n; i++) {
            if (!c.json && sub[i].kind == CK_TIER_REPLICAS)
                printf("%s: the replicas kept for ckptd %s\n", sub[i].path, sub[i].id);
            else if (!c.json)
                printf("%s: copies fetched to restore from\n", sub[i].path);
            int rc = verify_root(sub[i].path, deep, threads, &c, out, pending);
            if (rc > code)
                code = rc;
        }
        free(sub);
        /* A link, FIFO or file planted among the tier's roots: named, never opened (a
         * tier whose roots could not be listed was refused above, for the same cause). */
        strays st = { .json = c.json, .out = refused };
        int k = listed ? ck_tier_strays(root, on_stray, &st, &err) : 0;
        if (k < 0) {
            tool_error(prog, "%s", ck_err_msg(&err));
            code = EXIT_USAGE;
        } else if (k > 0 && code < EXIT_BAD) {
            code = EXIT_BAD;
        }
    }
    if (c.json) {
        json_t *j = json_pack("{s:s, s:b, s:o, s:o, s:o}", "root", root, "ok", code == EXIT_OK,
                              "checkpoints", out, "pending", pending, "refused", refused);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        json_decref(out);
        json_decref(pending);
        json_decref(refused);
    }
    return code;
}
