/* export/names.h - what an export calls each tensor: the model's prefix in a training
 * state dict, and key maps.
 *
 * A DCP state dict holds more than the model: get_state_dict's model and optimizer
 * dicts saved as {"model": ..., "optim": ...} give keys "model.<fqn>" and
 * "optim.state.<fqn>.exp_avg", and a Stateful app object saved as {"app": ...} (the
 * shape of DCP's own tutorial) gives "app.model.<fqn>". A model-only export takes the
 * tensors under the model's prefix and cuts it off, so that the keys are the model's
 * own state_dict() keys, as Hugging Face's from_pretrained wants them.
 */
#ifndef CK_EXPORT_NAMES_H
#define CK_EXPORT_NAMES_H

#include <stddef.h>

#include "ck/ckpt.h"

/* What the export calls a tensor: called with its key (the decoded state-dict key, the
 * prefix cut off), once per tensor, on the thread that called ck_consolidate and
 * before any file is written. Returns 1 with the new key in out (len bytes), 0 to
 * leave the tensor out, or a negative errno with err filled. */
typedef int (*ck_rename_fn)(void *arg, const char *key, char *out, size_t len, ck_err *err);

/* The prefix under which the model's tensors lie ("app.model." or "model."), found
 * from the checkpoint's (decoded) keys: the one of those two that some tensor has. 0
 * with the prefix in out; -ENOENT when neither is there, -EINVAL when both are, each
 * with a message that names the prefixes looked for and says to give one. */
int ck_export_model_prefix(ck_ckpt *ck, char *out, size_t len, ck_err *err);

/* A key map renames the export's keys. Its text is one JSON object of rules
 * "FROM": "TO" or "FROM": null:
 *   - a FROM without '*' is a key; a FROM with one '*' is a pattern, the '*' matching
 *     any run of characters (empty too), and a '*' in TO stands for what it matched;
 *   - a key's rule is its exact one if there is one, else the first pattern (in the
 *     file's order) it matches; a key that no rule matches keeps its name;
 *   - null leaves the tensor out of the export.
 * Example: {"optimizer.*": null, "tok_embeddings.weight": "model.embed_tokens.weight",
 *           "layers.*": "model.layers.*"}. */
typedef struct ck_key_map ck_key_map;

/* Parses a key map from len bytes of JSON; what names it in messages (a file name).
 * -EINVAL with a message naming the rule that is wrong. */
int ck_key_map_parse(const char *json, size_t len, const char *what, ck_key_map **out,
                     ck_err *err);
/* Reads and parses the key map file at path. */
int ck_key_map_load(const char *path, ck_key_map **out, ck_err *err);
void ck_key_map_free(ck_key_map *m);

/* A ck_rename_fn over a ck_key_map (arg). */
int ck_key_map_rename(void *arg, const char *key, char *out, size_t len, ck_err *err);

#endif
