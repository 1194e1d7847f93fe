/* ckpt-synth - writes a synthetic checkpoint, as if every rank of a mesh saved.
 *
 * Every element comes from the formula in ck/synth.h, so any test can recompute any
 * byte of the result, of an export or of a reshard. It streams: bytes are generated
 * block by block as the writer asks, so memory stays bounded whatever the size. It
 * prints the write throughput, so it doubles as a storage benchmark.
 */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/stat.h>

#include "ck/catalog.h"
#include "ck/ckpt.h"
#include "ck/client.h"
#include "ck/save.h"
#include "ck/synth.h"
#include "tool.h"

static const char *prog = "ckpt-synth";

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckpt-synth ROOT --name NAME --mesh SHAPE --tensors N --bytes SIZE [options]\n"
"\n"
"Writes a committed checkpoint ROOT/NAME whose tensor i is named t{i}, is 2-D, and\n"
"holds at element k (row-major) the low itemsize bytes of\n"
"splitmix64(seed ^ (i << 40) ^ k), little-endian.\n"
"\n"
"  --name NAME          checkpoint name ([A-Za-z0-9._-])\n"
"  --mesh SHAPE         mesh the ranks form, e.g. 2x4\n"
"  --dims NAMES         mesh dim names, e.g. replicate,shard\n"
"  --placements P       one per mesh dim, e.g. 'R,S(0)' (default: S(0) on the last\n"
"                       mesh dim, R on the others)\n"
"  --tensors N          number of tensors\n"
"  --bytes SIZE         total bytes of the full tensors (KiB/MiB/GiB or KB/MB/GB)\n"
"  --dtype T            f32 (default), bf16, f16, f64, i64, i32, i16, i8, u8, bool,\n"
"                       u16, u32, u64, f8e4m3, f8e5m2, c64, c128\n"
"  --uneven             sizes that do not divide by the shard count; some shards empty\n"
"  --boxes              store each tensor as a box list (format 1.1): a random tiling\n"
"                       drawn from the seed, rows cut unevenly (odd tensors also cut\n"
"                       into 2-D tiles), each box written by a random rank, so some\n"
"                       ranks write several boxes of a tensor and some none\n"
"  --seed S             formula seed (default 0)\n"
"  --step N             training step recorded in the checkpoint (default 0)\n"
"  --no-hash            do not record SHA-256 block hashes\n"
"  --block-size SIZE    hash block (default 4MiB)\n"
"  --hash-threads N     hash workers (default: one per CPU)\n"
"  --world N            save as N ranks through the client API (ck/client.h), one\n"
"                       thread each with the embedded engine; N = the mesh's ranks\n"
"  --daemon SOCKET[,SOCKET...]\n"
"                       with --world: one process per rank, through ckptd at SOCKET;\n"
"                       several sockets: one ckptd per simulated node on the same\n"
"                       root, the ranks split in equal consecutive blocks\n"
"  --level L            with --world: the commit level to wait for (local,\n"
"                       replicated, durable; default: the daemon's); each rank says\n"
"                       the level its save reached\n"
"  --json               print the result as JSON\n"
"  --progress           progress lines on stderr even when it is no terminal (a\n"
"                       log): one every 2 s and one at the end\n"
"  -h, --help           this text\n"
"\n"
"Exit status: 0 written, 2 usage or I/O error.\n");
}

