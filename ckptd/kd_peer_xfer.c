/* kd_peer_xfer.c - a copy's stream over a peer connection, both ways (docs/PROTOCOL.md,
 * "Peer protocol", "A transfer").
 *
 * The sender cuts the copy (ops/copy.h, ck__copy_out_cut) in chunks of at most
 * KD_PEER_CHUNK, none across the end of a file, which reader threads of the stream's
 * own read ahead of the sends, KD_PEER_READERS at once and at most KD_PEER_AHEAD chunks
 * past what was sent (decision 0202): a disk gives its speed only to several reads at
 * once, and the thread that sends (a peer service's, which serves every connection)
 * never waits on one. Each chunk goes out as a DATA carrying its stream offset, in
 * the order cut, and never more bytes past what the receiver acknowledged than its
 * window (the receiver states it: a block per checker thread, decision 0200).
 * A PUT's stream carries the data files first and the manifest last (peer protocol 7,
 * decision 0204): before the manifest's first byte each lane is sent MANIFEST, its size
 * and SHA-256, and its receiver, which hashed every block as it came, compares them
 * with the manifest's at the commit. A PUT begun beside the local write reads a node's
 * files as they are written (kd_peer_grow.c): its readers wait for bytes to land, cut
 * from whichever file landed most (each file in order, the files in any order: peer
 * protocol 9, decision 0206), and its end, the manifest, is known only once the copy
 * is committed (kd_xsend_finish).
 * A stream may have several receivers, its lanes (a PUT to every peer of a clique,
 * decision 0201): each chunk is read once and sent on every lane still in, so the
 * stream moves at the pace of its slowest receiver, and a lane given up holds nothing
 * back.
 * The receiver takes DATA in any order within that window (UCX may complete a
 * rendezvous out of order), holds what came early, writes what is in order (a GET's
 * stream, a PUT's files each, then its manifest) into the new copy (ck__copy_in: every
 * block checked as it completes) and acknowledges the bytes done. So each side holds at
 * most a window of the stream in memory, whatever the size of the copy, and a sender
 * that runs ahead of the window, overlaps, or goes past the end is refused.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#include "ops/copy.h"

_Static_assert(KD_PEER_DATA_ALIGN % CK_COPY_OUT_ALIGN == 0,
               "the chunk buffers are aligned for the sender's O_DIRECT reads");

/* One receiver of a stream. */
typedef struct xlane {
    struct kd_pconn *c;
    kd_ucx *u;                     /* its connection's worker: woken when a chunk is read */
    uint64_t acked;
    uint32_t window;               /* the one it stated */
    bool gone;                     /* given up: it is sent nothing more */
} xlane;

/* A chunk read ahead: a slot of the ring between the readers and the sends. */
typedef struct xread {
    void *buf;
    size_t len;
    uint64_t at;                   /* its stream offset, DATA's argument */
    bool done;                     /* read, or failed (r) */
    int r;
    ck_err err;
} xread;

struct kd_xsend {
    ck__copy_out *out;             /* a committed copy's stream; or */
    kd_grow *g;                    /* files being written, then their copy's manifest */
    char name[CK_NAME_MAX];
    uint64_t data;                 /* the data files' bytes, which the manifest follows */
    uint64_t total;                /* under mu: the stream's, UINT64_MAX until known */
    uint64_t msize;                /* under mu: the manifest's, once known */
    uint8_t msha[CK_SHA256_LEN];
    _Atomic uint64_t sent;         /* the pump's; read by others too (kd_xsend_sent) */
    kd_bufs *bufs;                 /* the chunks' buffers, aligned for O_DIRECT reads */
    xlane *lane;
    uint32_t n;
    pthread_t rd[KD_PEER_READERS];
    unsigned nrd;                  /* readers started (at the first pump) */
    pthread_mutex_t mu;            /* guards what follows, and the cutting of out */
    pthread_cond_t cv;             /* a reader waits for room in the ring */
    xread ring[KD_PEER_AHEAD];     /* chunk i is ring[i % KD_PEER_AHEAD] */
    uint64_t head, tail;           /* the next chunk to send; the next to cut */
    uint64_t cut_at;               /* a copy's stream (cut in order): where the next cut is */
    bool cut_all;                  /* every chunk was cut (or a cut failed) */
    bool stop;
    bool put;                      /* the manifest comes last, declared by MANIFEST */
    bool declared;                 /* MANIFEST went out on every lane */
};

/* A chunk in flight on several lanes: its buffer goes back once every send of it is
 * done (the sends' completions run on the threads that progress their connections). */
typedef struct xchunk {
    kd_bufs *bufs;
    void *buf;
    atomic_uint refs;
} xchunk;

