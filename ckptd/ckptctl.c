/* ckptctl - asks a running ckptd what it is doing (status), where the copies of
 * checkpoints are and whether each can be restored (tiers), and what it drains to the
 * durable tier, asking for a drain (drain); waiting for its answer no
 * longer than --daemon-timeout (a stopped daemon must not hang the operator's shell);
 * and, by hand, what a daemon's peer service does for its peers: list a node's copies,
 * push a copy to a node as a replica, fetch files of a copy from a node (ckptctl
 * peer). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "async/proto.h"
#include "kd.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckptctl status (--socket PATH | --root DIR) [--daemon-timeout SECS]\n"
"       ckptctl tiers (--socket PATH | --root DIR) [NAME] [--daemon-timeout SECS]\n"
"       ckptctl drain (--socket PATH | --root DIR) [NAME [--offer]]\n"
"                     [--daemon-timeout SECS]\n"
"       ckptctl peer inventory PEER [--id ID] [--timeout SECS]\n"
"       ckptctl peer put PEER[,PEER...] --id ID --from LOCAL NAME [--timeout SECS]\n"
"       ckptctl peer get PEER --into DIR NAME (--all | FILE...) [--source ID]\n"
"                        [--id ID] [--timeout SECS] [--checkers N]\n"
"\n"
"status lists the saves in flight in a running ckptd: ranks joined, staged and\n"
"durable, bytes staged and written, write MB/s, connected clients. The socket\n"
"defaults to $CKPTD_SOCKET, else DIR/.ckptd.sock. A daemon that does not answer\n"
"within --daemon-timeout seconds (default $CKPTD_TIMEOUT, else 10) is an error\n"
"naming it.\n"
"\n"
"tiers lists, for checkpoint NAME or every checkpoint, where its copies are (this\n"
"node's local tier, its live peers' local tiers, the durable root), whether each is\n"
"complete or which data files it holds, and whether every data file has a live copy\n"
"(the checkpoint can be restored); and the peers the daemon could not reach. The\n"
"daemon asks its peers, each within its --peer-timeout: --daemon-timeout defaults to\n"
"60 s here.\n"
"\n"
"drain lists the daemon's drains to the durable tier: queued, running (bytes\n"
"copied of all), done, or failed and why; with NAME it first asks the daemon to\n"
"drain checkpoint NAME from the local tiers (--offer: as the save path offers a\n"
"replicated save: every --drain-every'th is drained, by the node whose own copy\n"
"holds its first data file). The drain runs in the background: run drain again to\n"
"see it end.\n"
"\n"
"peer talks to the peer service of a ckptd started with --local-root and\n"
"--peer-listen (docs/PROTOCOL.md, \"Peer protocol\"). PEER is --addr HOST:PORT, or\n"
"--to ID --root DURABLE (the address daemon ID published in DURABLE/.ckptd.ID.peer).\n"
"Each side proves that it holds the job's peer key: --peer-key FILE, else\n"
"$CKPTD_PEER_KEY, else DURABLE/.ckptd.key with --root.\n"
"  inventory  the copies the node holds: its own and its replicas of others'\n"
"  put        sends the copy LOCAL/NAME (the data files it holds) to be kept as a\n"
"             replica of its source (a partial copy's own, else --id); returns once\n"
"             the peer committed it, every block checked on arrival. Several peers\n"
"             (--to B,C or --addr A1,A2) are sent to at once, the copy read once\n"
"             for all of them\n"
"  get        fetches NAME's manifest and data files (--all: every file of its\n"
"             fullest copy there; none: the manifest alone) from a copy the peer\n"
"             holds (of --source when given) into the copy DIR/NAME, every block\n"
"             checked, committed by rename\n"
"  --id ID    this side's daemon id (default: ckptctl)\n"
"  --timeout SECS  the longest the peer may stay silent (default 30)\n"
"  --checkers N    get: threads that check the blocks beside the one writing them\n"
"             (0-8, as ckptd's --peer-checkers; default one per CPU but one)\n"
"Exit status: 0 ok, 1 the transfer failed, 2 usage error, no daemon, or no answer in\n"
"time.\n");
}

static const char *state_name(const ck__proto_ckpt *c)
{
    return c->state == 1   ? "committing"
         : c->state == 3   ? "planning"
         : c->state == 4   ? "settling (committed here, waiting for the commit levels)"
         : c->commit_requested ? "collecting, commit asked"
                               : "collecting";
}

/* Seconds in (0, 86400]; false for anything else. */
static bool seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : 0;
    if (!s || !*s || errno || *end || !(v > 0) || v > 86400)
        return false;
    *out = v;
    return true;
}

