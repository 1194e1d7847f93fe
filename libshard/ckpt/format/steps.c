/* steps.c - a run's checkpoints PREFIX<digits>: which they are, the newest, and keeping
 * the last K (ck__step_of, ck_root_steps, ck_root_newest, ck_root_prune; see
 * ck/steps.h). */
#include "ck/steps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck/catalog.h"
#include "format/steps.h"

/* 2^64 - 1 has 20 digits: no more are read (the value decides among 20). */
#define STEP_DIGITS_MAX 20

bool ck__step_of(const char *name, const char *prefix, uint64_t *step)
{
    size_t np = strlen(prefix);
    if (strncmp(name, prefix, np) != 0)
        return false;
    const char *d = name + np;
    size_t nd = strspn(d, "0123456789");
    if (nd == 0 || d[nd] != '\0' || nd > STEP_DIGITS_MAX)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < nd; i++) {
        unsigned digit = (unsigned)(d[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return false;      /* past 2^64 - 1: no step of ours */
        v = v * 10 + digit;
    }
    if (step)
        *step = v;
    return true;
}

static int check_prefix(const char *prefix, ck_err *err)
{
    if (!prefix)
        return ck_err_set(err, -EINVAL, "no checkpoint name prefix given");
    /* Empty is allowed (names that are bare numbers); anything else must be the start
     * of a checkpoint name. */
    return *prefix ? ck_name_check("checkpoint prefix", prefix, err) : 0;
}

static int by_step(const void *a, const void *b)
{
    const ck_step_ckpt *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

int ck_root_steps(const char *root, const char *prefix, ck_step_ckpt **out, size_t *n,
                  ck_err *err)
{
    *out = NULL;
    *n = 0;
    int r = check_prefix(prefix, err);
    if (r < 0)
        return r;
    ck_scan sc;
    if ((r = ck_root_scan(root, &sc, err)) < 0)
        return r;
    ck_step_ckpt *v = sc.n_committed ? calloc(sc.n_committed, sizeof *v) : NULL;
    if (sc.n_committed && !v) {
        ck_scan_free(&sc);
        return ck_err_set(err, -ENOMEM, "%s: out of memory listing checkpoints", root);
    }
    size_t k = 0;
    for (size_t i = 0; i < sc.n_committed; i++)
        if (ck__step_of(sc.committed[i], prefix, &v[k].step))
            snprintf(v[k++].name, CK_NAME_MAX, "%s", sc.committed[i]);
    ck_scan_free(&sc);
    if (k == 0) {
        free(v);
        return 0;
    }
    qsort(v, k, sizeof *v, by_step);
    *out = v;
    *n = k;
    return 0;
}

int ck_root_newest(const char *root, const char *prefix, char name[CK_NAME_MAX],
                   uint64_t *step, ck_err *err)
{
    ck_step_ckpt *v;
    size_t n;
    int r = ck_root_steps(root, prefix, &v, &n, err);
    if (r < 0)
        return r;
    if (n == 0)
        return ck_err_set(err, -ENOENT, "%s: no committed checkpoint named %s<step>", root,
                          prefix);
    snprintf(name, CK_NAME_MAX, "%s", v[n - 1].name);
    if (step)
        *step = v[n - 1].step;
    free(v);
    return 0;
}

int ck_root_prune(const char *root, const char *prefix, size_t keep, ck_engine *e,
                  void (*removed)(void *arg, const char *name), void *arg, ck_err *err)
{
    if (keep == 0)
        return ck_err_set(err, -EINVAL, "%s: keeping 0 checkpoints named %s<step> would "
                          "remove them all; keep at least 1", root, prefix ? prefix : "");
    ck_step_ckpt *v;
    size_t n;
    int r = ck_root_steps(root, prefix, &v, &n, err);
    if (r < 0)
        return r;
    int gone = 0;
    for (size_t i = 0; r >= 0 && n > keep && i < n - keep; i++) {
        ck_err why = { 0 };
        int x = ck_root_remove(root, v[i].name, e, &why);
        if (x == 0) {
            gone++;
            if (removed)
                removed(arg, v[i].name);
        } else if (x != -ENOENT && x != -EBUSY) {
            /* Removed or held by another process meanwhile: not ours to stop on. */
            r = x;
            if (err)
                *err = why;
        }
    }
    free(v);
    return r < 0 ? r : gone;
}