typedef struct opts {
    const char *root, *name, *mesh, *dims, *placements, *daemon;
    uint64_t tensors, bytes, seed, step, world;
    ck_dtype dtype;
    bool uneven, no_hash, json, boxes, progress;
    uint32_t block_size;
    unsigned hash_threads;
    ck_level level;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    enum { O_NAME = 256, O_MESH, O_DIMS, O_PL, O_TENSORS, O_BYTES, O_DTYPE, O_UNEVEN, O_SEED,
           O_STEP, O_NOHASH, O_BLOCK, O_HT, O_JSON, O_WORLD, O_DAEMON, O_BOXES,
           O_PROGRESS, O_LEVEL };
    static const struct option lo[] = {
        { "name", 1, 0, O_NAME }, { "mesh", 1, 0, O_MESH }, { "dims", 1, 0, O_DIMS },
        { "placements", 1, 0, O_PL }, { "tensors", 1, 0, O_TENSORS }, { "bytes", 1, 0, O_BYTES },
        { "dtype", 1, 0, O_DTYPE }, { "uneven", 0, 0, O_UNEVEN }, { "seed", 1, 0, O_SEED },
        { "step", 1, 0, O_STEP }, { "no-hash", 0, 0, O_NOHASH }, { "block-size", 1, 0, O_BLOCK },
        { "hash-threads", 1, 0, O_HT }, { "json", 0, 0, O_JSON }, { "world", 1, 0, O_WORLD },
        { "daemon", 1, 0, O_DAEMON }, { "boxes", 0, 0, O_BOXES }, { "progress", 0, 0, O_PROGRESS },
        { "level", 1, 0, O_LEVEL }, { "help", 0, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    *o = (opts){ .dtype = CK_F32 };
    ck_err err = { 0 };
    int c;
    uint64_t v;
    char *end;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_NAME: o->name = optarg; break;
        case O_MESH: o->mesh = optarg; break;
        case O_DIMS: o->dims = optarg; break;
        case O_PL: o->placements = optarg; break;
        case O_UNEVEN: o->uneven = true; break;
        case O_NOHASH: o->no_hash = true; break;
        case O_JSON: o->json = true; break;
        case O_DAEMON: o->daemon = optarg; break;
        case O_BOXES: o->boxes = true; break;
        case O_PROGRESS: o->progress = true; break;
        case O_LEVEL:
            if (ck_level_parse(optarg, &o->level, &err) < 0) {
                tool_error(prog, "--level: %s", ck_err_msg(&err));
                return -EINVAL;
            }
            break;
        case O_WORLD:
        case O_TENSORS:
        case O_SEED:
        case O_STEP:
        case O_HT:
            errno = 0;
            v = strtoull(optarg, &end, 0);
            if (errno || *end || optarg[0] == '-' || !optarg[0]) {
                tool_error(prog, "--%s: '%s' is not a number",
                           c == O_WORLD ? "world" : lo[c - O_NAME].name, optarg);
                return -EINVAL;
            }
            if (c == O_WORLD) o->world = v;
            else if (c == O_TENSORS) o->tensors = v;
            else if (c == O_SEED) o->seed = v;
            else if (c == O_STEP) o->step = v;
            else o->hash_threads = (unsigned)(v > 256 ? 256 : v);
            break;
        case O_BYTES:
        case O_BLOCK:
            if (ck_size_parse(optarg, &v, &err) < 0) {
                tool_error(prog, "--%s: %s", c == O_BYTES ? "bytes" : "block-size", ck_err_msg(&err));
                return -EINVAL;
            }
            if (c == O_BYTES) {
                o->bytes = v;
            } else if (v < 4096 || v > (256u << 20) || (v & (v - 1))) {
                tool_error(prog, "--block-size: %s is not a power of two in 4KiB..256MiB", optarg);
                return -EINVAL;
            } else {
                o->block_size = (uint32_t)v;
            }
            break;
        case O_DTYPE:
            if (ck_dtype_parse(optarg, &o->dtype, &err) < 0) {
                tool_error(prog, "--dtype: %s", ck_err_msg(&err));
                return -EINVAL;
            }
            break;
        case 'h':
            usage(stdout);
            exit(EXIT_OK);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind != argc - 1) {
        tool_error(prog, optind >= argc ? "missing ROOT" : "unexpected argument '%s'",
                   argv[optind + (optind < argc)]);
        return -EINVAL;
    }
    o->root = argv[optind];
    const char *miss = !o->name ? "--name" : !o->mesh ? "--mesh" : !o->tensors ? "--tensors"
                     : !o->bytes ? "--bytes" : NULL;
    if (miss) {
        tool_error(prog, "%s is required (and non-zero); see --help", miss);
        return -EINVAL;
    }
    if (o->boxes && o->placements) {
        tool_error(prog, "--boxes and --placements: a box list has no placements");
        return -EINVAL;
    }
    if (o->daemon && !o->world) {
        tool_error(prog, "--daemon needs --world");
        return -EINVAL;
    }
    if (o->world && o->block_size) {
        tool_error(prog, "--block-size applies to direct saves, not --world ones");
        return -EINVAL;
    }
    if (o->tensors > 1000000) {
        tool_error(prog, "--tensors %llu: at most 1000000", (unsigned long long)o->tensors);
        return -EINVAL;
    }
    return 0;
}

/* Shape of tensor i: 2-D, about bytes/itemsize elements. Dims sharded into p parts
 * divide evenly, or with --uneven deliberately do not: even tensors get a short last
 * shard, odd ones p-1 rows so that the last shard of each group is empty. */
static void shape_of(const opts *o, uint64_t i, const uint64_t parts[2], uint64_t shape[2])
{
    uint64_t per = o->bytes / o->tensors + (i < o->bytes % o->tensors ? 1 : 0);
    uint64_t elems = per / ck_dtype_size(o->dtype);
    if (elems == 0)
        elems = 1;
    uint64_t cols = 1;
    while (cols * cols * 4 <= elems && cols < 4096)
        cols *= 2;
    uint64_t rows = elems / cols;
    if (!o->uneven) {
        rows = rows / parts[0] * parts[0];
        cols = cols / parts[1] * parts[1];
        if (rows == 0)
            rows = parts[0];
        if (cols == 0)
            cols = parts[1];
    } else {
        if (parts[0] > 1 && i % 2 == 1) {
            rows = parts[0] - 1;
            cols = elems / rows ? elems / rows : 1;
        } else if (parts[0] > 1 && rows % parts[0] == 0) {
            rows += 1;
        }
        if (parts[1] > 1 && cols % parts[1] == 0)
            cols += 1;
    }
    shape[0] = rows;
    shape[1] = cols;
}

/* ---- --boxes: a random tiling per tensor ---- */

/* The box list of tensor i, a pure function of the seed, the tensor and the world, so
 * that every rank draws the same one: cuts of the rows (and, for odd tensors, of the
 * columns) at random points, repeated points giving empty boxes, and a random writer
 * per box. malloc'd into *boxes and *writers. */
static int tiling(const opts *o, uint64_t i, const uint64_t shape[2], uint64_t world,
                  ck_box **boxes, uint64_t **writers, uint32_t *n)
{
    uint64_t x = o->seed ^ (i << 40) ^ 0x626f786573ull;        /* "boxes" */
    uint64_t cuts[2][10], nc[2];
    for (int d = 0; d < 2; d++) {
        uint64_t most = d == 0 ? (world + 1 < 8 ? world + 1 : 8) : (i % 2 ? 3 : 1);
        nc[d] = 1 + ck_splitmix64(x++) % most;
        cuts[d][0] = 0;
        cuts[d][nc[d]] = shape[d];
        for (uint64_t k = 1; k < nc[d]; k++)
            cuts[d][k] = ck_splitmix64(x++) % (shape[d] + 1);
        for (uint64_t a = 1; a < nc[d]; a++)        /* insertion sort of the inner cuts */
            for (uint64_t b = a; b > 1 && cuts[d][b - 1] > cuts[d][b]; b--) {
                uint64_t t = cuts[d][b];
                cuts[d][b] = cuts[d][b - 1];
                cuts[d][b - 1] = t;
            }
    }
    *n = (uint32_t)(nc[0] * nc[1]);
    *boxes = calloc(*n, sizeof **boxes);
    *writers = calloc(*n, sizeof **writers);
    if (!*boxes || !*writers) {
        free(*boxes);
        free(*writers);
        return -ENOMEM;
    }
    for (uint64_t r = 0, b = 0; r < nc[0]; r++)
        for (uint64_t c = 0; c < nc[1]; c++, b++) {
            (*boxes)[b] = (ck_box){ .ndim = 2, .off = { cuts[0][r], cuts[1][c] },
                                    .len = { cuts[0][r + 1] - cuts[0][r],
                                             cuts[1][c + 1] - cuts[1][c] } };
            (*writers)[b] = ck_splitmix64(x++) % world;
        }
    return 0;
}

/* ---- --world: every rank saves its own part through the client API ---- */

/* One box's generator, listed until the save that reads it is over. */
typedef struct box_src {
    ck_synth_src src;
    struct box_src *next;
} box_src;

static void box_srcs_free(box_src *b)
{
    while (b) {
        box_src *next = b->next;
        free(b);
        b = next;
    }
}

/* Every tensor of the synthetic save, by placements or (--boxes) as a box list. */
static int synth_decl(const opts *o, const ck_mesh *mesh, const ck_placement *pl,
                      const uint64_t parts[2], ck_decl **out, ck_err *err)
{
    int r = ck_decl_new(out, mesh, err);
    char name[32];
    for (uint64_t i = 0; i < o->tensors && r == 0; i++) {
        uint64_t shape[2];
        shape_of(o, i, parts, shape);
        snprintf(name, sizeof name, "t%llu", (unsigned long long)i);
        if (!o->boxes) {
            r = ck_decl_tensor(*out, name, o->dtype, 2, shape, pl, err);
            continue;
        }
        ck_box *b;
        uint64_t *w;
        uint32_t n;
        if ((r = tiling(o, i, shape, ck_mesh_world(mesh), &b, &w, &n)) < 0)
            return ck_err_set(err, r, "tensor %s: out of memory", name);
        r = ck_decl_tensor_boxes(*out, name, o->dtype, 2, shape, n, b, w, err);
        free(b);
        free(w);
    }
    return r < 0 ? r : ck_decl_seal(*out, err);
}

typedef struct rank_job {
    box_src *box_srcs;        /* --boxes: this rank's generators */
    const opts *o;
    ck_decl *decl;
    const ck_mesh *mesh;
    const ck_placement *pl;
    const uint64_t *parts;
    const ck_job_id *job;     /* the ranks' one job (made before they fork) */
    ck_client *cl;
    uint64_t rank;
    double stall;             /* seconds in ck_client_submit */
    ck_level reached;         /* the commit level its save reached, and why not higher */
    char why[CK_ERR_MSG_MAX];
    int rc;
    ck_err err;
} rank_job;

/* Tensor g->tensor as a box list: the rank gives the boxes it writes, each from its own
 * generator (kept in j->box_srcs until the save is staged). */
static int client_boxes(rank_job *j, ck_client_save *sv, const char *name, const ck_synth_src *g)
{
    ck_box *b;
    uint64_t *w;
    uint32_t n;
    int r = tiling(j->o, g->tensor, g->shape, ck_mesh_world(j->mesh), &b, &w, &n);
    if (r < 0)
        return ck_err_set(&j->err, r, "tensor %s: out of memory", name);
    for (uint32_t k = 0; k < n && r == 0; k++) {
        if (w[k] != j->rank)
            continue;
        box_src *x = malloc(sizeof *x);
        if (!x) {
            r = ck_err_set(&j->err, -ENOMEM, "tensor %s: out of memory", name);
            break;
        }
        x->src = *g;
        x->src.box = b[k];
        x->next = j->box_srcs;
        j->box_srcs = x;
        r = ck_client_box_fill(sv, name, k, ck_synth_fill, &x->src, &j->err);
    }
    free(b);
    free(w);
    return r;
}

/* Offers this rank's shards straight from the formula, stages them, asks for the commit
 * on rank 0, and waits for the outcome. */
static int synth_rank(rank_job *j)
{
    const opts *o = j->o;
    ck_client_save *sv;
    ck_synth_src *srcs = calloc(o->tensors, sizeof *srcs);
    if (!srcs)
        return ck_err_set(&j->err, -ENOMEM, "out of memory");
    int r = ck_client_begin(j->cl, &sv, o->name, o->step, j->decl, j->rank, j->job, &j->err);
    if (r < 0) {
        free(srcs);
        return r;
    }
    if (o->no_hash)
        ck_client_no_hash(sv);
    ck_client_level(sv, o->level);
    char name[32];
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_mesh_coord(j->mesh, j->rank, coord);
    for (uint64_t i = 0; i < o->tensors && r == 0; i++) {
        ck_synth_src *g = &srcs[i];
        *g = (ck_synth_src){ .seed = o->seed, .tensor = (uint32_t)i,
                             .itemsize = ck_dtype_size(o->dtype), .ndim = 2 };
        shape_of(o, i, j->parts, g->shape);
        snprintf(name, sizeof name, "t%llu", (unsigned long long)i);
        if (o->boxes) {
            r = client_boxes(j, sv, name, g);
            continue;
        }
        ck_shard_box(2, g->shape, j->mesh, j->pl, coord, &g->box);
        r = ck_client_shard_fill(sv, name, ck_synth_fill, g, &j->err);
    }
    double t0 = tool_now();
    if (r == 0)
        r = ck_client_submit(sv, &(ck_submit){ .mode = CK_SUBMIT_COPY }, &j->err);
    j->stall = tool_now() - t0;
    if (r == 0 && j->rank == 0)
        r = ck_client_commit(sv, &j->err);
    if (r == 0)
        r = ck_client_wait(sv, CK_CLIENT_COMMITTED, &j->err);
    if (r == 0)
        j->reached = ck_client_level_reached(sv, j->why, sizeof j->why);
    ck_client_save_free(sv);
    free(srcs);
    box_srcs_free(j->box_srcs);
    j->box_srcs = NULL;
    return r;
}

static void *rank_thread(void *arg)
{
    rank_job *j = arg;
    j->rc = synth_rank(j);
    return NULL;
}

#define SYNTH_MAX_DAEMONS 64

/* --daemon A,B,...: the sockets of the simulated nodes' daemons. */
static int split_sockets(const char *list, char socks[][108], unsigned *n)
{
    *n = 0;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!len || len >= 108 || *n == SYNTH_MAX_DAEMONS) {
            tool_error(prog, "--daemon %s: at most %d socket paths of 1 to 107 bytes, "
                       "comma-separated", list, SYNTH_MAX_DAEMONS);
            return EXIT_USAGE;
        }
        snprintf(socks[(*n)++], 108, "%.*s", (int)len, p);
        p += len + (e != NULL);
    }
    return EXIT_OK;
}

