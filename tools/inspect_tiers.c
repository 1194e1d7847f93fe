/* inspect_tiers.c - ckpt-inspect ROOT --local DIR...: where the copies of each
 * checkpoint are across the tiers (docs/ARCHITECTURE.md, "Tiers"; docs/FORMAT.md,
 * "Copies"), and whether each checkpoint is complete across them.
 *
 * ROOT is the durable tier; each DIR a node's local tier, whose roots are its own
 * copies (DIR/NAME), the replicas it keeps (DIR/.replicas/SRC) and the copies it
 * fetched (DIR/.fetched/N). Copies are of one checkpoint when they have its name and
 * commit time; every copy carries the whole manifest, so a data file is the same
 * index in each, and the checkpoint is complete when each data file is held by some
 * copy. It only reads: what fails to open is said and left out, and what is planted
 * among a tier's roots (a link, a FIFO) is named and never followed.
 */
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck/catalog.h"
#include "ck/ckpt.h"
#include "inspect_tiers.h"
#include "tool.h"

#define NAMED_MAX 8                /* files a line names before "and N more" */

typedef struct copy {
    char name[CK_NAME_MAX];
    uint64_t step, time_ns;
    const char *tier;              /* "local", "replica", "fetched", "durable" */
    char root[PATH_MAX];
    const char *node;              /* the local tier it lies in; NULL: durable */
    char source[CK_COPY_ID_MAX];   /* partial: whose data it holds */
    bool partial;
    uint32_t n_files, n_held;
    size_t seq;                    /* the order found: local tiers as given, durable last */
    uint8_t *held;                 /* per data file of the manifest */
    char (*files)[CK_FILE_NAME_MAX];/* the manifest's data files */
} copy;

typedef struct view {
    const char *prog;
    copy *v;
    size_t n;
    bool json;
    json_t *refused;
    int code;
} view;

static void copy_free(copy *c)
{
    free(c->held);
    free(c->files);
}

/* Adds the copy root/name, opened and read; one that does not open is said, left out. */
static void add(view *w, const char *root, const char *name, const char *tier, const char *node)
{
    ck_ckpt *ck;
    ck_err err = { 0 };
    if (ck_open(root, name, &ck, &err) < 0) {
        tool_error(w->prog, "%s", ck_err_msg(&err));
        w->code = EXIT_BAD;
        return;
    }
    const ck_info *in = ck_get_info(ck);
    const ck_copy *cp = ck_get_copy(ck);
    copy *v = realloc(w->v, (w->n + 1) * sizeof *v);
    if (!v) {
        ck_close(ck);
        w->code = EXIT_USAGE;
        return;
    }
    w->v = v;
    copy *c = &v[w->n];
    *c = (copy){ .step = in->step, .time_ns = in->time_ns, .tier = tier, .node = node,
                 .seq = w->n,
                 .partial = cp->partial, .n_files = in->n_files, .n_held = cp->files_held };
    snprintf(c->name, sizeof c->name, "%s", in->name);
    snprintf(c->root, sizeof c->root, "%s", root);
    snprintf(c->source, sizeof c->source, "%s", cp->partial ? cp->source : "");
    c->held = calloc(in->n_files ? in->n_files : 1, 1);
    c->files = calloc(in->n_files ? in->n_files : 1, sizeof *c->files);
    if (!c->held || !c->files) {
        copy_free(c);
        ck_close(ck);
        w->code = EXIT_USAGE;
        return;
    }
    for (uint32_t f = 0; f < in->n_files; f++) {
        c->held[f] = ck_file_held(ck, f);
        snprintf(c->files[f], sizeof c->files[f], "%s", ck_file_get(ck, f)->name);
    }
    ck_close(ck);
    w->n++;
}

static void add_root(view *w, const char *root, const char *tier, const char *node)
{
    ck_scan sc;
    ck_err err = { 0 };
    if (ck_root_scan(root, &sc, &err) < 0) {
        tool_error(w->prog, "%s", ck_err_msg(&err));
        w->code = EXIT_USAGE;
        return;
    }
    for (size_t i = 0; i < sc.n_committed; i++)
        add(w, root, sc.committed[i], tier, node);
    ck_scan_free(&sc);
}

static void on_stray(void *arg, const char *path, const char *what)
{
    view *w = arg;
    tool_error(w->prog, "%s: %s, where only a root ckptd made belongs: refused, never followed",
               path, what);
    json_array_append_new(w->refused, json_pack("{s:s, s:s}", "path", path, "is", what));
}

static void add_local(view *w, const char *local)
{
    ck_tier_root *t;
    size_t n;
    ck_err err = { 0 };
    add_root(w, local, "local", local);
    if (ck_tier_roots(local, &t, &n, &err) < 0) {
        tool_error(w->prog, "%s", ck_err_msg(&err));
        w->code = EXIT_USAGE;
        return;
    }
    for (size_t i = 0; i < n; i++)
        add_root(w, t[i].path, t[i].kind == CK_TIER_REPLICAS ? "replica" : "fetched", local);
    free(t);
    if (ck_tier_strays(local, on_stray, w, &err) < 0) {
        tool_error(w->prog, "%s", ck_err_msg(&err));
        w->code = EXIT_USAGE;
    }
}

/* Newest first: step, then commit time, then name; the copies of one checkpoint
 * together, in the order found (the local tiers as given, the durable root last). */
