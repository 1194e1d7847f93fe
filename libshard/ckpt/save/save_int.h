/* save/save_int.h - what a save shows the engine and the core's own tests (private
 * to the core).
 *
 * The public ck/save.h is a whole save in one process. The saver (async/saver.c) drives
 * a save rank by rank, from staging areas, and shares it with other engines through
 * part records; those calls are here. So is the plan of a prepared save, so that a test
 * can build a rank's image from the plan alone, independently of save/image.c, and
 * check that the save accepts it.
 */
#ifndef CK_SAVE_SAVE_INT_H
#define CK_SAVE_SAVE_INT_H

#include "ck/save.h"
#include "model/plan.h"
#include "save/image.h"
#include "save/commit.h"

/* The job whose save s is (its id in hex, CK_JOB_HEX_MAX bytes; async/saver.c's saves
 * all have one): recorded in the save's lock when this process takes it, so that a
 * writer of another job that finds the lock held says whose it is (format/owner.h).
 * Before ck__save_prepare, share or join. */
void ck__save_job(ck_save *s, const char *job);

/* ---- writing rank by rank (the saver's way, async/saver.c) ----
 * After every tensor is declared, ck__save_prepare fixes the layout and creates the
 * pending directory. Each rank's data file is then an image in memory of
 * ck__save_rank_bytes(rank) bytes, laid out as the plan says (each shard at its
 * offset in the file, zeros between: ck__save_copy_rank builds it), so it is written
 * in place, without a copy.
 * ck__save_write_rank makes one rank's file durable; calls for distinct ranks may run
 * on different threads. Ranks not written by then are written by ck_save_commit. */
int ck__save_prepare(ck_save *s, ck_err *err);
uint64_t ck__save_rank_bytes(const ck_save *s, uint64_t rank);
/* image stays valid until the rank is written. */
int ck__save_rank_image(ck_save *s, uint64_t rank, const void *image, ck_err *err);
/* Lays out rank's data file in image (ck__save_rank_bytes(rank) bytes, 4 KiB-aligned
 * for O_DIRECT) from the shards offered for rank, zeros between, and binds it as
 * ck__save_rank_image does. The offered memory is not read again once it returns: in an
 * asynchronous save this copy is the stall. */
int ck__save_copy_rank(ck_save *s, uint64_t rank, void *image, ck_err *err);
/* The copy alone, before ck__save_prepare (or ck__save_share or join): the layout is
 * the plan's, known once every tensor is declared. Bind image afterwards with
 * ck__save_rank_image. In an asynchronous save the prepare, which makes directories,
 * can then run after the stall. */
int ck__save_fill_rank(const ck_save *s, uint64_t rank, void *image, ck_err *err);
/* Binds rank's file to sources instead of an image: src holds one per plan shard
 * (nsrc of them; those rank writes are read, by memory or fill, when the file is
 * written, which copies them block by block while earlier blocks are written). */
int ck__save_rank_sources(ck_save *s, uint64_t rank, const ck__shard_src *src, uint32_t nsrc,
                         ck_err *err);
int ck__save_write_rank(ck_save *s, uint64_t rank, ck_err *err);
/* Hears, by file name, the bytes of each data file from its start whose writes have
 * landed, as they grow (ck__writer_opts.landed, on the writing thread): what a
 * replication beside the write reads (decision 0204). Before the first write. */
void ck__save_on_landed(ck_save *s, void (*fn)(void *arg, const char *file, uint64_t bytes),
                        void *arg);
/* The data file of rank (its name and size): 1, or 0 when the rank writes none. After
 * ck__save_prepare. */
int ck__save_rank_file(const ck_save *s, uint64_t rank, ck_file *out);
/* The directory the data files are written in, ROOT/.pending/NAME.TOKEN, once
 * prepared (or shared, or joined). */
const char *ck__save_dir(const ck_save *s);
/* The block size its data files are hashed by, once prepared. */
uint32_t ck__save_block_size(const ck_save *s);

