/* ckpt-inspect - lists checkpoints and shows what one holds.
 *
 *   ckpt-inspect ROOT                     checkpoints (from the catalog, each checked on
 *                                         disk) and leftovers
 *   ckpt-inspect ROOT NAME                mesh, state, bytes, and each tensor
 *   ckpt-inspect ROOT NAME --tensor T     and T's shards with their extents
 *   ckpt-inspect ROOT NAME --blobs        and the blobs
 *   ckpt-inspect ROOT --rebuild-catalog   make the catalog match the directories
 *   ckpt-inspect ROOT --local DIR...      each checkpoint's copies across the tiers
 *                                         (inspect_tiers.c)
 *
 * It only reads, except --rebuild-catalog, which writes ROOT/catalog.mdb only.
 */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck/catalog.h"
#include "ck/ckpt.h"
#include "inspect_tiers.h"
#include "tool.h"

static const char *prog = "ckpt-inspect";

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckpt-inspect ROOT [NAME] [--tensor T] [--blobs] [--json]\n"
"       ckpt-inspect ROOT --rebuild-catalog\n"
"       ckpt-inspect ROOT --local DIR [--local DIR...] [NAME] [--json]\n"
"\n"
"Without NAME, lists the checkpoints of ROOT with step, time, bytes and mesh, and\n"
"reports incomplete saves under ROOT/.pending, directories the catalog misses and\n"
"catalog entries whose checkpoint is not on disk (never listed as checkpoints);\n"
"catalog keys that are no checkpoint name are counted, never printed.\n"
"With NAME, shows its mesh, format version, bytes and each tensor's dtype, shape and\n"
"placements (\"boxes\" for a tensor stored as a list of boxes, format 1.1), and, for\n"
"a partial copy (docs/FORMAT.md, \"Copies\"), whose it is and which data files it holds.\n"
"\n"
"  --tensor T           also list tensor T's shards (or boxes): the writer's mesh\n"
"                       coordinate, offsets, lengths and extents (file, file\n"
"                       offset, bytes)\n"
"  --blobs              also list the blobs (name, bytes)\n"
"  --rebuild-catalog    rewrite ROOT/catalog.mdb from the checkpoint directories\n"
"  --local DIR          (repeatable) a node's local tier (ckptd --local-root): instead\n"
"                       show, for each checkpoint (or NAME), where its copies are in\n"
"                       DIR and the durable tier ROOT: a node's own copy (local),\n"
"                       replicas kept for other daemons (replica, DIR/.replicas/ID),\n"
"                       fetched copies (fetched, DIR/.fetched/N), and ROOT's (durable),\n"
"                       each complete or partial with the data files it holds; and\n"
"                       whether the checkpoint is complete across them (every data\n"
"                       file has a copy) or which files none holds. Links or FIFOs\n"
"                       planted among DIR's roots are named and never followed (exit 1)\n"
"  --json               machine-readable output\n"
"  -h, --help           this text\n"
"\n"
"Exit status: 0 ok, 1 the checkpoint is bad (without NAME: the catalog holds keys\n"
"that are no name; with --local: a copy that does not open, or something planted\n"
"among a tier's roots), 2 usage or I/O error (with --local: no copy of NAME).\n");
}

static json_t *mesh_json(const ck_mesh *m)
{
    json_t *shape = json_array(), *names = json_array();
    bool named = false;
    for (int d = 0; d < m->ndim; d++) {
        json_array_append_new(shape, json_integer(m->size[d]));
        json_array_append_new(names, json_string(m->name[d]));
        named = named || m->name[d][0];
    }
    char s[64];
    ck_mesh_format(m, s, sizeof s);
    json_t *j = json_pack("{s:s, s:o}", "spec", s, "shape", shape);
    if (named)
        json_object_set_new(j, "dims", names);
    else
        json_decref(names);
    return j;
}

