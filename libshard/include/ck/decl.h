/* ck/decl.h - what a checkpoint holds, declared once: its mesh and its tensors.
 *
 * A declaration names the tensors of a save, each with its dtype, its global shape and
 * either placements over the mesh (ck/layout.h: which box every rank holds) or an
 * explicit list of boxes that tile it, each with the rank that writes it (DCP's uneven
 * chunks, 2-D tiles). Every rank of a save declares the same tensors in the same
 * order. From it the core derives the plan once (model/plan.h: which replica writes
 * each shard, and where in its rank's data file), when it is sealed. Every save takes
 * one and none copies or replays it: a whole save made by one process (ck_save_begin),
 * a rank's part through the client (ck_client_begin), ckptd's BEGIN.
 *
 *   ck_decl *d;
 *   ck_decl_new(&d, &mesh, &err);
 *   ck_decl_tensor(d, "layers.0.w", CK_BF16, 2, shape, pl, &err);
 *   ck_decl_tensor_boxes(d, "exp_avg", CK_F32, 2, shape, n, boxes, writers, &err);
 *   ck_decl_seal(d, &err);          // the plan; the first save seals it if not
 *   for each save: ck_client_begin(cl, &sv, name, step, d, rank, &job, &err) ...
 *   ck_decl_free(d);                // each save holds a reference of its own
 *
 * Sealed, a declaration never changes, and any number of saves on any threads share
 * it; it goes with its last reference. A state dict that keeps its structure keeps its
 * declaration, so that a save costs nothing per tensor but its bytes. Errors name the
 * tensor and, for a box list, the box.
 */
#ifndef CK_DECL_H
#define CK_DECL_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/layout.h"
#include "ck/types.h"

typedef struct ck_decl ck_decl;

CK_API int ck_decl_new(ck_decl **out, const ck_mesh *mesh, ck_err *err);
/* A tensor by placements, one per mesh dim. Names are unique ([A-Za-z0-9._-] and
 * %XX escapes: ck_key_check). */
CK_API int ck_decl_tensor(ck_decl *d, const char *name, ck_dtype dtype, int ndim,
                          const uint64_t *shape, const ck_placement *pl, ck_err *err);
/* A tensor stored as an explicit list of boxes (format 1.1): box i is written by rank
 * writers[i]. A rank may write several boxes of one tensor, or none. The list must tile
 * the tensor (ck_boxes_check), which the seal checks. */
CK_API int ck_decl_tensor_boxes(ck_decl *d, const char *name, ck_dtype dtype, int ndim,
                                const uint64_t *shape, uint32_t nboxes, const ck_box *boxes,
                                const uint64_t *writers, ck_err *err);
/* Fixes the declaration and computes its plan: 0, or why it cannot be saved (a layout
 * that does not fit a tensor, a box list that does not tile), as often as it is asked.
 * Nothing can be declared after it. */
CK_API int ck_decl_seal(ck_decl *d, ck_err *err);

CK_API const ck_mesh *ck_decl_mesh(const ck_decl *d);
/* Sealed: the bytes of rank's data file, laid out by the plan (0: it writes none),
 * which is what its staging area holds before its blobs. */
CK_API uint64_t ck_decl_file_bytes(const ck_decl *d, uint64_t rank);
/* Sealed: how many shards the plan gives rank to write, each a source of its part
 * (ck_client_submit): for each tensor in declaration order, its shard when rank is the
 * replica that writes it, or the boxes of its list whose writer is rank, in list order. */
CK_API uint32_t ck_decl_writes(const ck_decl *d, uint64_t rank);

/* Whether a and b declare the same tensors, in the same order, on the same mesh: a
 * caller that declares its state again for each save keeps the declaration it has,
 * and its plan, while they are equal. */
CK_API bool ck_decl_equal(const ck_decl *a, const ck_decl *b);

/* Another reference to d, and the release of one (d goes with the last). */
CK_API ck_decl *ck_decl_ref(ck_decl *d);
CK_API void ck_decl_free(ck_decl *d);

#endif
