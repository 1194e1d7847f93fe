/* ckptd - the checkpoint daemon: takes ranks' staged parts over a Unix socket and
 * writes, hashes, fsyncs and commits them while training goes on (README.md, "ckptd";
 * docs/PROTOCOL.md). */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kd.h"

#include "format/owner.h"
#include "io/rootfs.h"
#include "save/meet.h"
#ifdef KD_TEST_HOOKS
#include "test_engines.h"
#endif

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckptd --root DIR [options]\n"
"\n"
"Serves asynchronous checkpoint saves into DIR over a Unix socket (mode 0600, same\n"
"uid only). Several ckptd, one per node and each with its own --id, may serve one\n"
"root on a shared file system: a save's ranks then go to their own node's daemon\n"
"and the daemon of rank 0 commits once every daemon's parts are durable. At start\n"
"it removes the incomplete saves of dead writers under DIR/.pending and reconciles\n"
"the catalog. SIGTERM: stop accepting, finish the saves whose parts are all\n"
"staged, abort those still waiting for ranks after --drain-timeout, exit 0; a\n"
"second SIGTERM exits at once (status 1).\n"
"\n"
"  --root DIR           the checkpoint root\n"
"  --socket PATH        socket path (default DIR/.ckptd.sock)\n"
"  --staging SIZE       staging memory mapped at once (default 4GiB); parts wait for\n"
"                       room, and one larger than SIZE is refused\n"
"  --plan-memory SIZE   memory for the plans and declarations of the saves in flight\n"
"                       (default 1GiB); a BEGIN whose plan can never fit is refused\n"
"  --io-depth N         1 MiB I/Os in flight per writer (default 32; at least two\n"
"                       hash blocks' worth)\n"
"  --writers N          writer threads, ranks written at once (default 4)\n"
"  --hash-threads N     SHA-256 threads per save (default: one per CPU)\n"
"  --drain-timeout SECS how long a SIGTERM waits for ranks still staging (default 30)\n"
"  --rank-timeout SECS  a save that waits this long for a rank to begin or stage its\n"
"                       part fails, naming the missing ranks (default 300; 0: never)\n"
"  --id ID              this daemon among those serving DIR ([A-Za-z0-9._-], default:\n"
"                       the host name); one ckptd per id and root\n"
"  --part-timeout SECS  how long a save served by several daemons waits for the\n"
"                       parts of the others (default 600), and the peer service a\n"
"                       replica whose sender says it waits for its save\n"
"  --dead-after SECS    another daemon whose heartbeat (DIR/.ckptd.ID.beat) stands\n"
"                       still this long is dead, and its saves fail (default 10)\n"
"  --local-root DIR     this node's local tier: its own copies (DIR/NAME) and the\n"
"                       replicas it keeps for peers (DIR/.replicas/ID/NAME); recovered\n"
"                       at start like DIR\n"
"  --peer-listen ADDR[:PORT]\n"
"                       with --local-root: serve other nodes' daemons over UCX on this\n"
"                       address (default port %d; 0: any free one), published in\n"
"                       DIR/.ckptd.ID.peer (docs/PROTOCOL.md, \"Peer protocol\")\n"
"  --peer-timeout SECS  a peer silent this long in a transfer fails it (default 30)\n"
"  --peer-checkers N    threads that check the SHA-256 of a replica or fetch as it\n"
"                       arrives, beside the one writing it (0-%u; default one per CPU\n"
"                       but one: %u here; 0: the writer checks)\n"
"  --peer-key FILE      with --local-root: the job's peer key, which every daemon of\n"
"                       the job holds and proves in each peer connection (default\n"
"                       $CKPTD_PEER_KEY, else DIR/.ckptd.key, made by the first\n"
"                       daemon that starts on DIR); mode 0600, this user's\n"
"  --replicas F         with --local-root: each node's copy of a save is kept on F\n"
"                       nodes, its own and F-1 peers of its clique (default 1)\n"
"  --jump J             clique members are J nodes apart, outside a failure domain\n"
"                       of J consecutive nodes; a save's node count must be a\n"
"                       multiple of F x J (default 1; docs/decisions/0174)\n"
"  --drain-every K      with --local-root: every K'th checkpoint the save path says is\n"
"                       replicated is copied to DIR (the durable tier) in the\n"
"                       background, by the save's first node, each node writing the\n"
"                       files it holds (default 0: none; ckptctl drain drains one by\n"
"                       hand)\n"
"  --drain-rate RATE    bytes per second this node's drains, and its parts of other\n"
"                       nodes' drains, read from its local tier (e.g. 200MiB; default\n"
"                       0: unpaced), so that they leave the local disk to the saves\n"
"  --keep-local K       with --local-root: keep the copies of the K newest checkpoints\n"
"                       in the local tier, and those a drain is owed (default 0: all)\n"
"  --keep-durable M     keep the M newest checkpoints of each run in DIR (default 0:\n"
"                       all; the newest always stays)\n"
"  --foreground         do not detach\n"
"  --log FILE           log here (default: stderr in the foreground, else DIR/.ckptd.log)\n"
#ifdef KD_TEST_HOOKS
"  --inject-fault SPEC  (ckptd-test only) fail or slow an I/O operation, e.g.\n"
"                       eio@17, enospc@3, short@0, fsync@0, slow@0 (counted over the\n"
"                       daemon's life)\n"
#endif
"  -h, --help           this text\n"
"\n"
"Exit status: 0 stopped by SIGTERM; 1 could not start, failed, or a second SIGTERM;\n"
"2 usage; 3 another ckptd of this id serves DIR (or the socket).\n", KD_PEER_PORT,
            KD_PEER_CHECKERS, kd_peer_checkers_default());
}

