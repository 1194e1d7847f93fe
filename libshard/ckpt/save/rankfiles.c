/* rankfiles.c - the data files a save plan lays out (see rankfiles.h). */
#include "save/rankfiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/layout.h"

int ck__rank_files_layout(const ck__plan *p, const char *dir, size_t rel_at,
                          uint32_t hash_block, ck__rank_files *rf)
{
    memset(rf, 0, sizeof *rf);
    uint64_t world = ck_mesh_world(ck__plan_mesh(p));
    uint32_t nsh = ck__plan_nshards(p);
    if (!(rf->file_of = calloc(world, sizeof *rf->file_of)))
        return -ENOMEM;
    for (uint64_t r = 0; r < world; r++)
        if (ck__plan_file_size(p, r) > 0)
            rf->file_of[r] = ++rf->n;
    size_t nf = rf->n ? rf->n : 1, ns = nsh ? nsh : 1;
    rf->files = calloc(nf, sizeof *rf->files);
    rf->wf = calloc(nf, sizeof *rf->wf);
    /* Exact lengths: a world of 2^20 ranks must not cost PATH_MAX bytes per file. */
    size_t path_len = strlen(dir) + 1 + CK_FILE_NAME_MAX;
    rf->paths = malloc(nf * path_len);
    rf->hashes = calloc(nf, sizeof *rf->hashes);
    rf->srcs = calloc(ns, sizeof *rf->srcs);
    rf->shard_src = malloc(ns * sizeof *rf->shard_src);
    rf->src_shard = malloc(ns * sizeof *rf->src_shard);
    uint32_t *pos = calloc(nf, sizeof *pos);
    int r = 0;
    if (!rf->files || !rf->wf || !rf->paths || !rf->hashes || !rf->srcs || !rf->shard_src ||
        !rf->src_shard || !pos) {
        r = -ENOMEM;
        goto out;
    }
    for (uint64_t rank = 0; rank < world; rank++) {
        uint32_t f = rf->file_of[rank];
        if (!f--)
            continue;
        ck_file *cf = &rf->files[f];
        ck__name_data_file(false, rank, cf->name);
        cf->size = ck__plan_file_size(p, rank);
        cf->rank = (uint32_t)rank;
        char *path = rf->paths + (size_t)f * path_len;
        snprintf(path, path_len, "%s/%s", dir, cf->name);
        rf->wf[f].path = path;
        rf->wf[f].rel = path + rel_at;
        rf->wf[f].size = cf->size;
        if (hash_block) {
            rf->hashes[f] = malloc(((cf->size + hash_block - 1) / hash_block) * CK_HASH_LEN + 1);
            if (!rf->hashes[f]) {
                r = -ENOMEM;
                goto out;
            }
            rf->wf[f].hashes = rf->hashes[f];
        }
    }
    /* Plan shards come in (tensor, index) order and a rank's file offsets grow as the
     * plan assigns them, so each file's runs come out sorted. Count, then place. */
    for (uint32_t i = 0; i < nsh; i++) {
        const ck__plan_shard *ps = ck__plan_shard_at(p, i);
        if (ps->bytes)
            rf->wf[rf->file_of[ps->writer] - 1].nsrcs++;
    }
    uint32_t acc = 0;
    for (uint32_t f = 0; f < rf->n; f++) {
        pos[f] = acc;
        rf->wf[f].srcs = rf->srcs + acc;
        acc += rf->wf[f].nsrcs;
    }
    for (uint32_t i = 0; i < nsh; i++) {
        const ck__plan_shard *ps = ck__plan_shard_at(p, i);
        rf->shard_src[i] = UINT32_MAX;
        if (!ps->bytes)
            continue;
        uint32_t k = pos[rf->file_of[ps->writer] - 1]++;
        rf->shard_src[i] = k;
        rf->src_shard[k] = i;
        rf->srcs[k] = (ck__src){ .file_off = ps->file_off, .len = ps->bytes };
    }
out:
    free(pos);
    return r;
}

void ck__rank_files_free(ck__rank_files *rf)
{
    if (rf->hashes)
        for (uint32_t f = 0; f < rf->n; f++)
            free(rf->hashes[f]);
    free(rf->hashes);
    free(rf->file_of);
    free(rf->files);
    free(rf->wf);
    free(rf->srcs);
    free(rf->shard_src);
    free(rf->src_shard);
    free(rf->paths);
    memset(rf, 0, sizeof *rf);
}
