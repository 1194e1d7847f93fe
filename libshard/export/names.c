/* names.c - the model's prefix and key maps (see export/names.h). */
#include "export/names.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The model's prefixes looked for, in the shapes a DCP state dict takes. */
static const char *const model_prefixes[] = { "app.model.", "model." };
#define NPREFIX (sizeof model_prefixes / sizeof *model_prefixes)

typedef struct prefix_count {
    size_t n[NPREFIX];
    ck_err *err;
} prefix_count;

static int count_prefixes(const ck_tensor *t, void *arg)
{
    prefix_count *c = arg;
    char key[CK_NAME_MAX];
    size_t klen;
    if (ck_key_decode(t->name, key, sizeof key, &klen) < 0)
        return ck_err_set(c->err, -EINVAL, "tensor %s: its name has a malformed escape", t->name);
    for (size_t i = 0; i < NPREFIX; i++)
        c->n[i] += strncmp(key, model_prefixes[i], strlen(model_prefixes[i])) == 0;
    return 0;
}

int ck_export_model_prefix(ck_ckpt *ck, char *out, size_t len, ck_err *err)
{
    prefix_count c = { .err = err };
    int r = ck_tensors_each(ck, count_prefixes, &c, err);
    if (r < 0)
        return r;
    const char *name = ck_get_info(ck)->name;
    if (c.n[0] && c.n[1])
        return ck_err_set(err, -EINVAL, "checkpoint %s: tensors lie under both '%s' (%zu) and "
                          "'%s' (%zu): say which is the model's with a prefix", name,
                          model_prefixes[0], c.n[0], model_prefixes[1], c.n[1]);
    for (size_t i = 0; i < NPREFIX; i++) {
        if (c.n[i]) {
            snprintf(out, len, "%s", model_prefixes[i]);
            return 0;
        }
    }
    return ck_err_set(err, -ENOENT, "checkpoint %s: no tensor lies under '%s' or '%s', where "
                      "a DCP state dict keeps the model: give the model's prefix ('' for keys "
                      "at the top level)", name, model_prefixes[0], model_prefixes[1]);
}

typedef struct pattern {
    const char *head, *tail;      /* FROM around its '*' */
    size_t head_len, tail_len;
    const char *to;               /* NULL: leave the tensor out */
} pattern;

struct ck_key_map {
    json_t *root;                 /* owns every string below; its exact rules by key */
    pattern *pat;                 /* the patterns, in the file's order */
    size_t npat;
};

void ck_key_map_free(ck_key_map *m)
{
    if (!m)
        return;
    json_decref(m->root);
    free(m->pat);
    free(m);
}

int ck_key_map_parse(const char *json, size_t len, const char *what, ck_key_map **out,
                     ck_err *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return ck_err_set(err, -EINVAL, "key map %s: line %d: %s", what, je.line, je.text);
    ck_key_map *m = calloc(1, sizeof *m);
    if (m)
        m->pat = calloc(json_is_object(root) ? json_object_size(root) + 1 : 1, sizeof *m->pat);
    if (!m || !m->pat) {
        free(m);
        json_decref(root);
        return ck_err_set(err, -ENOMEM, "key map %s: out of memory", what);
    }
    m->root = root;
    if (!json_is_object(root)) {
        ck_key_map_free(m);
        return ck_err_set(err, -EINVAL, "key map %s: not a JSON object of \"FROM\": \"TO\" "
                          "rules", what);
    }
    const char *from;
    json_t *v;
    /* jansson keeps an object's members in the file's order: the patterns' order. */
    json_object_foreach(root, from, v) {
        const char *star = strchr(from, '*'), *to = json_string_value(v);
        const char *why = !json_is_string(v) && !json_is_null(v) ? "is neither a string nor null"
                        : star && strchr(star + 1, '*') ? "has more than one '*'"
                        : to && strchr(to, '*') && (!star || strchr(strchr(to, '*') + 1, '*'))
                            ? "has a '*' in TO without one in FROM, or more than one"
                        : to && !to[0] ? "renames to an empty key"
                        : NULL;
        if (why) {
            /* The message first: the rule's text belongs to the map. */
            int r = ck_err_set(err, -EINVAL, "key map %s: rule \"%.200s\" %s", what, from, why);
            ck_key_map_free(m);
            return r;
        }
        if (star)
            m->pat[m->npat++] = (pattern){ .head = from, .head_len = (size_t)(star - from),
                                           .tail = star + 1, .tail_len = strlen(star + 1),
                                           .to = to };
    }
    *out = m;
    return 0;
}

int ck_key_map_load(const char *path, ck_key_map **out, ck_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rbe");
    if (!f)
        return ck_err_set(err, -errno, "key map %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int r = 0;
    for (;;) {
        if (len == cap) {
            /* A key map names each tensor once; far below this even for huge models. */
            char *nb = cap < (64u << 20) ? realloc(buf, cap = cap ? 2 * cap : 65536) : NULL;
            if (!nb) {
                r = ck_err_set(err, -EFBIG, "key map %s: larger than 64 MiB or out of memory",
                               path);
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                r = ck_err_set(err, -EIO, "key map %s: read error", path);
            break;
        }
    }
    fclose(f);
    if (r == 0)
        r = ck_key_map_parse(buf, len, path, out, err);
    free(buf);
    return r;
}

static int put(char *out, size_t len, const char *key, ck_err *err, const char *a, size_t alen,
               const char *b, size_t blen, const char *c)
{
    size_t clen = strlen(c);
    if (alen + blen + clen >= len)
        return ck_err_set(err, -ENAMETOOLONG, "key %s: the key map makes it longer than %zu "
                          "bytes", key, len - 1);
    memcpy(out, a, alen);
    memcpy(out + alen, b, blen);
    memcpy(out + alen + blen, c, clen + 1);
    return 1;
}

int ck_key_map_rename(void *arg, const char *key, char *out, size_t len, ck_err *err)
{
    const ck_key_map *m = arg;
    json_t *exact = json_object_get(m->root, key);
    /* An exact rule's FROM has no '*'; a member with one is a pattern, not a key. */
    if (exact && !strchr(key, '*')) {
        const char *to = json_string_value(exact);
        return to ? put(out, len, key, err, to, strlen(to), "", 0, "") : 0;
    }
    size_t klen = strlen(key);
    for (size_t i = 0; i < m->npat; i++) {
        const pattern *p = &m->pat[i];
        if (klen < p->head_len + p->tail_len || strncmp(key, p->head, p->head_len) != 0 ||
            strcmp(key + klen - p->tail_len, p->tail) != 0)
            continue;
        if (!p->to)
            return 0;
        const char *star = strchr(p->to, '*');
        if (!star)
            return put(out, len, key, err, p->to, strlen(p->to), "", 0, "");
        return put(out, len, key, err, p->to, (size_t)(star - p->to), key + p->head_len,
                   klen - p->head_len - p->tail_len, star + 1);
    }
    return put(out, len, key, err, key, klen, "", 0, "");
}