/* A copy's line: its name and step first where named. */
static void print_copy(const kd_peer_copy *c, bool named)
{
    static const char *const kind[] = { "own copy", "replica", "fetched" };
    if (named)
        printf("%-28s step %-10llu ", c->name, (unsigned long long)c->step);
    printf("%-8s of ckptd %-16s ", kind[c->kind], c->source);
    if (c->complete) {
        printf("complete (%u data files)\n", c->n_files);
        return;
    }
    printf("partial: %u of %u data files:", c->n_held, c->n_files);
    for (uint32_t f = 0; f < c->n_held; f++)
        printf(" %s", c->held[f]);
    printf("\n");
}

static void print_drains(const kd_drain_rows *d)
{
    static const char *const state[] = { "queued", "running", "done", "failed",
                                         "standing by" };
    printf("policy: --drain-every %u (0: by hand only), --drain-rate ", d->every);
    if (d->rate)
        printf("%llu B/s\n", (unsigned long long)d->rate);
    else
        printf("0 (unpaced)\n");
    if (!d->n)
        printf("no drains\n");
    for (uint32_t i = 0; i < d->n; i++) {
        const kd_drain_row *x = &d->rows[i];
        printf("%s: %s", x->name, state[x->state]);
        if (x->state == KD_DRAIN_RUNNING || x->state == KD_DRAIN_DONE)
            printf(", %llu of %llu bytes", (unsigned long long)x->done,
                   (unsigned long long)x->total);
        printf("%s%s\n", x->why[0] ? ": " : "", x->why);
    }
}

/* The TIERS reply, one checkpoint (name and commit time) after the other. */
static void print_tiers(const kd_tview *t)
{
    static const char *const where[] = { "local", "peer", "durable" };
    size_t lost = 0;
    for (size_t i = 0; i < t->npeers; i++)
        lost += t->peers[i].r < 0;
    printf("%zu peer(s) answered, %zu lost\n", t->npeers - lost, lost);
    for (size_t i = 0; i < t->npeers; i++)
        if (t->peers[i].r < 0)
            printf("lost: ckptd %s: %s\n", t->peers[i].id, t->peers[i].why);
    if (!t->n)
        printf("no copies\n");
    for (size_t i = 0; i < t->n; i++) {
        const kd_peer_copy *c = &t->v[i].c;
        bool first = true;
        for (size_t j = 0; first && j < i; j++)
            first = strcmp(t->v[j].c.name, c->name) || t->v[j].c.time_ns != c->time_ns;
        if (!first)
            continue;
        bool whole = kd_tiers_whole(t, c->name, c->time_ns);
        printf("%s (step %llu, committed at %llu ns): %s\n", c->name,
               (unsigned long long)c->step, (unsigned long long)c->time_ns,
               whole ? "every data file has a live copy" : "some data file has no live copy");
        for (size_t j = i; j < t->n; j++) {
            const kd_tcopy *x = &t->v[j];
            if (strcmp(x->c.name, c->name) || x->c.time_ns != c->time_ns)
                continue;
            printf("  %-7s %-16s ", where[x->where], x->holder[0] ? x->holder : "-");
            if (x->where == KD_AT_DURABLE)
                printf("%s\n", x->c.complete ? "complete" : "partial");
            else
                print_copy(&x->c, false);
        }
    }
}

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    *(uint64_t *)arg = done;
    (void)total;
}

/* Why a peer call's error makes exit status 2 rather than 1: no daemon to talk to, or
 * none that answers, as status says it. */
static bool unreachable(int r)
{
    return r == -ETIMEDOUT || r == -ECONNREFUSED || r == -ECONNRESET || r == -EADDRNOTAVAIL;
}