static int order(const void *a, const void *b)
{
    const copy *x = a, *y = b;
    if (x->step != y->step)
        return x->step > y->step ? -1 : 1;
    if (x->time_ns != y->time_ns)
        return x->time_ns > y->time_ns ? -1 : 1;
    int c = strcmp(x->name, y->name);
    return c ? c : x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* "rank-00000.dat, rank-00001.dat and 3 more" of the files of c whose flag is want. */
static void files_said(const copy *c, const uint8_t *flags, uint8_t want, char *out, size_t len)
{
    size_t at = 0, k = 0;
    out[0] = '\0';
    for (uint32_t f = 0; f < c->n_files; f++) {
        if (flags[f] != want)
            continue;
        if (k++ < NAMED_MAX && at < len)
            at += (size_t)snprintf(out + at, len - at, "%s%s", k > 1 ? ", " : "", c->files[f]);
    }
    if (k > NAMED_MAX && at < len)
        snprintf(out + at, len - at, " and %zu more", k - NAMED_MAX);
}

static json_t *names(const copy *c, const uint8_t *flags, uint8_t want)
{
    json_t *a = json_array();
    for (uint32_t f = 0; f < c->n_files; f++)
        if (flags[f] == want)
            json_array_append_new(a, json_string(c->files[f]));
    return a;
}

/* One checkpoint: copies v[0, n). */
static void show(view *w, const copy *v, size_t n, json_t *out)
{
    const copy *m = &v[0];
    uint8_t *any = calloc(m->n_files ? m->n_files : 1, 1);
    if (!any) {
        w->code = EXIT_USAGE;
        return;
    }
    uint32_t have = 0;
    for (size_t i = 0; i < n; i++)
        for (uint32_t f = 0; f < m->n_files && f < v[i].n_files; f++)
            any[f] |= v[i].held[f];
    for (uint32_t f = 0; f < m->n_files; f++)
        have += any[f];
    bool complete = have == m->n_files;
    char when[32], buf[1024];
    time_t t = (time_t)(m->time_ns / 1000000000u);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *jc = json_array();
    if (!w->json) {
        files_said(m, any, 0, buf, sizeof buf);
        printf("%s (step %llu, committed %s, %llu ns): %s: %u of %u data files have a copy%s%s\n",
               m->name, (unsigned long long)m->step, when, (unsigned long long)m->time_ns,
               complete ? "complete across the tiers" : "INCOMPLETE", have, m->n_files,
               complete ? "" : "; none holds ", buf);
    }
    for (size_t i = 0; i < n; i++) {
        const copy *c = &v[i];
        files_said(c, c->held, 1, buf, sizeof buf);
        if (w->json)
            json_array_append_new(jc, json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:i, s:o}",
                "tier", c->tier, "root", c->root, "node", c->node,
                "source", c->partial ? c->source : NULL, "complete", !c->partial,
                "files_held", (json_int_t)c->n_held, "held", names(c, c->held, 1)));
        else if (!c->partial)
            printf("  %-8s %s: complete (%u data files)\n", c->tier, c->root, c->n_files);
        else
            printf("  %-8s %s: %s of ckptd %s: %u of %u data files (%s)\n", c->tier, c->root,
                   !strcmp(c->tier, "local") ? "own copy" : "copy", c->source, c->n_held,
                   c->n_files, buf);
    }
    if (w->json)
        json_array_append_new(out, json_pack("{s:s, s:I, s:s, s:I, s:b, s:i, s:i, s:o, s:o}",
            "name", m->name, "step", (json_int_t)m->step, "time", when,
            "time_ns", (json_int_t)m->time_ns, "complete", complete,
            "files", (json_int_t)m->n_files, "files_with_a_copy", (json_int_t)have,
            "missing", names(m, any, 0), "copies", jc));
    else
        json_decref(jc);
    free(any);
}

int inspect_tiers(const char *prog, const char *durable, const char *const *locals,
                  size_t nlocal, const char *only, bool json)
{
    view w = { .prog = prog, .json = json, .refused = json_array() };
    for (size_t i = 0; i < nlocal; i++)
        add_local(&w, locals[i]);
    add_root(&w, durable, "durable", NULL);
    if (w.n > 1)
        qsort(w.v, w.n, sizeof *w.v, order);
    json_t *out = json_array();
    bool found = false;
    for (size_t i = 0, j; i < w.n; i = j) {
        for (j = i + 1; j < w.n && !strcmp(w.v[j].name, w.v[i].name) &&
                        w.v[j].time_ns == w.v[i].time_ns; j++)
            ;
        if (only && strcmp(w.v[i].name, only))
            continue;
        found = true;
        show(&w, &w.v[i], j - i, out);
    }
    if (only && !found) {
        tool_error(prog, "no copy of %s in %s or the %zu local tier(s) given", only, durable,
                   nlocal);
        w.code = EXIT_USAGE;
    } else if (!found && !json) {
        printf("no checkpoints in %s or the %zu local tier(s) given\n", durable, nlocal);
    }
    if (json_array_size(w.refused) && w.code < EXIT_BAD)
        w.code = EXIT_BAD;
    if (json) {
        json_t *jl = json_array();
        for (size_t i = 0; i < nlocal; i++)
            json_array_append_new(jl, json_string(locals[i]));
        json_t *j = json_pack("{s:s, s:o, s:o, s:o}", "durable", durable, "locals", jl,
                              "checkpoints", out, "refused", w.refused);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        json_decref(out);
        json_decref(w.refused);
    }
    for (size_t i = 0; i < w.n; i++)
        copy_free(&w.v[i]);
    free(w.v);
    return w.code;
}
