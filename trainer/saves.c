/* saves.c - see saves.h. */
#include "saves.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "export/safetensors.h"

#define SAVE_PREFIX "step-"

void tr_save_name(uint64_t step, char name[CK_NAME_MAX])
{
    snprintf(name, CK_NAME_MAX, SAVE_PREFIX "%08llu", (unsigned long long)step);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each removal is the core's, crash-safe at every step (docs/FORMAT.md, "Removing a
 * checkpoint"). */
int tr_prune_saves(const char *root, int keep_last, ck_err *err)
{
    ck_scan sc;
    int rc = ck_root_scan(root, &sc, err);
    if (rc)
        return rc;
    char **mine = calloc(sc.n_committed + 1, sizeof *mine);
    if (!mine) {
        ck_scan_free(&sc);
        return ck_err_set(err, -ENOMEM, "%s: out of memory listing checkpoints", root);
    }
    size_t n = 0;
    for (size_t i = 0; i < sc.n_committed; i++)
        if (strncmp(sc.committed[i], SAVE_PREFIX, strlen(SAVE_PREFIX)) == 0)
            mine[n++] = sc.committed[i];
    qsort(mine, n, sizeof *mine, cmp_names);
    for (size_t i = 0; !rc && n > (size_t)keep_last && i < n - (size_t)keep_last; i++)
        rc = ck_root_remove(root, mine[i], NULL, err);
    free(mine);
    ck_scan_free(&sc);
    return rc;
}

int tr_load_safetensors(const char *path, const sh_state_dict *sd, ck_err *err)
{
    ck_st_file f;
    int rc = ck_st_open(path, &f, err);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        rc = ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    for (size_t i = 0; !rc && i < sd->n; i++) {
        const sh_shard_entry *e = &sd->entry[i];
        const ck_st_tensor *t = NULL;
        for (size_t k = 0; k < f.n && !t; k++)
            if (strcmp(f.t[k].name, e->name) == 0)
                t = &f.t[k];
        bool same = t && t->dtype == e->dtype && t->ndim == e->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == e->shape[d];
        if (!same) {
            rc = ck_err_set(err, t ? -EINVAL : -ENOENT, "%s: tensor '%s' %s", path, e->name,
                            t ? "has another dtype or shape than the model's" : "is missing");
            break;
        }
        size_t n = ck_box_numel(&e->box), row = ck_dtype_size(e->dtype);
        for (int d = 1; d < e->ndim; d++)
            row *= e->shape[d];
        off_t at = (off_t)(f.data_start + t->begin + e->box.off[0] * row);
        ssize_t got = n ? pread(fd, e->data, n * ck_dtype_size(e->dtype), at) : 0;
        if (got != (ssize_t)(n * ck_dtype_size(e->dtype)))
            rc = ck_err_set(err, -EIO, "%s: short read of tensor '%s'", path, e->name);
    }
    if (fd >= 0)
        close(fd);
    ck_st_free(&f);
    return rc;
}