/* peer put to each peer of the comma-separated list (daemon ids in root with ids, else
 * addresses), the copy FROM/NAME read once for all (kd_peer_put_fan). */
static int put_main(const char *list, bool ids, const char *root, const kd_peer_call *proto,
                    const char *from, const char *name)
{
    char *s = strdup(list);
    kd_fan f = { 0 };
    ck_err err = { 0 };
    bool unknown = false;          /* a daemon id whose address is not to be had */
    int r = s ? kd_fan_open(&f, &err) : ck_err_set(&err, -ENOMEM, "out of memory");
    char *save = NULL;
    for (char *t = r == 0 ? strtok_r(s, ",", &save) : NULL; r == 0 && t;
         t = strtok_r(NULL, ",", &save))
        unknown = (r = kd_fan_add(&f, root, t, ids, proto, &err)) < 0 && r != -E2BIG;
    if (r == 0 && !f.n)
        r = ck_err_set(&err, -EINVAL, "no peer named in '%s'", list);
    if (r == 0)
        r = kd_peer_put_fan(f.to, f.n, from, name);
    for (uint32_t i = 0; i < f.n && err.code == 0; i++)
        if (f.to[i].r == 0)
            printf("%s: committed as a replica at peer %s (%llu bytes sent)\n", name,
                   f.p[i].addr, (unsigned long long)f.p[i].moved);
        else
            fprintf(stderr, "ckptctl: peer put: %s\n", ck_err_msg(&f.to[i].err));
    if (err.code)
        fprintf(stderr, "ckptctl: peer put: %s\n", ck_err_msg(&err));
    free(s);
    kd_fan_free(&f);
    return r == 0 ? 0 : unknown || unreachable(r) ? 2 : 1;
}

/* ckptctl peer VERB ...: one call to a peer service (a put: one or several). */
static int peer_main(int argc, char **argv)
{
    const char *verb = argc > 1 ? argv[1] : "", *addr = NULL, *to = NULL, *root = NULL;
    const char *from = NULL, *into = NULL, *name = NULL, *id = "ckptctl";
    const char *keyfile = getenv("CKPTD_PEER_KEY");
    char found[KD_PEER_ADDR_MAX];
    double timeout = 30;
    unsigned checkers = kd_peer_checkers_default();
    kd_preq ask = { 0 };
    uint64_t moved = 0;
    const char **files = calloc((size_t)argc, sizeof *files);
    uint32_t nfiles = 0;
    int bad = !files;
    for (int i = 2; !bad && i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool opt = true;
        if (!strcmp(a, "--addr") && v) addr = v;
        else if (!strcmp(a, "--to") && v) to = v;
        else if (!strcmp(a, "--root") && v) root = v;
        else if (!strcmp(a, "--peer-key") && v) keyfile = v;
        else if (!strcmp(a, "--from") && v) from = v;
        else if (!strcmp(a, "--into") && v) into = v;
        else if (!strcmp(a, "--id") && v) id = v;
        else if (!strcmp(a, "--source") && v) snprintf(ask.source, sizeof ask.source, "%s", v);
        else if (!strcmp(a, "--timeout") && v) bad = !seconds(v, &timeout);
        else if (!strcmp(a, "--checkers") && v)
            bad = !kd_decimal(v, 0, KD_PEER_CHECKERS, &checkers);
        else if (!strcmp(a, "--all")) ask.all = true, opt = false;
        else if (a[0] == '-') bad = 1;
        else if (!name) name = a, opt = false;
        else files[nfiles++] = a, opt = false;
        i += opt;
    }
    bool put = !strcmp(verb, "put"), get = !strcmp(verb, "get");
    if (bad || (!put && !get && strcmp(verb, "inventory")) || !(addr || (to && root)) ||
        (put && (!from || !name || nfiles)) || (get && (!into || !name || (ask.all && nfiles))) ||
        (!put && !get && name)) {
        free(files);
        usage(stderr);
        return 2;
    }
    ck_err err = { 0 };
    int r = 0;
    uint64_t instance;
    kd_peer_key key;
    if (!keyfile && !root)
        r = ck_err_set(&err, -EINVAL, "no peer key: name the job's with --peer-key FILE (or "
                       "$CKPTD_PEER_KEY), or its durable root with --root");
    else
        r = kd_peer_key_load(keyfile, root, false, &key, &err);
    if (r == 0 && put) {
        free(files);
        kd_peer_call proto = { .id = id, .key = &key, .timeout = (unsigned)(timeout + 0.999),
                               .progress = on_progress };
        return put_main(addr ? addr : to, !addr, root, &proto, from, name);
    }
    if (r == 0 && !addr &&
        (r = kd_addr_lookup(root, to, found, sizeof found, &instance, &err)) == 0)
        addr = found;
    kd_peer_call call = { .addr = addr, .id = id, .key = &key,
                          .timeout = (unsigned)(timeout + 0.999),
                          .checkers = checkers,
                          .progress = on_progress, .arg = &moved };
    if (r == 0 && !put && !get) {
        kd_peer_copy *v;
        size_t n;
        if ((r = kd_peer_inventory(&call, &v, &n, &err)) == 0) {
            printf("%zu cop%s at peer %s\n", n, n == 1 ? "y" : "ies", addr);
            for (size_t i = 0; i < n; i++)
                print_copy(&v[i], true);
            kd_peer_copies_free(v, n);
        }
    } else if (r == 0) {
        snprintf(ask.name, sizeof ask.name, "%s", name);
        ask.n = nfiles;
        ask.files = calloc(nfiles ? nfiles : 1, sizeof *ask.files);
        for (uint32_t i = 0; ask.files && i < nfiles; i++)
            snprintf(ask.files[i].name, sizeof ask.files[i].name, "%s", files[i]);
        if (!ask.files)
            r = ck_err_set(&err, -ENOMEM, "out of memory");
        else if ((r = kd_peer_get(&call, &ask, into, &err)) == 0)
            printf("%s: fetched from peer %s into %s/%s (%llu bytes)\n", name, addr, into, name,
                   (unsigned long long)moved);
        kd_preq_free(&ask);
    }
    free(files);
    if (r < 0)
        fprintf(stderr, "ckptctl: peer %s: %s\n", verb, ck_err_msg(&err));
    return r == 0 ? 0 : !addr || unreachable(r) ? 2 : 1;
}

