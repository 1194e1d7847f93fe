/* fz_mdb.c - see fz_mdb.h. */
#include "fz_mdb.h"

#include <ftw.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[512];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void rm_scratch(void)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fz_scratch(void)
{
    if (!dir[0]) {
        /* tmpfs when there is one: the targets write a file per input */
        const char *t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(rm_scratch);
    }
    return dir;
}

static bool take(const uint8_t **p, size_t *left, size_t n, const uint8_t **out)
{
    if (*left < n)
        return false;
    *out = *p;
    *p += n;
    *left -= n;
    return true;
}

int fz_mdb_build(const char *file, const char *const *dbs, int ndbs, const uint8_t *data,
                 size_t size)
{
    char path[1024], lock[1040];
    snprintf(path, sizeof path, "%s/%s", fz_scratch(), file);
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(path);
    unlink(lock);
    MDB_env *env;
    MDB_txn *txn;
    if (mdb_env_create(&env) != MDB_SUCCESS)
        return -1;
    mdb_env_set_maxdbs(env, (MDB_dbi)ndbs);
    mdb_env_set_mapsize(env, (size_t)64 << 20);
    if (mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644) != MDB_SUCCESS ||
        mdb_txn_begin(env, NULL, 0, &txn) != MDB_SUCCESS) {
        mdb_env_close(env);
        return -1;
    }
    MDB_dbi dbi[16];
    for (int i = 0; i < ndbs; i++)
        if (mdb_dbi_open(txn, dbs[i], MDB_CREATE, &dbi[i]) != MDB_SUCCESS) {
            mdb_txn_abort(txn);
            mdb_env_close(env);
            return -1;
        }
    const uint8_t *p = data, *b;
    size_t left = size;
    while (take(&p, &left, 2, &b)) {
        int db = b[0] % ndbs;
        const uint8_t *key, *vl, *val;
        if (!take(&p, &left, b[1], &key) || !take(&p, &left, 2, &vl))
            break;
        size_t vlen = (size_t)vl[0] | (size_t)vl[1] << 8;
        if (!take(&p, &left, vlen, &val))
            break;
        MDB_val k = { .mv_size = b[1], .mv_data = (void *)key };
        MDB_val v = { .mv_size = vlen, .mv_data = (void *)val };
        if (k.mv_size)
            mdb_put(txn, dbi[db], &k, &v, 0);
    }
    int rc = mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc == MDB_SUCCESS ? 0 : -1;
}

int fz_mdb_dump(const char *path, const char *const *dbs, int ndbs, FILE *out)
{
    MDB_env *env;
    MDB_txn *txn;
    if (mdb_env_create(&env) != MDB_SUCCESS)
        return -1;
    mdb_env_set_maxdbs(env, (MDB_dbi)ndbs);
    if (mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK | MDB_RDONLY, 0) != MDB_SUCCESS ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != MDB_SUCCESS) {
        mdb_env_close(env);
        return -1;
    }
    int r = 0;
    for (int i = 0; i < ndbs && r == 0; i++) {
        MDB_dbi dbi;
        MDB_cursor *cur;
        if (mdb_dbi_open(txn, dbs[i], 0, &dbi) != MDB_SUCCESS)
            continue;
        if (mdb_cursor_open(txn, dbi, &cur) != MDB_SUCCESS) {
            r = -1;
            break;
        }
        MDB_val k, v;
        for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (k.mv_size > 255 || v.mv_size > 65535)
                continue;          /* not expressible; real records are far smaller */
            uint8_t h[2] = { (uint8_t)i, (uint8_t)k.mv_size };
            uint8_t l[2] = { (uint8_t)v.mv_size, (uint8_t)(v.mv_size >> 8) };
            fwrite(h, 1, 2, out);
            fwrite(k.mv_data, 1, k.mv_size, out);
            fwrite(l, 1, 2, out);
            fwrite(v.mv_data, 1, v.mv_size, out);
        }
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return ferror(out) ? -1 : r;
}