/* ---- one save, many engines: part records ----
 * How the engines that share a save meet (async/saver.c, save/meet.h): every engine
 * builds the same ck_save, then:
 *
 *   rank 0:  ck__save_share(s, token, &err);         // creates ROOT/.pending/NAME.TOKEN
 *            ... token reaches the other ranks through the caller ...
 *   others:  ck__save_join(s, token, rank, &err);    // the same directory
 *   each:    ck__save_copy_rank(s, rank, image, &err) or offer shards/boxes;
 *            ck__save_write_rank(s, rank, &err);      // this rank's file, durable
 *            ck__save_part(s, rank, &outcome, &rec, &len, &err);   // its part record
 *            ranks other than 0: ck_save_abort(s)   // frees s, removes nothing
 *   rank 0:  for each rank's record: ck__save_adopt(s, rec, len, &err);
 *            ck_save_commit(s, &stats, &err);
 *
 * A part record (docs/FORMAT.md, "Part records") is versioned bytes that name the
 * save (checkpoint name and token), the rank, its outcome, its file's size and block
 * hashes; holding it is the proof that the rank's file is durable. ck__save_adopt
 * checks every field against rank 0's own plan and refuses what does not match (a
 * record of another save, rank or layout, truncated, forged counts) with -EBADMSG
 * naming the rank, or returns the rank's own failure when its outcome was one.
 * ck_save_commit of a shared save refuses to publish while a rank's file is neither
 * written by this process nor adopted, naming that rank, and then removes the pending
 * directory: rank 0 calls it once every rank has stopped writing. A shared save's
 * ck_save_abort never removes anything; what a dead save leaves is .pending debris for
 * recovery (ck__save_discard is the coordinator's removal). Blobs live in the manifest,
 * which rank 0 writes: rank 0 may add them (ck_save_blob) until it commits, also those
 * other engines' ranks produced and carried over in their part files. */
/* Rank 0: fixes the layout, creates the pending directory under a fresh token and
 * writes the token (12 hex digits) into token. */
int ck__save_share(ck_save *s, char token[CK_TOKEN_MAX], ck_err *err);
/* Every other rank: the same, in the directory rank 0 created under token (made when
 * missing). */
int ck__save_join(ck_save *s, const char *token, uint64_t rank, ck_err *err);
/* This rank's part record, malloc'd into *rec (*len bytes): outcome is its
 * ck__save_write_rank's result (code 0) or whatever failed it. A rank that writes no
 * file has a record too. */
int ck__save_part(ck_save *s, uint64_t rank, const ck_err *outcome, void **rec, size_t *len,
                 ck_err *err);
/* Rank 0: takes the rank's file as written, with the hashes its record carries. A
 * rank's record is adopted at most once; rank 0's own record may be adopted or not
 * (its file is written by this process). */
int ck__save_adopt(ck_save *s, const void *rec, size_t len, ck_err *err);

/* A tiered save (docs/FORMAT.md, "Local copies of a save"): each engine commits, in its
 * own root (its node's local tier), a copy holding the files of the ranks it wrote
 * (mine, per rank) and the whole manifest, marked by NAME/copy naming source when it
 * holds fewer than all. The coordinator (in NULL) builds the manifest from every rank's
 * adopted record, as ck_save_commit does, and gets its bytes in *out (malloc'd, *out_len)
 * to hand to the others; the others pass those bytes as in (in_len), written byte for
 * byte. 0 once the rename happened; frees s in every case; nothing is visible on an
 * error (the pending directory is removed). */
int ck__save_commit_copy(ck_save *s, const char *source, const bool *mine, const void *in,
                         size_t in_len, void **out, size_t *out_len, ck_err *err);

/* The plan fixed by ck__save_prepare, ck__save_share or ck__save_join; NULL before. */
const ck__plan *ck__save_plan(const ck_save *s);

/* The coordinator of a save shared by several daemons gives it up: unlike
 * ck_save_abort of a shared save, it removes the pending directory (the other
 * daemons were told to stop, and their writes into it fail), then frees s. */
void ck__save_discard(ck_save *s);

#endif
