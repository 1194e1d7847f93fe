/* layout.c - every name of the layout on disk, made and read here only (see
 * format/layout.h and docs/FORMAT.md, "Directory layout"). */
#include "format/layout.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MEET_SUFFIX "-meet"
#define REMOVED_SUFFIX "-removed"
#define LOCK_SUFFIX ".lock"
#define ENGINE_PREFIX ".ckptd."

static const char *const engine_suffix[] = {
    [CK_ENGINE_LOCK] = LOCK_SUFFIX, [CK_ENGINE_BEAT] = ".beat", [CK_ENGINE_PEER] = ".peer",
    [CK_ENGINE_DRAIN] = ".drain", [CK_ENGINE_DRAINS] = ".drains",
};

/* The longest name made of a checkpoint name, .pending/NAME.TOKEN-meet, fits a file
 * name (ck/ckpt.h, CK_CKPT_NAME_LEN). */
_Static_assert(CK_CKPT_NAME_LEN + 1 + (CK_TOKEN_MAX - 1) + sizeof MEET_SUFFIX - 1 <= 255,
               "a meeting's name must fit NAME_MAX");

static int make(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int make(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int ck__name_save(const char *name, const char *token, char *out, size_t len)
{
    return make(out, len, "%s/%s.%s", CK_PENDING, name, token);
}

int ck__name_meet(const char *name, const char *token, char *out, size_t len)
{
    return make(out, len, "%s/%s.%s" MEET_SUFFIX, CK_PENDING, name, token);
}

int ck__name_removed(const char *name, const char *token, char *out, size_t len)
{
    return make(out, len, "%s/%s.%s" REMOVED_SUFFIX, CK_PENDING, name, token);
}

void ck__name_token(uint64_t bits, char *token)
{
    snprintf(token, CK_TOKEN_MAX, "%012llx", (unsigned long long)(bits & 0xffffffffffffull));
}

bool ck__token_ok(const char *token)
{
    return strlen(token) == CK_TOKEN_MAX - 4 &&
           strspn(token, "0123456789abcdef") == CK_TOKEN_MAX - 4;
}

int ck__name_save_lock(const char *name, char *out, size_t len)
{
    return make(out, len, "%s/%s" LOCK_SUFFIX, CK_PENDING, name);
}

int ck__name_manifest(const char *dir, char *out, size_t len)
{
    return make(out, len, "%s/%s", dir, CK_MANIFEST);
}

void ck__name_data_file(bool ref, uint64_t index, char *out)
{
    snprintf(out, CK_FILE_NAME_MAX, "%s-%05llu.dat", ref ? "ref" : "rank",
             (unsigned long long)index);
}

int ck__name_engine(const char *id, ck__engine_file kind, char *out, size_t len)
{
    return make(out, len, ENGINE_PREFIX "%s%s", id, engine_suffix[kind]);
}

static const char *const meet_prefix[] = {
    [CK_MEET_PLAN] = "plan", [CK_MEET_JOIN] = "join.", [CK_MEET_PART] = "part.",
    [CK_MEET_FAILED] = "failed.", [CK_MEET_TIER] = "tier", [CK_MEET_COPY] = "copy.",
    [CK_MEET_REPL] = "repl.", [CK_MEET_DRAIN] = "drain.", [CK_MEET_SETTLED] = "settled.",
    [CK_MEET_SHARE] = "share.",
};

const char *ck__meet_prefix(ck__meet_file kind)
{
    return kind < CK_MEET_OTHER ? meet_prefix[kind] : "";
}

int ck__name_meet_file(ck__meet_file kind, const char *id, uint32_t seq, char *out, size_t len)
{
    if (kind == CK_MEET_PLAN || kind == CK_MEET_TIER)
        return make(out, len, "%s", meet_prefix[kind]);
    if (kind == CK_MEET_PART)
        return make(out, len, "%s%s.%u", meet_prefix[kind], id, seq);
    return make(out, len, "%s%s", ck__meet_prefix(kind), id);
}

int ck__name_tmp(const char *name, char *out, size_t len)
{
    return make(out, len, ".%s.tmp", name);
}

int ck__name_tmp_unique(const char *file, uint64_t bits, char *out, size_t len)
{
    char token[CK_TOKEN_MAX];
    ck__name_token(bits, token);
    return make(out, len, "%s.%s.tmp", file, token);
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

ck__meet_file ck__meet_file_of(const char *file, char *id)
{
    if (!strcmp(file, meet_prefix[CK_MEET_PLAN]))
        return CK_MEET_PLAN;
    if (!strcmp(file, meet_prefix[CK_MEET_TIER]))
        return CK_MEET_TIER;
    for (int k = CK_MEET_JOIN; k < CK_MEET_OTHER; k++) {
        size_t p = strlen(meet_prefix[k]);
        if (k == CK_MEET_TIER || strncmp(file, meet_prefix[k], p) || !file[p])
            continue;
        const char *rest = file + p, *dot = k == CK_MEET_PART ? strrchr(rest, '.') : NULL;
        size_t n = dot ? (size_t)(dot - rest) : strlen(rest);
        if (n == 0 || n >= CK_NODE_ID_MAX)
            return CK_MEET_OTHER;
        if (id)
            snprintf(id, CK_NODE_ID_MAX, "%.*s", (int)n, rest);
        return (ck__meet_file)k;
    }
    return CK_MEET_OTHER;
}

ck__pending_kind ck__pending_entry(const char *entry, char *name, char *token)
{
    size_t n = strlen(entry);
    ck__pending_kind kind = ends_with(entry, n, MEET_SUFFIX)    ? CK_PEND_MEET
                          : ends_with(entry, n, REMOVED_SUFFIX) ? CK_PEND_REMOVED
                          : ends_with(entry, n, LOCK_SUFFIX)    ? CK_PEND_LOCK
                                                                : CK_PEND_SAVE;
    size_t end = kind == CK_PEND_MEET ? n - strlen(MEET_SUFFIX)
               : kind == CK_PEND_REMOVED ? n - strlen(REMOVED_SUFFIX) : n;
    /* NAME.TOKEN: the token is what follows the last dot, and holds none. */
    const char *dot = NULL;
    for (size_t i = 0; i < end; i++)
        if (entry[i] == '.')
            dot = entry + i;
    if (!dot || dot == entry || (size_t)(dot - entry) >= CK_NAME_MAX)
        return CK_PEND_OTHER;
    size_t tok = end - (size_t)(dot - entry) - 1;
    if (kind != CK_PEND_LOCK && (tok == 0 || tok >= CK_TOKEN_MAX))
        return CK_PEND_OTHER;
    if (name)
        snprintf(name, CK_NAME_MAX, "%.*s", (int)(dot - entry), entry);
    if (token)
        snprintf(token, CK_TOKEN_MAX, "%.*s", kind == CK_PEND_LOCK ? 0 : (int)tok, dot + 1);
    return kind;
}

/* rank-NNNNN.dat or ref-NNNNN.dat (five digits or more). */
static bool is_data_file(const char *file)
{
    size_t p = !strncmp(file, "rank-", 5) ? 5 : !strncmp(file, "ref-", 4) ? 4 : 0;
    size_t d = p;
    while (p && file[d] >= '0' && file[d] <= '9')
        d++;
    return p && d > p && !strcmp(file + d, ".dat");
}

bool ck__made_by_save(ck__pending_kind kind, const char *file)
{
    size_t n = strlen(file);
    if (kind == CK_PEND_MEET)
        return ck__meet_file_of(file, NULL) != CK_MEET_OTHER ||
               (file[0] == '.' && n > 5 && ends_with(file, n, ".tmp"));
    return !strcmp(file, CK_MANIFEST) || !strcmp(file, CK_COPY_FILE) || is_data_file(file);
}

bool ck__engine_file_of(const char *name, ck__engine_file kind, char *id)
{
    const char *suffix = engine_suffix[kind];
    size_t n = strlen(name), p = strlen(ENGINE_PREFIX), s = strlen(suffix);
    if (n <= p + s || strncmp(name, ENGINE_PREFIX, p) || !ends_with(name, n, suffix) ||
        n - p - s >= CK_NODE_ID_MAX)
        return false;
    snprintf(id, CK_NODE_ID_MAX, "%.*s", (int)(n - p - s), name + p);
    return true;
}
