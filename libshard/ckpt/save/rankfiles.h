/* save/rankfiles.h - the data files a save plan lays out (private to the core).
 *
 * One file per rank that writes anything, rank-NNNNN.dat, holding that rank's plan
 * shards at their plan offsets; and one writer source run per non-empty shard, in
 * file order, for ck__write_files. A save binds the runs to the ranks' memory or fills
 * and adds the shard records; a copy reshard binds them to reads of the old data. */
#ifndef CK_SAVE_RANKFILES_H
#define CK_SAVE_RANKFILES_H

#include <limits.h>

#include "ck/ckpt.h"
#include "model/plan.h"
#include "io/writer.h"

typedef struct ck__rank_files {
    uint32_t n;
    uint32_t *file_of;          /* per rank: its file's index + 1; 0: it writes none */
    ck_file *files;
    ck__wfile *wf;               /* srcs point into srcs; hashes into hashes */
    ck__src *srcs;               /* file_off and len set; mem / fill left to the caller */
    uint32_t *shard_src;        /* per plan shard: its run, or UINT32_MAX when empty */
    uint32_t *src_shard;        /* per run: its plan shard */
    char *paths;                /* every file's path, NUL-separated, sized to fit */
    uint8_t **hashes;           /* per file, NULL when unhashed */
} ck__rank_files;

/* Lays out plan p's files in directory dir (a path); rel_at is where each file's path
 * below the writer's directory (the root) starts: strlen(ROOT) + 1. hash_block 0:
 * unhashed. 0 or -ENOMEM. */
int ck__rank_files_layout(const ck__plan *p, const char *dir, size_t rel_at,
                          uint32_t hash_block, ck__rank_files *rf);
void ck__rank_files_free(ck__rank_files *rf);

#endif