static void chunk_sent(void *ctx, void *payload)
{
    xchunk *k = ctx;
    (void)payload;
    if (atomic_fetch_sub(&k->refs, 1) == 1) {
        kd_bufs_put(k->bufs, k->buf);
        free(k);
    }
}

/* The receiver: the connection's thread takes DATA, puts what is in order on a queue,
 * and sends the ACKs; a writer thread of the transfer's own takes the queue, writing
 * each message into the copy (ck__copy_in_write_at), and checker threads take each
 * message the writer wrote, in its order, checker k hashing the blocks whose index is k
 * modulo their number (ck__copy_in_check_at; decision 0190): the blocks the window
 * holds are hashed at once, and beside their write. In order means the stream's order
 * for a GET; for a PUT, each data file's own, files in any order (so that a PUT begun
 * beside the write follows every file as it lands, decision 0206), then the manifest
 * once every file is whole. A message is done once written and taken by every
 * checker, in the writer's order, and an ACK says how many bytes are done. So the
 * connection's thread keeps receiving while blocks are hashed and written, and the
 * messages held, queued and being checked are at most a window: no more bytes are
 * taken in than the last ACK plus the window. */
struct kd_xrecv {
    ck__copy_in *in;
    kd_ucx *u;                     /* woken when the writer took a message */
    uint64_t total;
    uint32_t window;               /* what it stated: kd_peer_window(nchk) */
    uint64_t cursor;               /* the connection's: the offset of the next byte to
                                    * queue, of the stream (a GET) or of its manifest (a
                                    * PUT) */
    uint64_t got;                  /* the connection's: bytes taken in (held or queued) */
    uint64_t acked;                /* the connection's: the last ACK sent */
    /* A PUT's data files come in any order, each in order (decision 0206): base[i] is
     * where file i begins in the stream (base[nf] the data's end), next[i] the offset of
     * its next byte to queue; nfdone of them are whole. The connection's. */
    uint64_t *base, *next;
    uint32_t nf, nfdone;
    uint32_t fbegun;               /* files queued in part: at most CK_COPY_BEGUN_MAX */
    uint32_t last_f;               /* the file of the last piece queued (UINT32_MAX: none) */
    unsigned switches;             /* pieces queued of another file than the one before,
                                    * that one not yet whole */
    kd_pmsg *held;                 /* the connection's: early DATA, by offset */
    unsigned nheld;
    pthread_t th, chk_th[KD_PEER_CHECKERS];
    unsigned nchk, started;        /* threads started: the writer, then the checkers */
    pthread_mutex_t mu;            /* guards what follows */
    pthread_cond_t cv, chk_cv;
    kd_pmsg *q_head, *q_tail;      /* in order, for the writer */
    kd_pmsg *w_head, *w_tail;      /* written, in order, for the checkers */
    uint64_t at[KD_PEER_CHECKERS]; /* bytes each checker took, in the writer's order */
    uint64_t done;                 /* bytes written and checked, in the writer's order */
    bool mlast;                    /* a PUT's: the manifest comes last */
    bool mdecl;                    /* the connection's: its MANIFEST came */
    unsigned waitings;             /* the connection's: the WAITING its sender said */
    bool mpend;                    /* declared, not yet to the copy (the writer's to do) */
    uint64_t msize;
    uint8_t msha[CK_SHA256_LEN];
    bool stop;
    int failed;                    /* the first error of a writer or checker, in ferr */
    ck_err ferr;
};

/* Under mu: the messages at the head that every checker took are done. */
static void retire(kd_xrecv *x)
{
    while (x->w_head && x->w_head->refs == 0) {
        kd_pmsg *m = x->w_head;
        x->w_head = m->next;
        if (!x->w_head)
            x->w_tail = NULL;
        x->done += m->len;
        kd_pmsg_free(m);
    }
}

/* Under mu: the first error stays. */
static void fail(kd_xrecv *x, int r, const ck_err *e)
{
    if (!x->failed) {
        x->failed = r;
        x->ferr = *e;
        pthread_cond_broadcast(&x->chk_cv);
    }
}