/* Runs the ranks: threads sharing one embedded engine, or processes through ckptd. */
static int synth_world(const opts *o, ck_decl *decl, const ck_mesh *mesh,
                       const ck_placement *pl, const uint64_t parts[2])
{
    uint64_t world = ck_mesh_world(mesh);
    if (o->world != world) {
        tool_error(prog, "--world %llu, but mesh %s has %llu ranks", (unsigned long long)o->world,
                   o->mesh, (unsigned long long)world);
        return EXIT_USAGE;
    }
    rank_job *jobs = calloc(world, sizeof *jobs);
    pthread_t *th = calloc(world, sizeof *th);
    pid_t *pids = calloc(world, sizeof *pids);
    if (!jobs || !th || !pids) {
        tool_error(prog, "out of memory");
        return EXIT_USAGE;
    }
    int rc = EXIT_OK;
    double t0 = tool_now();
    ck_client_opts co = { .embedded = !o->daemon, .hash_threads = o->hash_threads };
    char socks[SYNTH_MAX_DAEMONS][108];
    unsigned nsock = 0;
    if (o->daemon && (rc = split_sockets(o->daemon, socks, &nsock)) != EXIT_OK) {
        free(jobs);
        free(th);
        free(pids);
        return rc;
    }
    if (nsock > world) {
        tool_error(prog, "--daemon: %u sockets for %llu ranks", nsock, (unsigned long long)world);
        free(jobs);
        free(th);
        free(pids);
        return EXIT_USAGE;
    }
    co.nodes = nsock;
    ck_job_id job;
    ck_err jerr = { 0 };
    if (ck_job_id_new(&job, &jerr) < 0) {
        tool_error(prog, "%s", ck_err_msg(&jerr));
        free(jobs);
        free(th);
        free(pids);
        return EXIT_USAGE;
    }
    for (uint64_t r = 0; r < world; r++) {
        rank_job *j = &jobs[r];
        *j = (rank_job){ .o = o, .decl = decl, .mesh = mesh, .pl = pl, .parts = parts,
                         .job = &job, .rank = r };
        if (o->daemon && (pids[r] = fork()) != 0) {
            if (pids[r] < 0) {
                tool_error(prog, "fork: %s", strerror(errno));
                rc = EXIT_USAGE;
                break;
            }
            continue;
        }
        co.peer = r > 0 && !o->daemon ? jobs[0].cl : NULL;
        co.socket = o->daemon ? socks[r * nsock / world] : NULL;
        j->rc = ck_client_open(&j->cl, o->root, &co, &j->err);
        if (o->daemon) {          /* the child: one rank, then exit */
            if (j->rc == 0)
                j->rc = synth_rank(j);
            if (j->rc < 0)
                tool_error(prog, "rank %llu: %s", (unsigned long long)r, ck_err_msg(&j->err));
            else if (!o->json)
                printf("%s: rank %llu: the submit stalled %.3f s; committed at level %s%s%s\n",
                       prog, (unsigned long long)r, j->stall, ck_level_name(j->reached),
                       j->why[0] ? ": " : "", j->why);
            ck_client_close(j->cl);
            fflush(stdout);
            _exit(j->rc < 0 ? tool_exit_code(j->rc) : EXIT_OK);
        }
        /* j->rc is the thread's once it runs: a thread that fails at once must not
         * have its error overwritten here. */
        bool started = j->rc == 0 && pthread_create(&th[r], NULL, rank_thread, j) == 0;
        if (!started) {
            if (j->rc == 0)
                j->rc = ck_err_set(&j->err, -EAGAIN, "no thread to be had for it");
            tool_error(prog, "rank %llu: %s", (unsigned long long)r, ck_err_msg(&j->err));
            rc = EXIT_USAGE;
            world = r + (j->rc == -EAGAIN);
            break;
        }
    }
    for (uint64_t r = 0; r < world; r++) {
        if (o->daemon) {
            int st = 0;
            if (pids[r] > 0 && (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) ||
                                WEXITSTATUS(st) != 0))
                rc = EXIT_USAGE;
            continue;
        }
        if (jobs[r].cl && th[r])
            pthread_join(th[r], NULL);
        if (jobs[r].rc < 0) {
            tool_error(prog, "rank %llu: %s", (unsigned long long)r, ck_err_msg(&jobs[r].err));
            rc = EXIT_USAGE;
        }
    }
    for (uint64_t r = world; r-- > 0;)
        ck_client_close(jobs[r].cl);
    double secs = tool_now() - t0;
    if (rc == EXIT_OK && !o->json)
        printf("%s: committed %s/%s: %llu ranks through %s, %.3f s\n", prog, o->root, o->name,
               (unsigned long long)world, !o->daemon ? "the embedded engine"
               : nsock > 1 ? "several ckptd" : "ckptd", secs);
    free(jobs);
    free(th);
    free(pids);
    return rc;
}