int main(int argc, char **argv)
{
    const char *sock = getenv("CKPTD_SOCKET"), *env = getenv("CKPTD_TIMEOUT");
    char buf[PATH_MAX];
    double limit = 10;
    if (env && *env && !seconds(env, &limit)) {
        fprintf(stderr, "ckptctl: CKPTD_TIMEOUT=%s: not a number of seconds in (0, 86400]\n",
                env);
        return 2;
    }
    if (argc > 1 && !strcmp(argv[1], "peer"))
        return peer_main(argc - 1, argv + 1);
    bool tiers = argc > 1 && !strcmp(argv[1], "tiers");
    bool drain = argc > 1 && !strcmp(argv[1], "drain"), offer = false;
    const char *name = "";
    if (tiers && !(env && *env))
        limit = 60;
    if (argc < 2 || (strcmp(argv[1], "status") != 0 && !tiers && !drain)) {
        usage(argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? stdout : stderr);
        return argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? 0 : 2;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
            sock = argv[++i];
        } else if (!strcmp(argv[i], "--root") && i + 1 < argc) {
            snprintf(buf, sizeof buf, "%s/.ckptd.sock", argv[++i]);
            sock = buf;
        } else if (!strcmp(argv[i], "--daemon-timeout") && i + 1 < argc) {
            if (!seconds(argv[++i], &limit)) {
                fprintf(stderr, "ckptctl: --daemon-timeout %s: not a number of seconds in "
                        "(0, 86400]\n", argv[i]);
                return 2;
            }
        } else if ((tiers || drain) && !name[0] && argv[i][0] != '-') {
            name = argv[i];
        } else if (drain && !strcmp(argv[i], "--offer")) {
            offer = true;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (offer && !name[0]) {
        usage(stderr);
        return 2;
    }
    if (!sock || !*sock) {
        fprintf(stderr, "ckptctl: no socket: give --socket or --root, or set CKPTD_SOCKET\n");
        return 2;
    }
    ck_err err = { 0 };
    int fd;
    ck__wbuf w = { 0 };
    ck__msg m = { 0 };
    ck__proto_status st;
    double deadline = ck__conn_now() + limit;
    int r = ck__conn_connect_by(sock, deadline, &fd, &err);
    if (r == 0) {
        struct ucred cr = { 0 };
        socklen_t len = sizeof cr;
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
        ck__proto_start(&w, tiers ? CK_MSG_TIERS : drain ? CK_MSG_DRAIN : CK_MSG_STATUS);
        if (tiers || drain)
            ck__put_str(&w, name);
        if (drain)
            ck__put_u8(&w, offer);
        r = ck__proto_end(&w);
        if (r == 0)
            r = ck__conn_send_by(fd, &w, -1, deadline, &err);
        ck__wbuf_free(&w);
        if (r == 0 && (r = ck__conn_recv_by(fd, deadline, deadline, &m, &err)) == 0)
            r = ck_err_set(&err, -ETIMEDOUT, "no answer to %s",
                           tiers ? "TIERS" : drain ? "DRAIN" : "STATUS");
        if (r == -ETIMEDOUT)
            ck_err_set(&err, r, "ckptd at %s (pid %d) did not answer within %.1f s "
                       "(--daemon-timeout)", sock, (int)cr.pid, limit);
        close(fd);
    }
    if (r > 0 && m.type == CK_MSG_ERROR) {
        ck__rbuf rb = ck__rbuf_make(m.payload, m.len);
        char said[CK_NAME_MAX], msg[CK_ERR_MSG_MAX];
        ck__get_str(&rb, said, sizeof said);
        int code = (int)ck__get_u32(&rb);
        ck__get_str(&rb, msg, sizeof msg);
        free(m.payload);
        fprintf(stderr, "ckptctl: ckptd at %s: %s\n", sock,
                ck__rbuf_done(&rb) ? msg : "a malformed ERROR");
        return code == -ENOENT ? 1 : 2;
    }
    if (r > 0 && m.type != (tiers ? CK_MSG_TIERS_OK : drain ? CK_MSG_DRAIN_OK : CK_MSG_STATUS_OK))
        r = ck_err_set(&err, -EPROTO, "ckptd answered with message type %u", m.type);
    kd_tview view;
    kd_drain_rows drains;
    if (r > 0)
        r = tiers ? kd_pw_get_tiers(m.payload, m.len, &view, &err)
            : drain ? kd_pw_get_drains(m.payload, m.len, &drains, &err)
                    : ck__proto_get_status(m.payload, m.len, &st, &err);
    free(m.payload);
    if (r < 0) {
        fprintf(stderr, "ckptctl: %s\n", ck_err_msg(&err));
        return 2;
    }
    if (drain) {
        printf("ckptd at %s\n", sock);
        print_drains(&drains);
        free(drains.rows);
        return 0;
    }
    if (tiers) {
        printf("ckptd at %s\n", sock);
        print_tiers(&view);
        kd_tview_free(&view);
        return 0;
    }
    printf("ckptd at %s: %u client(s), staging %.1f of %.1f MiB in use, %u part(s) waiting "
           "for room\n", sock, st.clients, st.staging_used / 1048576.0,
           st.staging_limit / 1048576.0, st.waiting);
    if (!st.n)
        printf("no saves in flight\n");
    for (uint32_t i = 0; i < st.n; i++) {
        const ck__proto_ckpt *c = &st.ckpts[i];
        printf("%s: %s; ranks %llu joined, %llu staged, %llu durable of %llu; staged %.1f MiB, "
               "written %.1f MiB, %.1f MB/s; %u client(s)\n", c->name, state_name(c),
               (unsigned long long)c->joined, (unsigned long long)c->staged,
               (unsigned long long)c->durable, (unsigned long long)c->world,
               c->bytes_staged / 1048576.0, c->bytes_written / 1048576.0, c->bytes_per_s / 1e6,
               c->clients);
    }
    free(st.ckpts);
    return 0;
}