int kd_xsend_open(const char *root, const char *name, const char *source, const kd_preq *ask,
                  bool put, kd_preq *q, kd_xsend **out, ck_err *err)
{
    *out = NULL;
    memset(q, 0, sizeof *q);
    kd_xsend *x = calloc(1, sizeof *x);
    const char **names = ask && !ask->all && ask->n ? malloc(ask->n * sizeof *names) : NULL;
    if (x)
        x->bufs = kd_bufs_new(KD_PEER_CHUNK, KD_PEER_BUFS_KEEP + KD_PEER_AHEAD);
    if (!x || !x->bufs || (ask && !ask->all && ask->n && !names)) {
        if (x)
            kd_bufs_drop(x->bufs);
        free(x);
        free(names);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    for (uint32_t i = 0; names && i < ask->n; i++)
        names[i] = ask->files[i].name;
    /* A GET of no files asks for the manifest alone. */
    static const char *const none[1];
    int r = ck__copy_out_open(root, name, names ? names : ask && !ask->all ? none : NULL,
                              ask && !ask->all ? ask->n : 0, &x->out, err);
    free(names);
    if (r < 0) {
        kd_xsend_free(x);
        return r;
    }
    snprintf(q->name, sizeof q->name, "%s", name);
    const ck_copy *cp = &x->out->copy;
    snprintf(q->source, sizeof q->source, "%s", cp->partial ? cp->source : source);
    q->block_size = x->out->info.block_size;
    x->put = put;
    if (put) {
        ck__copy_out_manifest_last(x->out);
    } else {
        q->manifest_size = x->out->manifest_size;
        memcpy(q->manifest_sha256, x->out->manifest_sha256, sizeof q->manifest_sha256);
    }
    q->n = x->out->n_files;
    q->files = malloc((q->n ? q->n : 1) * sizeof *q->files);
    if (!q->files) {
        kd_xsend_free(x);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    memcpy(q->files, x->out->files, q->n * sizeof *q->files);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->total = x->out->total;
    x->msize = x->out->manifest_size;
    memcpy(x->msha, x->out->manifest_sha256, sizeof x->msha);
    x->data = x->total - x->msize;
    *out = x;
    return 0;
}

int kd_xsend_open_grow(const char *root, const char *dir, const char *name,
                       const char *source, const ck_file *files, uint32_t n,
                       uint32_t block_size, kd_preq *q, kd_xsend **out, ck_err *err)
{
    *out = NULL;
    memset(q, 0, sizeof *q);
    kd_xsend *x = calloc(1, sizeof *x);
    if (x)
        x->bufs = kd_bufs_new(KD_PEER_CHUNK, KD_PEER_BUFS_KEEP + KD_PEER_AHEAD);
    if (!x || !x->bufs || !(q->files = malloc((n ? n : 1) * sizeof *q->files))) {
        if (x)
            kd_bufs_drop(x->bufs);
        free(x);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->put = true;
    int r = kd_grow_open(root, dir, name, files, n, &x->g, err);
    if (r < 0) {
        kd_xsend_free(x);
        return r;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    x->data = kd_grow_data_bytes(x->g);
    x->total = UINT64_MAX;
    snprintf(q->name, sizeof q->name, "%s", name);
    snprintf(q->source, sizeof q->source, "%s", source);
    q->block_size = block_size;
    q->n = n;
    memcpy(q->files, files, n * sizeof *files);
    *out = x;
    return 0;
}

void kd_xsend_grow(kd_xsend *x, uint32_t f, uint64_t bytes)
{
    pthread_mutex_lock(&x->mu);
    kd_grow_landed(x->g, f, bytes);
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

int kd_xsend_finish(kd_xsend *x, ck_err *err)
{
    ck__copy_out *m;
    int r = kd_grow_manifest(x->g, &m, err);
    if (r < 0)
        return r;
    pthread_mutex_lock(&x->mu);
    kd_grow_attach(x->g, m);
    kd_grow_attached(x->g, &x->msize, x->msha);
    x->total = x->data + x->msize;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return 0;
}

/* Under mu: the next piece of the stream and its stream offset, 1; 0 at its end;
 * -EAGAIN when nothing more is written yet. */
static int cut(kd_xsend *x, ck__copy_cut *k, uint64_t *at, ck_err *e)
{
    if (x->g)
        return kd_grow_cut(x->g, KD_PEER_CHUNK, k, at, e);
    int r = ck__copy_out_cut(x->out, KD_PEER_CHUNK, k, e);
    *at = x->cut_at;
    x->cut_at += r < 0 ? 0 : k->len;
    return r < 0 ? r : k->len > 0;
}

/* Under mu: every lane's connection hears that the chunk at the head is read (the
 * thread that sends waits on their workers). */
static void wake_lanes(const kd_xsend *x)
{
    for (uint32_t i = 0; i < x->n; i++)
        kd_ucx_signal(x->lane[i].u);
}

/* A reader: cuts the next chunk (under mu: a copy's in stream order, a growing PUT's
 * from whichever file landed most), reads it without the lock, and puts it in its
 * slot, while the ring has room and the stream has chunks. */
static void *reader(void *arg)
{
    kd_xsend *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->stop && !x->cut_all && x->tail - x->head >= KD_PEER_AHEAD)
            pthread_cond_wait(&x->cv, &x->mu);
        if (x->stop || x->cut_all)
            break;
        xread *s = &x->ring[x->tail % KD_PEER_AHEAD];
        ck__copy_cut k;
        ck_err e = { 0 };
        uint64_t at = 0;
        int r = cut(x, &k, &at, &e);
        if (r == -EAGAIN) {
            /* Not written yet: the writer's progress, the manifest, or a stop wakes it. */
            pthread_cond_wait(&x->cv, &x->mu);
            continue;
        }
        if (r == 0) {
            x->cut_all = true;
            break;
        }
        *s = (xread){ .r = r, .err = e, .done = r < 0 };
        uint64_t me = x->tail++;
        if (r < 0) {
            /* The copy cannot be read on: the pump says so when it reaches this slot. */
            x->cut_all = true;
            if (me == x->head)
                wake_lanes(x);
            break;
        }
        pthread_mutex_unlock(&x->mu);
        void *buf = kd_bufs_get(x->bufs);
        if (buf) {
            r = x->g ? kd_grow_read(x->g, &k, buf, &e) : ck__copy_cut_read(x->out, &k, buf, &e);
        } else {
            ck__copy_cut_drop(&k);
            r = ck_err_set(&e, -ENOMEM, "%s: out of memory", x->name);
        }
        if (r < 0 && buf) {
            kd_bufs_put(x->bufs, buf);
            buf = NULL;
        }
        pthread_mutex_lock(&x->mu);
        *s = (xread){ .buf = buf, .len = k.len, .at = at, .done = true, .r = r, .err = e };
        if (me == x->head)
            wake_lanes(x);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* The readers, once every lane is in (they wake the lanes' workers): at most one a
 * chunk of the stream, so that a GET of the manifest alone starts one. */
static int readers_start(kd_xsend *x, ck_err *err)
{
    const ck__copy_out *o = x->out;
    uint64_t chunks = KD_PEER_READERS;
    if (o) {
        chunks = (o->manifest_size + KD_PEER_CHUNK - 1) / KD_PEER_CHUNK;
        for (uint32_t i = 0; chunks < KD_PEER_READERS && i < o->n_files; i++)
            chunks += (o->files[i].size + KD_PEER_CHUNK - 1) / KD_PEER_CHUNK;
    }
    unsigned want = chunks < KD_PEER_READERS ? (unsigned)chunks : KD_PEER_READERS;
    while (x->nrd < want && pthread_create(&x->rd[x->nrd], NULL, reader, x) == 0)
        x->nrd++;
    return x->nrd ? 0 : ck_err_set(err, -EAGAIN, "%s: no thread to read it", x->name);
}

/* The end of what every lane's window allows, and the lanes still in. */
static unsigned lanes_end(const kd_xsend *x, uint64_t *end)
{
    unsigned live = 0;
    *end = UINT64_MAX;
    for (uint32_t i = 0; i < x->n; i++)
        if (!x->lane[i].gone) {
            live++;
            uint64_t e = x->lane[i].acked + x->lane[i].window;
            *end = e < *end ? e : *end;
        }
    return live;
}

int kd_xsend_pump(kd_xsend *x, ck_err *err)
{
    uint64_t end;
    pthread_mutex_lock(&x->mu);
    uint64_t total = x->total, msize = x->msize;
    pthread_mutex_unlock(&x->mu);
    if (!x->nrd && x->sent < total && readers_start(x, err) < 0)
        return err->code;
    for (;;) {
        unsigned live = lanes_end(x, &end);
        if (!live) {
            /* Say why the first lane whose connection failed did (one lane: its peer). */
            for (uint32_t i = 0; i < x->n; i++) {
                const char *why;
                int f = kd_pconn_failed(x->lane[i].c, &why);
                if (f)
                    return ck_err_set(err, f, "peer %s: %s", kd_pconn_peer(x->lane[i].c), why);
            }
            return ck_err_set(err, -ECANCELED, "%s: every receiver of its stream was given up",
                              x->name);
        }
        if (x->sent == total)
            break;
        /* A PUT's manifest, last: declared on every lane before its first byte, once it
         * is known. */
        if (x->put && !x->declared && x->sent == x->data && total != UINT64_MAX) {
            for (uint32_t i = 0; i < x->n; i++) {
                ck__wbuf w = { 0 };
                if (x->lane[i].gone)
                    continue;
                kd_pw_manifest(&w, msize, x->msha);
                if (kd_pconn_send_w(x->lane[i].c, KD_P_MANIFEST, &w) < 0)
                    x->lane[i].gone = true;
            }
            x->declared = true;
            continue;
        }
        /* The next chunk in stream order, once it is read and every window has room
         * for it whole (a window, 8 MiB at least, always takes a chunk once what was
         * sent is acknowledged). */
        pthread_mutex_lock(&x->mu);
        xread s = x->head < x->tail ? x->ring[x->head % KD_PEER_AHEAD] : (xread){ 0 };
        bool go = s.done && s.r == 0 && x->sent + s.len <= end;
        if (go) {
            x->ring[x->head % KD_PEER_AHEAD] = (xread){ 0 };
            x->head++;
            pthread_cond_signal(&x->cv);
        }
        pthread_mutex_unlock(&x->mu);
        if (s.done && s.r < 0) {
            *err = s.err;
            return s.r;
        }
        if (!go)
            break;
        xchunk *k = malloc(sizeof *k);
        if (!k) {
            kd_bufs_put(x->bufs, s.buf);
            return ck_err_set(err, -ENOMEM, "out of memory");
        }
        k->bufs = x->bufs;
        k->buf = s.buf;
        atomic_init(&k->refs, live);
        /* A lane whose send fails is gone; its connection says why (the chunk's count
         * was taken for it: its send's release, or this, gives it back). */
        for (uint32_t i = 0; i < x->n; i++)
            if (!x->lane[i].gone && kd_pconn_send_buf(x->lane[i].c, KD_P_DATA, s.at, s.buf,
                                                      s.len, chunk_sent, k) < 0)
                x->lane[i].gone = true;
        x->sent += s.len;
    }
    for (uint32_t i = 0; i < x->n; i++)
        if (!x->lane[i].gone && x->lane[i].acked != total)
            return 0;
    return 1;
}

int kd_xsend_to(kd_xsend *x, struct kd_pconn *c, kd_ucx *u, uint32_t window)
{
    if (x->nrd)
        return -EINVAL;            /* the readers read the lanes without a lock */
    xlane *l = realloc(x->lane, (x->n + 1) * sizeof *l);
    if (!l)
        return -ENOMEM;
    x->lane = l;
    l[x->n] = (xlane){ .c = c, .u = u, .window = window };
    return (int)x->n++;
}

void kd_xsend_drop(kd_xsend *x, int lane)
{
    x->lane[lane].gone = true;
}

uint32_t kd_xsend_window(const kd_xsend *x, int lane)
{
    return x->lane[lane].window;
}

int kd_xsend_ack(kd_xsend *x, int lane, uint64_t taken, ck_err *err)
{
    xlane *l = &x->lane[lane];
    if (taken < l->acked || taken > x->sent)
        return ck_err_set(err, -EPROTO, "the peer acknowledged %llu bytes of the stream of %s; "
                          "%llu were sent and %llu acknowledged before",
                          (unsigned long long)taken, x->name,
                          (unsigned long long)x->sent, (unsigned long long)l->acked);
    l->acked = taken;
    return 0;
}

uint64_t kd_xsend_done(kd_xsend *x, int lane, uint64_t *total)
{
    pthread_mutex_lock(&x->mu);
    *total = x->total;
    pthread_mutex_unlock(&x->mu);
    return x->lane[lane].acked;
}

uint64_t kd_xsend_sent(const kd_xsend *x)
{
    return x->sent;
}

bool kd_xsend_all_sent(kd_xsend *x)
{
    pthread_mutex_lock(&x->mu);
    bool all = x->sent == x->total;
    pthread_mutex_unlock(&x->mu);
    return all;
}

bool kd_xsend_waits(kd_xsend *x)
{
    pthread_mutex_lock(&x->mu);
    bool waits = x->g && !x->declared && x->head == x->tail;
    pthread_mutex_unlock(&x->mu);
    return waits;
}

void kd_xsend_stop(kd_xsend *x)
{
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    for (unsigned i = 0; i < x->nrd; i++)
        pthread_join(x->rd[i], NULL);
    x->nrd = 0;
}

void kd_xsend_free(kd_xsend *x)
{
    if (!x)
        return;
    kd_xsend_stop(x);
    for (uint64_t i = x->head; i < x->tail; i++)
        if (x->ring[i % KD_PEER_AHEAD].buf)
            kd_bufs_put(x->bufs, x->ring[i % KD_PEER_AHEAD].buf);
    ck__copy_out_close(x->out);
    kd_grow_free(x->g);
    kd_bufs_drop(x->bufs);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    free(x->lane);
    free(x);
}

/* The writer: each message of the queue into the copy, in order, until stopped. After
 * a failure it takes nothing more: the connection's thread reports it. */
static void *writer(void *arg)
{
    kd_xrecv *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->stop && !x->q_head)
            pthread_cond_wait(&x->cv, &x->mu);
        if (x->stop)
            break;
        kd_pmsg *m = x->q_head;
        x->q_head = m->next;
        if (!x->q_head)
            x->q_tail = NULL;
        bool failed = x->failed;   /* a checker's, maybe: read under the lock */
        bool declare = x->mpend;
        x->mpend = false;
        pthread_mutex_unlock(&x->mu);
        ck_err e = { 0 };
        /* A manifest that comes last is declared to the copy on this thread, before any
         * of its bytes (they are taken only once MANIFEST came). */
        int r = failed || !declare ? 0 : ck__copy_in_manifest(x->in, x->msize, x->msha, &e);
        if (r == 0 && !failed)
            r = ck__copy_in_write_at(x->in, m->arg, m->data, m->len, &e);
        pthread_mutex_lock(&x->mu);
        if (r < 0)
            fail(x, r, &e);
        if (r < 0 || x->failed) {
            kd_pmsg_free(m);
        } else {
            /* Written: the checkers' now (the manifest is open once its bytes are). */
            m->next = NULL;
            m->refs = x->nchk;
            if (x->w_tail)
                x->w_tail->next = m;
            else
                x->w_head = m;
            x->w_tail = m;
            retire(x);
            pthread_cond_broadcast(&x->chk_cv);
        }
        kd_ucx_signal(x->u);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

typedef struct checker_arg {
    kd_xrecv *x;
    unsigned k;
} checker_arg;

/* Checker k: each written message in turn, found by the bytes it took (the list is at
 * most a window long), hashed without the lock; the message stays until every checker
 * took it. */
static void *checker(void *arg)
{
    checker_arg *a = arg;
    kd_xrecv *x = a->x;
    unsigned k = a->k;
    free(a);
    pthread_mutex_lock(&x->mu);
    for (;;) {
        kd_pmsg *m = x->w_head;
        for (uint64_t pos = x->done; m && pos != x->at[k]; m = m->next)
            pos += m->len;
        if (x->stop || x->failed) {
            break;
        } else if (!m) {
            pthread_cond_wait(&x->chk_cv, &x->mu);
            continue;
        }
        pthread_mutex_unlock(&x->mu);
        ck_err e = { 0 };
        int r = ck__copy_in_check_at(x->in, k, m->arg, m->data, m->len, &e);
        pthread_mutex_lock(&x->mu);
        if (r < 0) {
            fail(x, r, &e);
        } else {
            x->at[k] += m->len;
            m->refs--;
            retire(x);
        }
        kd_ucx_signal(x->u);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* Stops the writer and the checkers (what each is on, it finishes) and waits for them. */
static void writer_stop(kd_xrecv *x)
{
    if (!x->started)
        return;
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    pthread_cond_signal(&x->cv);
    pthread_cond_broadcast(&x->chk_cv);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->th, NULL);
    for (unsigned k = 0; k + 1 < x->started; k++)
        pthread_join(x->chk_th[k], NULL);
    x->started = 0;
}

uint32_t kd_peer_window(unsigned checkers)
{
    uint64_t w = (uint64_t)checkers * CK_BLOCK_SIZE_DEFAULT;
    return w < KD_PEER_WINDOW_MIN ? KD_PEER_WINDOW_MIN
           : w > KD_PEER_WINDOW_MAX ? KD_PEER_WINDOW_MAX : (uint32_t)w;
}

unsigned kd_peer_checkers_default(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus <= 1 ? 0 : cpus - 1 < (long)KD_PEER_CHECKERS ? (unsigned)(cpus - 1)
                                                              : KD_PEER_CHECKERS;
}

int kd_xrecv_open(const char *root, const kd_preq *q, kd_ucx *u, unsigned checkers,
                  void (*log)(void *arg, const char *msg), void *log_arg, kd_xrecv **out,
                  ck_err *err)
{
    *out = NULL;
    kd_xrecv *x = calloc(1, sizeof *x);
    if (!x)
        return ck_err_set(err, -ENOMEM, "out of memory");
    x->u = u;
    x->nchk = checkers < KD_PEER_CHECKERS ? checkers : KD_PEER_CHECKERS;
    x->window = kd_peer_window(x->nchk);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    pthread_cond_init(&x->chk_cv, NULL);
    x->total = q->manifest_size;
    x->mlast = q->manifest_size == 0;
    x->mdecl = !x->mlast;
    for (uint32_t i = 0; i < q->n; i++) {
        if (q->files[i].size > UINT64_MAX - x->total) {
            kd_xrecv_free(x);
            return ck_err_set(err, -EINVAL, "copy of %s: its files add up to more than 2^64 "
                              "bytes", q->name);
        }
        x->total += q->files[i].size;
    }
    if (x->mlast) {
        x->base = malloc((q->n + 1) * sizeof *x->base);
        x->next = malloc((q->n ? q->n : 1) * sizeof *x->next);
        if (!x->base || !x->next) {
            kd_xrecv_free(x);
            return ck_err_set(err, -ENOMEM, "out of memory");
        }
        x->base[0] = 0;
        for (uint32_t i = 0; i < q->n; i++) {
            x->next[i] = x->base[i];
            x->base[i + 1] = x->base[i] + q->files[i].size;
            x->nfdone += !q->files[i].size;
        }
        x->nf = q->n;
        x->last_f = UINT32_MAX;
        x->cursor = x->total;      /* the manifest's first byte, once declared */
    }
    ck__copy_in_opts o = { .root = root, .name = q->name, .source = q->source,
                           .manifest_size = q->manifest_size,
                           .manifest_sha256 = x->mlast ? NULL : q->manifest_sha256,
                           .manifest_last = x->mlast, .block_size = x->mlast ? q->block_size : 0,
                           .files = q->files, .n_files = q->n, .log = log, .log_arg = log_arg,
                           .checkers = x->nchk };
    int r = ck__copy_in_begin(&o, &x->in, err);
    if (r == 0 && (r = -pthread_create(&x->th, NULL, writer, x)) < 0)
        ck_err_set(err, r, "copy of %s: starting its writer: %s", q->name, strerror(-r));
    if (r == 0)
        x->started = 1;
    for (unsigned k = 0; r == 0 && k < x->nchk; k++) {
        checker_arg *a = malloc(sizeof *a);
        if (a)
            *a = (checker_arg){ .x = x, .k = k };
        if (!a)
            r = ck_err_set(err, -ENOMEM, "out of memory");
        else if ((r = -pthread_create(&x->chk_th[k], NULL, checker, a)) < 0)
            ck_err_set(err, r, "copy of %s: starting its checker: %s", q->name, strerror(-r));
        if (r == 0)
            x->started++;
        else
            free(a);
    }
    if (r < 0) {
        kd_xrecv_free(x);
        return r;
    }
    *out = x;
    return 0;
}

/* The run of the stream that offset off (< total) lies in, and the offset of its next
 * byte to queue: a GET's whole stream; a PUT's data file (*file), or its manifest. */
static uint64_t *run_of(kd_xrecv *x, uint64_t off, uint64_t *end, uint32_t *file)
{
    *file = UINT32_MAX;
    *end = x->total;
    if (!x->mlast || off >= x->base[x->nf])
        return &x->cursor;
    *file = ck__copy_file_at(x->base, x->nf, off);
    *end = x->base[*file + 1];
    return &x->next[*file];
}

/* Holds m by offset: it lies in the stream, in one run and past what was queued of
 * it, takes no more bytes in than the window allows past the last ACK, and overlaps
 * nothing held. */
static int hold(kd_xrecv *x, kd_pmsg *m, ck_err *err)
{
    uint64_t off = m->arg, end;
    uint32_t f;
    if (m->len == 0 || off >= x->total || m->len > x->total - off)
        return ck_err_set(err, -EPROTO, "a DATA of %zu bytes at stream offset %llu, outside "
                          "the stream's %llu bytes%s", m->len, (unsigned long long)off,
                          (unsigned long long)x->total,
                          x->mdecl ? "" : " (its manifest not declared yet)");
    const uint64_t *next = run_of(x, off, &end, &f);
    if (off < *next || m->len > end - off) {
        char run[48] = "the stream";
        if (f != UINT32_MAX)
            snprintf(run, sizeof run, "data file %u of the PUT", f);
        else if (x->mlast)
            snprintf(run, sizeof run, "the manifest");
        return ck_err_set(err, -EPROTO, "a DATA of %zu bytes at stream offset %llu, outside "
                          "[%llu, %llu) (the bytes of %s not yet taken)", m->len,
                          (unsigned long long)off, (unsigned long long)*next,
                          (unsigned long long)end, run);
    }
    if (x->got + m->len > x->acked + x->window)
        return ck_err_set(err, -EPROTO, "a DATA of %zu bytes at stream offset %llu, past the "
                          "window (%llu bytes taken in, %llu acknowledged, a window of %u)",
                          m->len, (unsigned long long)off, (unsigned long long)x->got,
                          (unsigned long long)x->acked, x->window);
    if (x->nheld >= KD_PEER_HELD_MAX)
        return ck_err_set(err, -EPROTO, "more than %u DATA held, none of them next in its "
                          "file", KD_PEER_HELD_MAX);
    kd_pmsg *prev = NULL, *next_h = x->held;
    while (next_h && next_h->arg < off) {
        prev = next_h;
        next_h = next_h->next;
    }
    if ((next_h && off + m->len > next_h->arg) || (prev && prev->arg + prev->len > off))
        return ck_err_set(err, -EPROTO, "a DATA at stream offset %llu overlaps one that came "
                          "before", (unsigned long long)off);
    m->next = next_h;
    if (prev)
        prev->next = m;
    else
        x->held = m;
    x->nheld++;
    x->got += m->len;
    return 0;
}

int kd_xrecv_manifest(kd_xrecv *x, uint64_t size, const uint8_t *sha256, ck_err *err)
{
    if (x->mdecl)
        return ck_err_set(err, -EPROTO, "a MANIFEST in a stream whose manifest %s",
                          x->mlast ? "was declared already" : "came first");
    if (size > UINT64_MAX - x->total)
        return ck_err_set(err, -EPROTO, "a MANIFEST of %llu bytes: the stream would be more "
                          "than 2^64 bytes", (unsigned long long)size);
    x->total += size;
    x->mdecl = true;
    pthread_mutex_lock(&x->mu);
    x->msize = size;
    memcpy(x->msha, sha256, sizeof x->msha);
    x->mpend = true;
    pthread_mutex_unlock(&x->mu);
    return 0;
}

int kd_xrecv_waiting(kd_xrecv *x, ck_err *err)
{
    if (x->mdecl)
        return ck_err_set(err, -EPROTO, "a WAITING in a stream whose manifest %s",
                          x->mlast ? "was declared already" : "came first");
    x->waitings++;
    return 0;
}

unsigned kd_xrecv_waitings(const kd_xrecv *x)
{
    return x->waitings;
}

unsigned kd_xrecv_switches(const kd_xrecv *x)
{
    return x->switches;
}

int kd_xrecv_data(kd_xrecv *x, kd_pmsg *m, ck_err *err)
{
    int r = hold(x, m, err);
    if (r < 0) {
        kd_pmsg_free(m);
        return r;
    }
    /* What is next in its run goes to the writer: a file's first piece while fewer
     * than CK_COPY_BEGUN_MAX files are queued in part (the copy's bound: a sender
     * begins no more, but the last piece of a file it finished may come after the
     * first of the next), and the manifest's once every file is whole. Passes over the
     * held (by offset) until none moves. */
    kd_pmsg *first = NULL, *last = NULL;
    for (bool moved = true; moved;) {
        moved = false;
        for (kd_pmsg **pp = &x->held; *pp;) {
            kd_pmsg *h = *pp;
            uint64_t end;
            uint32_t f;
            uint64_t *next = run_of(x, h->arg, &end, &f);
            bool begins = f != UINT32_MAX && *next == x->base[f];
            if (h->arg != *next || (begins && x->fbegun == CK_COPY_BEGUN_MAX) ||
                (x->mlast && f == UINT32_MAX && x->nfdone < x->nf)) {
                pp = &h->next;
                continue;
            }
            *pp = h->next;
            x->nheld--;
            h->next = NULL;
            if (last)
                last->next = h;
            else
                first = h;
            last = h;
            *next += h->len;
            x->fbegun += begins;
            if (f != UINT32_MAX) {
                uint32_t l = x->last_f;
                x->switches += l != UINT32_MAX && f != l && x->next[l] < x->base[l + 1];
                x->last_f = f;
            }
            if (f != UINT32_MAX && *next == end) {
                x->fbegun--;
                x->nfdone++;
            }
            moved = true;
        }
    }
    if (first) {
        pthread_mutex_lock(&x->mu);
        if (x->q_tail)
            x->q_tail->next = first;
        else
            x->q_head = first;
        x->q_tail = last;
        pthread_cond_signal(&x->cv);
        pthread_mutex_unlock(&x->mu);
    }
    return 0;
}

int kd_xrecv_poll(kd_xrecv *x, kd_pconn *c, ck_err *err)
{
    pthread_mutex_lock(&x->mu);
    uint64_t done = x->done;
    int r = x->failed;
    if (r < 0)
        *err = x->ferr;
    pthread_mutex_unlock(&x->mu);
    if (r < 0)
        return r;
    /* Whole once the manifest, coming last, was declared too. */
    bool whole = done == x->total && x->mdecl;
    if (done == x->acked)
        return whole;
    x->acked = done;
    if ((r = kd_pconn_send(c, KD_P_ACK, done, NULL, 0)) < 0) {
        const char *why;
        kd_pconn_failed(c, &why);
        return ck_err_set(err, r, "peer %s: %s", kd_pconn_peer(c), why);
    }
    return whole ? 1 : 2;
}

uint32_t kd_xrecv_window(const kd_xrecv *x)
{
    return x->window;
}

uint64_t kd_xrecv_done(const kd_xrecv *x, uint64_t *total)
{
    *total = x->total;
    return x->acked;
}

int kd_xrecv_commit(kd_xrecv *x, ck_err *err)
{
    /* Every byte is written (kd_xrecv_poll said so): the copy is this thread's again. */
    writer_stop(x);
    return ck__copy_in_commit(x->in, err);
}

void kd_xrecv_free(kd_xrecv *x)
{
    if (!x)
        return;
    writer_stop(x);
    ck__copy_in_free(x->in);
    for (kd_pmsg *lists[3] = { x->held, x->q_head, x->w_head }, **l = lists; l < lists + 3;
         l++)
        while (*l) {
            kd_pmsg *h = *l;
            *l = h->next;
            kd_pmsg_free(h);
        }
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    pthread_cond_destroy(&x->chk_cv);
    free(x->base);
    free(x->next);
    free(x);
}