static void fmt_time(uint64_t ns, char *buf, size_t len)
{
    time_t t = (time_t)(ns / 1000000000u);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void fmt_dims(const uint64_t *v, int n, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < n && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%llu", d ? ", " : "", (unsigned long long)v[d]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

static json_t *u64_array(const uint64_t *v, int n)
{
    json_t *a = json_array();
    for (int d = 0; d < n; d++)
        json_array_append_new(a, json_integer((json_int_t)v[d]));
    return a;
}

/* Whether a pending entry's name is one a save makes (NAME.TOKEN, -meet, -removed: all
 * of [A-Za-z0-9._-], not starting with '.'); anything else, a newline say, is not
 * printed. */
static bool plain_entry(const char *name)
{
    static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    size_t n = strlen(name);
    return n > 0 && n < CK_NAME_MAX && name[0] != '.' && strspn(name, plain) == n;
}

static int list_root(const char *root, bool json)
{
    ck_err err = { 0 };
    ck_cat_view v;
    int r = ck_catalog_view(root, &v, &err);
    ck_scan sc;
    if (r == 0)
        r = ck_root_scan(root, &sc, &err);
    else
        memset(&sc, 0, sizeof sc);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        ck_cat_view_free(&v);   /* the scan may refuse a root whose catalog listed (a .pending link) */
        return tool_exit_code(r) == EXIT_BAD ? EXIT_BAD : EXIT_USAGE;
    }
    json_t *jl = json ? json_array() : NULL, *jp = json ? json_array() : NULL;
    json_t *jm = json ? json_array() : NULL, *jg = json ? json_array() : NULL;
    if (!json)
        printf("%-28s %12s  %-20s  %12s  %-8s %s\n", "NAME", "STEP", "TIME (UTC)", "BYTES",
               "MESH", "TENSORS");
    for (size_t i = 0; i < v.n; i++) {
        const ck_cat_entry *e = &v.entries[i];
        char when[32], mesh[64], b[32];
        fmt_time(e->time_ns, when, sizeof when);
        ck_mesh_format(&e->mesh, mesh, sizeof mesh);
        if (json)
            json_array_append_new(jl, json_pack("{s:s, s:s, s:I, s:s, s:I, s:o, s:I}",
                "name", e->name, "state", "committed", "step", (json_int_t)e->step,
                "time", when, "bytes", (json_int_t)e->bytes, "mesh", mesh_json(&e->mesh),
                "tensors", (json_int_t)e->n_tensors));
        else
            printf("%-28s %12llu  %-20s  %12s  %-8s %llu\n", e->name,
                   (unsigned long long)e->step, when, tool_bytes(e->bytes, b, sizeof b),
                   mesh, (unsigned long long)e->n_tensors);
    }
    /* Directories the catalog does not list: a crash between a commit's rename and its
     * catalog entry, or a checkpoint copied in by hand. */
    for (size_t i = 0; i < sc.n_committed; i++) {
        bool found = false;
        for (size_t j = 0; j < v.n && !found; j++)
            found = !strcmp(v.entries[j].name, sc.committed[i]);
        if (found)
            continue;
        if (json)
            json_array_append_new(jm, json_string(sc.committed[i]));
        else
            printf("%-28s (not in the catalog: run ckpt-inspect ROOT --rebuild-catalog)\n",
                   sc.committed[i]);
    }
    /* And the other way round: entries whose checkpoint is not on disk (removed by
     * hand) are never listed as checkpoints. */
    for (size_t i = 0; i < v.n_gone; i++) {
        if (json)
            json_array_append_new(jg, json_string(v.gone[i].name));
        else
            printf("%-28s (in the catalog, but not on disk: not a checkpoint; run "
                   "ckpt-inspect ROOT --rebuild-catalog)\n", v.gone[i].name);
    }
    size_t odd = 0;
    char pend[PATH_MAX];
    ck_pending_dir(root, pend, sizeof pend);
    for (size_t i = 0; i < sc.n_pending; i++) {
        if (!plain_entry(sc.pending[i])) {
            odd++;
            continue;
        }
        char who[256];
        int live = ck_pending_live(root, sc.pending[i], who, sizeof who, &err);
        if (live < 0) {
            tool_error(prog, "%s", ck_err_msg(&err));
            live = 0;
        }
        if (json)
            json_array_append_new(jp, json_pack("{s:s, s:b, s:s?}", "entry", sc.pending[i],
                                                "live", live, "owner", live ? who : NULL));
        else if (live)
            printf("%-28s (incomplete save under %s/: in progress, its writer is %s)\n",
                   sc.pending[i], pend, who);
        else
            printf("%-28s (incomplete save under %s/: debris of a dead writer, never "
                   "committed, not visible)\n", sc.pending[i], pend);
    }
    if (json) {
        json_t *j = json_pack("{s:s, s:o, s:o, s:o, s:o, s:I, s:I}", "root", root,
                              "checkpoints", jl, "uncataloged", jm, "not_on_disk", jg,
                              "pending", jp, "skipped_catalog_names", (json_int_t)v.bad_names,
                              "skipped_pending_names", (json_int_t)odd);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        if (v.bad_names)
            printf("%zu catalog entr%s with invalid names skipped (a planted or damaged "
                   "catalog: run ckpt-inspect ROOT --rebuild-catalog)\n", v.bad_names,
                   v.bad_names == 1 ? "y" : "ies");
        if (odd)
            printf("%zu entr%s under %s with names no save makes skipped\n", odd,
                   odd == 1 ? "y" : "ies", pend);
    }
    /* Keys that are no checkpoint name are hostile input, not lag. */
    int rc = v.bad_names ? EXIT_BAD : EXIT_OK;
    ck_cat_view_free(&v);
    ck_scan_free(&sc);
    return rc;
}

static int print_shards(ck_ckpt *ck, const ck_tensor *t, json_t *jt)
{
    ck_err err = { 0 };
    ck_shard *sh;
    uint32_t n;
    int r = ck_shards_get(ck, t, &sh, &n, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    const ck_mesh *m = &ck_get_info(ck)->mesh;
    json_t *ja = jt ? json_array() : NULL;
    if (!jt)
        printf("  %s of %s:\n  %5s  %-12s %-24s %-24s %s\n",
               ck_tensor_is_boxes(t) ? "boxes (each written by the rank at COORD)" : "shards",
               t->name, "IDX", "COORD", "OFFSETS", "LENGTHS", "EXTENTS (file @ offset + bytes)");
    for (uint32_t i = 0; i < n; i++) {
        uint64_t coord[CK_MAX_MESH_DIMS];
        for (int d = 0; d < m->ndim; d++)
            coord[d] = sh[i].coord[d];
        if (jt) {
            json_t *je = json_array();
            for (uint32_t x = 0; x < sh[i].n_extents; x++)
                json_array_append_new(je, json_pack("{s:s, s:I, s:I}", "file",
                    ck_file_get(ck, sh[i].ext[x].file)->name, "offset",
                    (json_int_t)sh[i].ext[x].off, "bytes", (json_int_t)sh[i].ext[x].len));
            json_array_append_new(ja, json_pack("{s:i, s:o, s:I, s:o, s:o, s:o}", "index",
                (int)i, "coord", u64_array(coord, m->ndim), "rank",
                (json_int_t)ck_mesh_rank(m, sh[i].coord), "offsets",
                u64_array(sh[i].box.off, t->ndim), "lengths", u64_array(sh[i].box.len, t->ndim),
                "extents", je));
            continue;
        }
        char c[64], o[128], l[128];
        fmt_dims(coord, m->ndim, c, sizeof c);
        fmt_dims(sh[i].box.off, t->ndim, o, sizeof o);
        fmt_dims(sh[i].box.len, t->ndim, l, sizeof l);
        printf("  %5u  %-12s %-24s %-24s", i, c, o, l);
        for (uint32_t x = 0; x < sh[i].n_extents; x++)
            printf("%s%s @ %llu + %llu", x ? "; " : "", ck_file_get(ck, sh[i].ext[x].file)->name,
                   (unsigned long long)sh[i].ext[x].off, (unsigned long long)sh[i].ext[x].len);
        printf("%s\n", sh[i].n_extents ? "" : "(empty)");
    }
    if (jt)
        json_object_set_new(jt, "shards", ja);
    free(sh);
    return EXIT_OK;
}

typedef struct tensor_walk {
    ck_ckpt *ck;
    bool json;
    json_t *arr;
    const char *detail;     /* --tensor */
    int rc;
} tensor_walk;

static int walk_tensor(const ck_tensor *t, void *arg)
{
    tensor_walk *w = arg;
    const ck_info *in = ck_get_info(w->ck);
    char shape[256], pl[128];
    fmt_dims(t->shape, t->ndim, shape, sizeof shape);
    ck_placements_format(t->pl, in->mesh.ndim, pl, sizeof pl);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
        numel *= t->shape[d];
    uint64_t bytes = numel * ck_dtype_size(t->dtype);
    if (w->json) {
        json_t *jt = json_pack("{s:s, s:s, s:o, s:s, s:s, s:I, s:i}", "name", t->name, "dtype",
                               ck_dtype_name(t->dtype), "shape", u64_array(t->shape, t->ndim),
                               "layout", ck_tensor_is_boxes(t) ? "boxes" : "placements",
                               "placements", pl, "bytes", (json_int_t)bytes, "shards",
                               (int)t->n_shards);
        json_array_append_new(w->arr, jt);
        if (w->detail && !strcmp(w->detail, t->name))
            w->rc = print_shards(w->ck, t, jt);
    } else {
        char b[32];
        printf("%-32s %-5s %-24s %-10s %6u %12s\n", t->name, ck_dtype_name(t->dtype), shape, pl,
               t->n_shards, tool_bytes(bytes, b, sizeof b));
        if (w->detail && !strcmp(w->detail, t->name))
            w->rc = print_shards(w->ck, t, NULL);
    }
    return 0;
}

static int print_blob(const char *name, const void *data, size_t len, void *arg)
{
    json_t *arr = arg;
    (void)data;
    if (arr)
        json_array_append_new(arr, json_pack("{s:s, s:I}", "name", name, "bytes", (json_int_t)len));
    else
        printf("  %-32s %zu bytes\n", name, len);
    return 0;
}

static int show_ckpt(const char *root, const char *name, const char *tensor, bool blobs,
                     bool json)
{
    ck_err err = { 0 };
    ck_ckpt *ck;
    int r = ck_open(root, name, &ck, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    const ck_info *in = ck_get_info(ck);
    char mesh[64], when[32], b[32], tb[32];
    ck_mesh_format(&in->mesh, mesh, sizeof mesh);
    fmt_time(in->time_ns, when, sizeof when);
    if (tensor) {
        ck_tensor t;
        if ((r = ck_tensor_get(ck, tensor, &t, &err)) < 0) {
            tool_error(prog, "%s", ck_err_msg(&err));
            ck_close(ck);
            return tool_exit_code(r);
        }
    }
    tensor_walk w = { .ck = ck, .json = json, .detail = tensor, .arr = json ? json_array() : NULL };
    json_t *j = NULL;
    if (json) {
        j = json_pack("{s:s, s:s, s:s, s:I, s:s, s:o, s:I, s:I, s:I, s:i, s:b}", "name", in->name,
                      "state", "committed", "format", "1.0", "step", (json_int_t)in->step,
                      "time", when, "mesh", mesh_json(&in->mesh),
                      "data_bytes", (json_int_t)in->data_bytes,
                      "tensor_bytes", (json_int_t)in->tensor_bytes,
                      "block_size", (json_int_t)in->block_size, "files", (int)in->n_files,
                      "hashed", in->hashed);
        char ver[16];
        snprintf(ver, sizeof ver, "%u.%u", in->major, in->minor);
        json_object_set_new(j, "format", json_string(ver));
        const ck_copy *cp = ck_get_copy(ck);
        json_t *held = json_array();
        for (uint32_t f = 0; f < in->n_files; f++)
            if (ck_file_held(ck, f))
                json_array_append_new(held, json_string(ck_file_get(ck, f)->name));
        json_object_set_new(j, "copy", json_pack("{s:s, s:s?, s:o}", "kind",
                            cp->partial ? "partial" : "complete", "source",
                            cp->partial ? cp->source : NULL, "files_held", held));
    } else {
        printf("checkpoint  %s (committed)\nformat      %u.%u\nstep        %llu\ntime        %s\n"
               "mesh        %s", in->name, in->major, in->minor, (unsigned long long)in->step,
               when, mesh);
        bool named = false;
        for (int d = 0; d < in->mesh.ndim; d++)
            named = named || in->mesh.name[d][0];
        for (int d = 0; named && d < in->mesh.ndim; d++)
            printf("%s%s", d ? "," : " (", in->mesh.name[d]);
        char copy[4096];
        if (tool_copy_line(ck, copy, sizeof copy)[0])
            printf("%s\ncopy        %s", named ? ")" : "", copy);
        printf("%s\nbytes       %s in %u data files (tensors %s)\nhashes      %s\n"
               "tensors     %llu, shards %llu, blobs %u\n\n",
               named && !copy[0] ? ")" : "", tool_bytes(in->data_bytes, b, sizeof b), in->n_files,
               tool_bytes(in->tensor_bytes, tb, sizeof tb),
               in->hashed ? "SHA-256 per block" : "none (saved with --no-hash)",
               (unsigned long long)in->n_tensors, (unsigned long long)in->n_shards, in->n_blobs);
        printf("%-32s %-5s %-24s %-10s %6s %12s\n", "TENSOR", "DTYPE", "SHAPE", "PLACEMENT",
               "SHARDS", "BYTES");
    }
    r = ck_tensors_each(ck, walk_tensor, &w, &err);
    if (r == 0 && blobs) {
        json_t *jb = json ? json_array() : NULL;
        if (!json)
            printf("\nblobs:\n");
        r = ck_blobs_each(ck, print_blob, jb, &err);
        if (json)
            json_object_set_new(j, "blobs", jb);
    }
    if (json) {
        json_object_set_new(j, "tensors", w.arr);
        if (r == 0) {
            json_dumpf(j, stdout, JSON_INDENT(2));
            fputc('\n', stdout);
        }
        json_decref(j);
    }
    ck_close(ck);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    return w.rc;
}

static int rebuild(const char *root, bool json)
{
    ck_err err = { 0 };
    ck_rebuild_report rep;
    tool_progress p;
    tool_progress_init(&p, prog, "", false);
    int r = ck_catalog_rebuild(root, &rep, tool_log, &p, &err);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    if (json) {
        json_t *j = json_pack("{s:I, s:I, s:I, s:I}", "added", (json_int_t)rep.added, "removed",
                              (json_int_t)rep.removed, "kept", (json_int_t)rep.kept, "unreadable",
                              (json_int_t)rep.unreadable);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        printf("catalog rebuilt: %zu added, %zu removed, %zu kept, %zu unreadable\n", rep.added,
               rep.removed, rep.kept, rep.unreadable);
    }
    return rep.unreadable ? EXIT_BAD : EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "tensor", 1, 0, 't' }, { "blobs", 0, 0, 'b' }, { "json", 0, 0, 'j' },
        { "rebuild-catalog", 0, 0, 'r' }, { "help", 0, 0, 'h' }, { "local", 1, 0, 'l' },
        { 0, 0, 0, 0 },
    };
    const char *tensor = NULL;
    const char **locals = calloc((size_t)argc, sizeof *locals);
    size_t nlocal = 0;
    if (!locals) {
        tool_error(prog, "out of memory");
        return EXIT_USAGE;
    }
    bool blobs = false, json = false, rebuild_cat = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 't': tensor = optarg; break;
        case 'b': blobs = true; break;
        case 'j': json = true; break;
        case 'r': rebuild_cat = true; break;
        case 'l': locals[nlocal++] = optarg; break;
        case 'h': usage(stdout); free(locals); return EXIT_OK;
        default: usage(stderr); free(locals); return EXIT_USAGE;
        }
    }
    int nargs = argc - optind;
    if (nargs < 1 || nargs > 2) {
        tool_error(prog, nargs < 1 ? "missing ROOT (see --help)" : "too many arguments");
        free(locals);
        return EXIT_USAGE;
    }
    const char *root = argv[optind], *name = nargs == 2 ? argv[optind + 1] : NULL;
    if (nlocal) {
        int code = EXIT_USAGE;
        if (rebuild_cat || tensor || blobs)
            tool_error(prog, "--local shows copies across the tiers: it takes no "
                       "--rebuild-catalog, --tensor or --blobs");
        else
            code = inspect_tiers(prog, root, locals, nlocal, name, json);
        free(locals);
        return code;
    }
    free(locals);
    if (rebuild_cat) {
        if (name || tensor || blobs) {
            tool_error(prog, "--rebuild-catalog takes only ROOT");
            return EXIT_USAGE;
        }
        return rebuild(root, json);
    }
    if (!name) {
        if (tensor || blobs) {
            tool_error(prog, "--tensor and --blobs need a checkpoint NAME");
            return EXIT_USAGE;
        }
        return list_root(root, json);
    }
    return show_ckpt(root, name, tensor, blobs, json);
}
