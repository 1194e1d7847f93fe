/* tier_load - test machinery: restores a checkpoint through ckptd's tiers as a loader
 * does (ck/client.h), and checks every byte against a complete copy of it:
 *
 *   tier_load SOCKET ROOT TRUTH WHAT [--newest] [--mesh N] [--rank R] [--hold FILE]
 *
 * Rank R (default 0) of a 1-D mesh of N ranks (default: the checkpoint's rank count)
 * wants, of each tensor, its chunk of the rows (torch.chunk over N). It resolves WHAT
 * (a name, or with --newest the newest WHAT<step>) through ckptd at SOCKET, opens the
 * checkpoint (ck_client_restore_open), asks for the files its boxes touch
 * (ck_client_restore_fetch), loads them (ck_load_many) and compares them with the
 * same boxes read from TRUTH/NAME, a complete copy of the checkpoint that no daemon
 * sees. It prints what it resolved ("resolved: NAME", "why: ..."), where each file it
 * needs is read from ("reads rank-00002.dat from DIR"), and "rank R: N tensors equal
 * to the saved data", and what the restore took before the comparison ("restored NAME:
 * B bytes; resolve, fetch, load (verified), total seconds, GB/s": bench/restore-tiers.sh
 * times the tiers with it). With --hold it then keeps its connection to the daemon open
 * ("holding") until FILE exists (60 s at most), as a loader still reading would. Exit 0
 * equal, 1 a failure (the error on stdout), 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ck/client.h"
#include "ck/load.h"

typedef struct items {
    ck_load_item *v;
    size_t n;
    uint64_t mesh, rank, bytes;
} items;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int add(const ck_tensor *t, void *arg)
{
    items *it = arg;
    ck_load_item *v = realloc(it->v, (it->n + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    it->v = v;
    ck_load_item *x = &v[it->n++];
    *x = (ck_load_item){ .tensor = strdup(t->name), .box = { .ndim = t->ndim } };
    uint64_t rows = t->ndim ? t->shape[0] : 1, chunk = (rows + it->mesh - 1) / it->mesh;
    uint64_t lo = chunk * it->rank < rows ? chunk * it->rank : rows;
    for (int d = 0; d < t->ndim; d++)
        x->box.len[d] = t->shape[d];
    if (t->ndim) {
        x->box.off[0] = lo;
        x->box.len[0] = lo + chunk < rows ? chunk : rows - lo;
    }
    x->len = ck_box_numel(&x->box) * ck_dtype_size(t->dtype);
    x->dst = malloc(x->len + 1);
    it->bytes += x->len;
    return x->tensor && x->dst ? 0 : -ENOMEM;
}

static int fail(const char *what, ck_err *err)
{
    printf("error: %s: %s\n", what, ck_err_msg(err));
    return 1;
}

/* The load of rank it.rank through cl, compared with the truth; 0 equal. */
static int restore(ck_client *cl, const char *truth_root, const char *what, bool newest,
                   items *it)
{
    ck_err err = { 0 };
    char name[CK_NAME_MAX], why[CK_ERR_MSG_MAX];
    ck_ckpt *ck = NULL, *truth = NULL;
    int bad = 0;
    double t0 = now();
    if (ck_client_resolve(cl, what, newest, name, why, sizeof why, &err) < 0)
        return fail("resolve", &err);
    double t1 = now();
    printf("resolved: %s\n", name);
    if (why[0])
        printf("why: %s\n", why);
    if (ck_client_restore_open(cl, name, &ck, &err) < 0)
        return fail("restore_open", &err);
    if (!it->mesh)
        it->mesh = ck_get_info(ck)->n_files;
    uint8_t need[4096];
    if (ck_tensors_each(ck, add, it, &err) != 0)
        bad = fail("tensors", &err);
    else if (ck_client_restore_fetch(cl, &ck, it->v, it->n, &err) < 0)
        bad = fail("restore_fetch", &err);
    double t2 = now();
    if (!bad && (ck_get_info(ck)->n_files > sizeof need ||
                 ck_load_files(ck, it->v, it->n, need, &err) < 0))
        bad = fail("load_files", &err);
    for (uint32_t f = 0; !bad && f < ck_get_info(ck)->n_files; f++) {
        char path[4096];
        if (need[f] && ck_file_path(ck, f, path, sizeof path) == 0)
            printf("reads %s from %.*s\n", ck_file_get(ck, f)->name,
                   (int)(strlen(path) - strlen(ck_file_get(ck, f)->name) - 1), path);
    }
    if (!bad && ck_load_many(ck, it->v, it->n, &err) < 0)
        bad = fail("load", &err);
    double t3 = now();
    if (!bad)
        printf("restored %s: %llu bytes; resolve %.3f s, fetch %.3f s, load (verified) "
               "%.3f s, total %.3f s, %.2f GB/s\n", name, (unsigned long long)it->bytes,
               t1 - t0, t2 - t1, t3 - t2, t3 - t0, (double)it->bytes / (t3 - t0) / 1e9);
    if (!bad && ck_open(truth_root, name, &truth, &err) < 0)
        bad = fail("the truth", &err);
    for (size_t i = 0; !bad && i < it->n; i++) {
        ck_load_item want = it->v[i];
        want.dst = malloc(want.len + 1);
        if (!want.dst || ck_load_many(truth, &want, 1, &err) < 0)
            bad = fail("reading the truth", &err);
        else if (memcmp(want.dst, it->v[i].dst, want.len))
            bad = printf("error: tensor %s: rank %llu's box differs from the saved data\n",
                         it->v[i].tensor, (unsigned long long)it->rank) > 0;
        free(want.dst);
    }
    if (!bad)
        printf("rank %llu: %zu tensors equal to the saved data\n",
               (unsigned long long)it->rank, it->n);
    ck_close(truth);
    ck_close(ck);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: tier_load SOCKET ROOT TRUTH WHAT [--newest] [--mesh N] "
                "[--rank R] [--hold FILE]\n");
        return 2;
    }
    bool newest = false;
    uint64_t mesh = 0, rank = 0;
    const char *hold = NULL;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--newest"))
            newest = true;
        else if (!strcmp(argv[i], "--mesh") && i + 1 < argc)
            mesh = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rank") && i + 1 < argc)
            rank = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--hold") && i + 1 < argc)
            hold = argv[++i];
        else
            return fprintf(stderr, "tier_load: %s?\n", argv[i]), 2;
    }
    ck_err err = { 0 };
    ck_client *cl;
    if (ck_client_open(&cl, argv[2], &(ck_client_opts){ .socket = argv[1] }, &err) < 0)
        return fail("ck_client_open", &err);
    items it = { .mesh = mesh, .rank = rank };
    int bad = restore(cl, argv[3], argv[4], newest, &it);
    if (hold) {
        printf("holding\n");
        fflush(stdout);
        for (int i = 0; i < 3000 && access(hold, F_OK) != 0; i++)
            usleep(20000);
    }
    for (size_t i = 0; i < it.n; i++) {
        free((void *)it.v[i].tensor);
        free(it.v[i].dst);
    }
    free(it.v);
    ck_client_close(cl);
    return bad;
}
