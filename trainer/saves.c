/* saves.c - see saves.h. */
#include "saves.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck/steps.h"
#include "export/safetensors.h"

void tr_save_name(uint64_t step, char name[CK_NAME_MAX])
{
    snprintf(name, CK_NAME_MAX, TR_SAVE_PREFIX "%08llu", (unsigned long long)step);
}

/* The core's rule (ck/steps.h): only names step-<digits> are the trainer's, the oldest
 * by number go; each removal is crash-safe at every step (docs/FORMAT.md, "Removing a
 * checkpoint"). */
int tr_prune_saves(const char *root, int keep_last, ck_err *err)
{
    int rc = ck_root_prune(root, TR_SAVE_PREFIX, (size_t)keep_last, NULL, NULL, NULL, err);
    return rc < 0 ? rc : 0;
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