static int number(const char *opt, const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    if (kd_decimal(s, lo, hi, out))
        return 0;
    fprintf(stderr, "ckptd: %s %s: not a number in %u..%u\n", opt, s, lo, hi);
    return -EINVAL;
}

/* The host name, made a daemon id: each other byte becomes '_'. */
static void default_id(char *id, size_t cap)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(id, cap, "%s", host[0] ? host : "node");
    for (char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            *p = '_';
    if (id[0] == '.')
        id[0] = '_';
}

#ifdef KD_TEST_HOOKS
/* The test build's --inject-fault: every save's I/O goes through a fault engine
 * (tests/engines/), counted over the daemon's life. The product has none of it. */
static int inject_fault(const char *spec, kd_opts *o)
{
    ck_fault f;
    ck_engine_destroy(o->engine);
    o->engine = NULL;
    if (ck_fault_parse(spec, &f) < 0) {
        fprintf(stderr, "ckptd: --inject-fault %s: expected KIND@N\n", spec);
        return -EINVAL;
    }
    int r = ck_engine_fault_new(ck_engine_default(), f, &o->engine);
    if (r < 0)
        fprintf(stderr, "ckptd: --inject-fault %s: %s\n", spec, strerror(-r));
    return r;
}
#endif

static int parse(int argc, char **argv, kd_opts *o)
{
    enum { O_ROOT = 256, O_SOCKET, O_STAGING, O_DEPTH, O_WRITERS, O_HT, O_FG, O_LOG, O_FAULT,
           O_DRAIN, O_PLAN, O_RANK, O_ID, O_PART_TIMEOUT, O_DEAD_AFTER, O_LOCAL, O_PEER,
           O_PEER_TIMEOUT, O_DRAIN_EVERY, O_DRAIN_RATE, O_KEEP_LOCAL, O_KEEP_DURABLE,
           O_REPLICAS, O_JUMP, O_PEER_KEY, O_PEER_CHECKERS };
    static const struct option lo[] = {
        { "root", 1, 0, O_ROOT }, { "socket", 1, 0, O_SOCKET }, { "staging", 1, 0, O_STAGING },
        { "io-depth", 1, 0, O_DEPTH }, { "writers", 1, 0, O_WRITERS },
        { "hash-threads", 1, 0, O_HT }, { "foreground", 0, 0, O_FG }, { "log", 1, 0, O_LOG },
#ifdef KD_TEST_HOOKS
        { "inject-fault", 1, 0, O_FAULT },
#endif
        { "drain-timeout", 1, 0, O_DRAIN },
        { "plan-memory", 1, 0, O_PLAN }, { "rank-timeout", 1, 0, O_RANK }, { "id", 1, 0, O_ID },
        { "part-timeout", 1, 0, O_PART_TIMEOUT }, { "dead-after", 1, 0, O_DEAD_AFTER },
        { "local-root", 1, 0, O_LOCAL }, { "peer-listen", 1, 0, O_PEER },
        { "peer-timeout", 1, 0, O_PEER_TIMEOUT }, { "peer-key", 1, 0, O_PEER_KEY },
        { "peer-checkers", 1, 0, O_PEER_CHECKERS },
        { "replicas", 1, 0, O_REPLICAS }, { "jump", 1, 0, O_JUMP },
        { "drain-every", 1, 0, O_DRAIN_EVERY }, { "drain-rate", 1, 0, O_DRAIN_RATE },
        { "keep-local", 1, 0, O_KEEP_LOCAL }, { "keep-durable", 1, 0, O_KEEP_DURABLE },
        { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    *o = (kd_opts){ .staging = 4ull << 30, .io_depth = 32, .writers = 4, .drain_timeout = 30,
                 .plan_memory = 1ull << 30, .rank_timeout = 300, .part_timeout = 600,
                 .dead_after = 10, .peer_timeout = 30, .replicas = 1, .jump = 1,
                 .peer_checkers = kd_peer_checkers_default() };
    default_id(o->id, sizeof o->id);
    ck_err err = { 0 };
    int c, r = 0;
    while (r == 0 && (c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_ROOT: o->root = optarg; break;
        case O_SOCKET:
            if (strlen(optarg) >= sizeof o->socket) {
                fprintf(stderr, "ckptd: --socket %s: path too long\n", optarg);
                r = -EINVAL;
            }
            snprintf(o->socket, sizeof o->socket, "%s", optarg);
            break;
        case O_STAGING:
            if ((r = ck_size_parse(optarg, &o->staging, &err)) < 0 || o->staging < CK_ALIGN)
                fprintf(stderr, "ckptd: --staging: %s\n",
                        r < 0 ? ck_err_msg(&err) : "at least 4KiB"), r = -EINVAL;
            break;
        case O_PLAN:
            if ((r = ck_size_parse(optarg, &o->plan_memory, &err)) < 0 || o->plan_memory < (1 << 20))
                fprintf(stderr, "ckptd: --plan-memory: %s\n",
                        r < 0 ? ck_err_msg(&err) : "at least 1MiB"), r = -EINVAL;
            break;
        case O_DEPTH: r = number("--io-depth", optarg, 1, 4096, &o->io_depth); break;
        case O_WRITERS: r = number("--writers", optarg, 1, 256, &o->writers); break;
        case O_HT: r = number("--hash-threads", optarg, 1, 256, &o->hash_threads); break;
        case O_DRAIN: r = number("--drain-timeout", optarg, 0, 86400, &o->drain_timeout); break;
        case O_RANK: r = number("--rank-timeout", optarg, 0, 86400, &o->rank_timeout); break;
        case O_PART_TIMEOUT:
            r = number("--part-timeout", optarg, 1, 86400, &o->part_timeout);
            break;
        case O_DEAD_AFTER: r = number("--dead-after", optarg, 1, 3600, &o->dead_after); break;
        case O_LOCAL: o->local_root = optarg; break;
        case O_PEER: o->peer_listen = optarg; break;
        case O_PEER_KEY: o->peer_key = optarg; break;
        case O_PEER_TIMEOUT:
            r = number("--peer-timeout", optarg, 1, 3600, &o->peer_timeout);
            break;
        case O_PEER_CHECKERS:
            r = number("--peer-checkers", optarg, 0, KD_PEER_CHECKERS, &o->peer_checkers);
            break;
        case O_DRAIN_EVERY:
            r = number("--drain-every", optarg, 0, 1000000, &o->drain_every);
            break;
        case O_DRAIN_RATE:
            if ((r = ck_size_parse(optarg, &o->drain_rate, &err)) < 0)
                fprintf(stderr, "ckptd: --drain-rate: %s\n", ck_err_msg(&err)), r = -EINVAL;
            break;
        case O_KEEP_LOCAL:
            r = number("--keep-local", optarg, 0, 1u << 20, &o->keep_local);
            break;
        case O_KEEP_DURABLE:
            r = number("--keep-durable", optarg, 0, 1u << 20, &o->keep_durable);
            break;
        case O_REPLICAS:
            r = number("--replicas", optarg, 1, KD_REPLICAS_MAX, &o->replicas);
            break;
        case O_JUMP:
            r = number("--jump", optarg, 1, 4096, &o->jump);
            break;
        case O_ID:
            if ((r = ck__node_id_check(optarg, &err)) < 0)
                fprintf(stderr, "ckptd: --id: %s\n", ck_err_msg(&err));
            snprintf(o->id, sizeof o->id, "%s", optarg);
            break;
        case O_FG: o->foreground = true; break;
        case O_LOG: o->log = optarg; break;
#ifdef KD_TEST_HOOKS
        case O_FAULT: r = inject_fault(optarg, o); break;
#endif
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -EINVAL;
        }
    }
    if (r == 0 && (optind != argc || !o->root)) {
        fprintf(stderr, "ckptd: %s\n", o->root ? "unexpected argument" : "--root is required");
        r = -EINVAL;
    }
    if (r == 0 && (o->replicas > 1 || o->jump > 1) && !o->local_root) {
        fprintf(stderr, "ckptd: --replicas and --jump place the copies of a local tier: "
                "they need --local-root\n");
        r = -EINVAL;
    }
    if (r == 0 && o->peer_listen && !o->local_root) {
        fprintf(stderr, "ckptd: --peer-listen serves a local tier: it needs --local-root\n");
        r = -EINVAL;
    }
    if (r == 0 && o->drain_every && !o->local_root) {
        fprintf(stderr, "ckptd: --drain-every drains the local tiers: it needs --local-root\n");
        r = -EINVAL;
    }
    if (r == 0 && o->peer_key && !o->local_root) {
        fprintf(stderr, "ckptd: --peer-key is for the peer calls of a local tier: it needs "
                "--local-root\n");
        r = -EINVAL;
    }
    if (r == 0 && !o->peer_key && o->local_root && getenv("CKPTD_PEER_KEY"))
        o->peer_key = getenv("CKPTD_PEER_KEY");
    if (r == 0 && o->keep_local && !o->local_root) {
        fprintf(stderr, "ckptd: --keep-local keeps a local tier's copies: it needs --local-root\n");
        r = -EINVAL;
    }
    if (r == 0 && !o->socket[0] &&
        snprintf(o->socket, sizeof o->socket, "%s/.ckptd.sock", o->root) >= (int)sizeof o->socket) {
        fprintf(stderr, "ckptd: %s/.ckptd.sock is too long for a socket; use --socket\n", o->root);
        r = -EINVAL;
    }
    return r;
}

/* Detaches once the socket listens, so that whoever started ckptd can connect as soon
 * as it returns, and tells them where the daemon is: its pid (to signal it), its
 * socket (CKPTD_SOCKET) and its log, which from now on holds everything it says. */
static void detach(kd_server *s)
{
    /* The locks of the root and the local tier go to the child (a fork's child closes
     * its copies of the core's locks, format/owner.h), and the parent exits at once. */
    ck__lock_hand_on(s->lock_fd);
    if (s->local_lock_fd >= 0)
        ck__lock_hand_on(s->local_lock_fd);
    fflush(stdout);   /* nothing buffered before the fork is printed twice */
    pid_t pid = fork();
    if (pid < 0) {
        kd_log(s, "fork: %s; staying in the foreground", strerror(errno));
        ck__lock_adopt(s->lock_fd);
        if (s->local_lock_fd >= 0)
            ck__lock_adopt(s->local_lock_fd);
        return;
    }
    if (pid > 0) {
        printf("ckptd: detached: pid %ld, socket %s, log %s%s\n", (long)pid, s->o.socket,
               s->o.log ? s->o.log : s->root, s->o.log ? "" : "/.ckptd.log");
        fflush(stdout);
        _exit(0);
    }
    setsid();
    /* The locks came along: the pid in them is ours now. */
    if (ck__lock_adopt(s->lock_fd) < 0 ||
        (s->local_lock_fd >= 0 && ck__lock_adopt(s->local_lock_fd) < 0))
        kd_log(s, "out of memory listing the root's lock (a child forked from here would "
               "keep it)");
    /* The socket's credentials are the listener's at listen(): listening again makes
     * them this process's, so that a client's errors name the daemon's real pid. */
    if (listen(s->listen_fd, 128) < 0)
        kd_log(s, "listen again after detaching: %s (clients will see the parent's pid)",
               strerror(errno));
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (s->log)
            dup2(null, 2);
        close(null);
    }
}

/* The default log, ROOT/.ckptd.log, is opened beneath ROOT as every file there is (a
 * log planted as a link or a FIFO is refused); a --log path is the user's own. */
static FILE *open_log(const char *root)
{
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = rootfd < 0 ? -errno
                        : ck__openat_reg(rootfd, ".ckptd.log", O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (rootfd >= 0)
        close(rootfd);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        fprintf(stderr, "ckptd: %s/.ckptd.log: %s\n", root, ck__why(fd >= 0 ? -errno : fd));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

/* The local tier: owned as the root is (LOCAL/.ckptd.ID.lock, one daemon of an id), and
 * recovered with every replica root under it before anything is served; the job's peer
 * key read (made by the first daemon on the durable root), as every peer call needs it. */
static int local_tier(kd_server *s, ck_err *err)
{
    if (!s->o.local_root)
        return 0;
    /* Said now, while whoever started the daemon still hears it (before detaching). */
    int r = s->o.peer_listen ? kd_peers_check_listen(s->o.peer_listen, err) : 0;
    if (r < 0)
        return r;
    if (!realpath(s->o.local_root, s->local_root))
        return ck_err_set(err, -errno, "--local-root %s: %s", s->o.local_root, strerror(errno));
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "local tier %s is served by another ckptd with id %s",
             s->local_root, s->o.id);
    r = ck__engine_lock(s->local_root, s->o.id, what, &s->local_lock_fd, err);
    if (r == 0)
        r = kd_inv_recover(s->local_root, kd_log_cb, s, err);
    return r < 0 ? r : kd_peer_key_load(s->o.peer_key, s->root, true, &s->peer_key, err);
}

/* The peer service, on a thread of its own (after any fork). */
static int peers_start(kd_server *s, ck_err *err)
{
    if (!s->o.peer_listen)
        return 0;
    kd_peer_opts po = { .local_root = s->local_root, .listen = s->o.peer_listen,
                        .id = s->o.id, .durable_root = s->root, .instance = s->instance,
                        .key = &s->peer_key,
                        .timeout = s->o.peer_timeout, .wait = s->o.part_timeout,
                        .drain_rate = s->o.drain_rate,
                        .checkers = s->o.peer_checkers, .log = kd_log_cb, .log_arg = s };
    return kd_peers_start(&po, &s->peers, err);
}

int main(int argc, char **argv)
{
    kd_server s = { .local_lock_fd = -1 };
    if (parse(argc, argv, &s.o) < 0)
        return 2;
    const char *log = s.o.log;
    if (log && !(s.log = fopen(log, "ae"))) {
        fprintf(stderr, "ckptd: --log %s: %s\n", log, strerror(errno));
        return 2;
    }
    if (!log && !s.o.foreground && !(s.log = open_log(s.o.root)))
        return 2;
    ck_err err = { 0 };
    int r = kd_server_start(&s, &err);
    if (r == 0)
        r = local_tier(&s, &err);
    /* Threads do not survive fork: detach first, then start the engine. */
    if (r == 0 && !s.o.foreground)
        detach(&s);
    if (r == 0)
        r = kd_server_signals(&s, &err);
    if (r == 0)
        r = kd_server_engine(&s, &err);
    if (r == 0)
        r = peers_start(&s, &err);
    if (r == 0)
        r = kd_retain_init(&s, &err);
    if (r == 0)
        r = kd_restore_start(&s, &err);
    if (r == 0)
        r = kd_drain_start(&s, &err);
#ifdef KD_TEST_HOOKS
    if (r == 0 && s.o.engine)
        kd_log(&s, "test build: every save's I/O goes through the --inject-fault engine");
#endif
    if (r < 0) {
        kd_log(&s, "cannot start: %s", ck_err_msg(&err));
        if (s.log)
            fprintf(stderr, "ckptd: cannot start: %s\n", ck_err_msg(&err));
        return r == -EBUSY || r == -EADDRINUSE ? 3 : 1;
    }
    r = kd_server_run(&s);
    kd_drain_stop(&s);
    kd_restore_stop(&s);
    kd_retain_free(&s);
    kd_peers_stop(s.peers);
    kd_plan_stop(&s);
    ck__saver_free(s.saver);
    kd_early_stop(&s);
    ck_engine_destroy(s.o.engine);
    kd_log(&s, "exit %d", r < 0 ? 1 : 0);
    if (s.log)
        fclose(s.log);
    return r < 0 ? 1 : 0;
}