/* Tensor i as a box list on a direct save: every box with its generator. */
static int save_boxes(const opts *o, ck_save *s, const char *name, uint64_t i,
                      const uint64_t shape[2], uint64_t world, box_src **list, ck_err *err)
{
    ck_box *b;
    uint64_t *w;
    uint32_t n;
    int r = tiling(o, i, shape, world, &b, &w, &n);
    if (r < 0)
        return r;
    for (uint32_t k = 0; k < n && r == 0; k++) {
        box_src *x = malloc(sizeof *x);
        if (!x) {
            r = -ENOMEM;
            break;
        }
        x->src = (ck_synth_src){ .seed = o->seed, .tensor = (uint32_t)i,
                                 .itemsize = ck_dtype_size(o->dtype), .ndim = 2,
                                 .shape = { shape[0], shape[1] }, .box = b[k] };
        x->next = *list;
        *list = x;
        r = ck_save_box_fill(s, name, k, ck_synth_fill, &x->src, err);
    }
    free(b);
    free(w);
    return r;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) < 0)
        return EXIT_USAGE;
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[CK_MAX_MESH_DIMS];
    if (ck_mesh_parse(o.mesh, o.dims, &mesh, &err) < 0 ||
        (o.placements ? ck_placements_parse(o.placements, mesh.ndim, 2, pl, &err)
                      : (ck_placements_default(mesh.ndim, pl), 0)) < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    uint64_t parts[2] = { 1, 1 };
    for (int d = 0; d < mesh.ndim; d++)
        if (pl[d].kind == CK_SHARD)
            parts[pl[d].dim] *= mesh.size[d];
    uint64_t world = ck_mesh_world(&mesh);
    ck_decl *decl;
    if (synth_decl(&o, &mesh, pl, parts, &decl, &err) < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    if (o.world) {
        int rc = synth_world(&o, decl, &mesh, pl, parts);
        ck_decl_free(decl);
        return rc;
    }

    tool_progress prog_line;
    tool_progress_init(&prog_line, prog, "ckpt-synth: writing", o.progress);
    /* ck_synth_fill is a pure function: blocks are generated on every core. */
    ck_save_opts so = { .block_size = o.block_size, .no_hash = o.no_hash, .fill_threadsafe = true,
                        .hash_threads = o.hash_threads, .log = tool_log,
                        .progress = tool_progress_update, .cb_arg = &prog_line };
    /* A new root is made, as a training job's first save would. */
    if (ck_root_make(o.root, &err) < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        ck_decl_free(decl);
        return EXIT_USAGE;
    }
    ck_save *s;
    int r = ck_save_begin(&s, o.root, o.name, o.step, decl, &so, &err);
    ck_decl_free(decl);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    /* One generator per written shard: it lives until the commit has drained it. */
    ck_synth_src *srcs = NULL;
    size_t nsrc = 0, cap = 0;
    char name[32];
    box_src *box_srcs = NULL;
    for (uint64_t i = 0; i < o.tensors && r == 0; i++) {
        uint64_t shape[2];
        shape_of(&o, i, parts, shape);
        snprintf(name, sizeof name, "t%llu", (unsigned long long)i);
        if (o.boxes) {
            r = save_boxes(&o, s, name, i, shape, world, &box_srcs, &err);
            continue;
        }
        for (uint64_t rank = 0; rank < world && r == 0; rank++) {
            if (!ck_save_writes(s, name, rank))
                continue;
            if (nsrc == cap) {
                cap = cap ? cap * 2 : 256;
                ck_synth_src *p = realloc(srcs, cap * sizeof *p);
                if (!p) {
                    r = -ENOMEM;
                    break;
                }
                srcs = p;
            }
            ck_synth_src *g = &srcs[nsrc];
            *g = (ck_synth_src){ .seed = o.seed, .tensor = (uint32_t)i,
                                 .itemsize = ck_dtype_size(o.dtype), .ndim = 2,
                                 .shape = { shape[0], shape[1] } };
            uint32_t coord[CK_MAX_MESH_DIMS];
            ck_mesh_coord(&mesh, rank, coord);
            ck_shard_box(2, shape, &mesh, pl, coord, &g->box);
            nsrc++;
        }
    }
    /* Register fills only after the array stops moving. */
    for (size_t j = 0, k = 0; r == 0 && !o.boxes && k < o.tensors; k++) {
        snprintf(name, sizeof name, "t%llu", (unsigned long long)k);
        for (uint64_t rank = 0; rank < world && r == 0; rank++) {
            if (!ck_save_writes(s, name, rank))
                continue;
            r = ck_save_shard_fill(s, name, rank, ck_synth_fill, &srcs[j++], &err);
        }
    }
    if (r < 0) {
        tool_error(prog, "%s", r == -ENOMEM ? "out of memory" : ck_err_msg(&err));
        ck_save_abort(s);
        free(srcs);
        box_srcs_free(box_srcs);
        return tool_exit_code(r);
    }
    ck_save_stats st;
    r = ck_save_commit(s, &st, &err);
    tool_progress_done(&prog_line);
    free(srcs);
    box_srcs_free(box_srcs);
    if (r < 0) {
        tool_error(prog, "%s", ck_err_msg(&err));
        return tool_exit_code(r);
    }
    double gbs = st.write_seconds > 0 ? (double)st.file_bytes / st.write_seconds / 1e9 : 0;
    if (o.json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:b, s:b}",
                              "name", o.name, "mesh", o.mesh, "tensors", (json_int_t)o.tensors,
                              "tensor_bytes", (json_int_t)st.tensor_bytes,
                              "file_bytes", (json_int_t)st.file_bytes,
                              "write_seconds", st.write_seconds, "total_seconds", st.total_seconds,
                              "write_gbps", gbs, "hashed", !o.no_hash, "direct", st.direct);
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(j);
    } else {
        char a[32];
        printf("%s: committed %s/%s: %llu tensors, %s on mesh %s\n", prog, o.root, o.name,
               (unsigned long long)o.tensors, tool_bytes(st.file_bytes, a, sizeof a), o.mesh);
        printf("%s: write %.3f s, %.2f GB/s (%s, %s); commit total %.3f s\n", prog,
               st.write_seconds, gbs, o.no_hash ? "no hashing" : "SHA-256 on",
               st.direct ? "O_DIRECT" : "buffered", st.total_seconds);
    }
    return EXIT_OK;
}
