/* kd_peer_key.c - the job's peer key, and the proofs its holders exchange in a peer
 * connection's HELLO (docs/PROTOCOL.md, "Who may speak"; decision 0194).
 *
 * Every daemon of a job holds one secret of 32 random bytes: DURABLE/.ckptd.key, which
 * the first daemon to start on the durable root makes (mode 0600, owned by the daemon's
 * user; the others read it), or the file --peer-key names. A connection to a peer
 * service proves both ways that each side holds it before the service takes anything
 * else: the caller's HELLO carries a fresh nonce; HELLO_OK carries the service's nonce
 * and HMAC-SHA256(key, "service" label, both nonces, both ids); the caller checks it and
 * answers AUTH with the same under the caller's label. The labels keep one side's proof
 * from being played back as the other's, the nonces keep an old proof from being played
 * again, and the key never crosses the wire.
 *
 * What follows AUTH is bound to it (decision 0196): both sides derive a session key
 * from the job's key, both nonces and both ids, and every message but DATA carries its
 * seal (kd_peer_seal: HMAC-SHA256 under the session key over its direction, its number
 * in that direction, its header and its payload; kd_peer_ucx.c adds and checks it). DATA
 * needs none: a stream's every block is checked against its manifest, and the manifest
 * against the SHA-256 that the sealed PUT or GET_OK declares. So someone on the path can
 * read a transfer (UCX does not encrypt), and can make it fail, but cannot change what
 * is committed. */
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kd.h"

#include "format/layout.h"
#include "io/rootfs.h"

#define KEY_HEAD "ckptd peer key 1 "
/* The file: the head, the key in hex, a newline. */
#define KEY_FILE_LEN (sizeof KEY_HEAD - 1 + 2 * KD_PEER_KEY_LEN + 1)

int kd_peer_random(void *p, size_t n, ck_err *err)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = getrandom((uint8_t *)p + got, n - got, 0);
        if (r < 0 && errno != EINTR)
            return ck_err_set(err, -errno, "getrandom: %s", strerror(errno));
        got += r > 0 ? (size_t)r : 0;
    }
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Reads and checks the key file fd (path names it). */
static int key_read(int fd, const char *path, kd_peer_key *key, ck_err *err)
{
    struct stat st;
    char buf[KEY_FILE_LEN];
    if (fstat(fd, &st) < 0)
        return ck_err_set(err, -errno, "peer key %s: %s", path, strerror(errno));
    if (st.st_uid != geteuid())
        return ck_err_set(err, -EPERM, "peer key %s belongs to uid %u, not this user (%u): "
                          "whoever owns it can speak as a daemon of the job", path,
                          (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return ck_err_set(err, -EPERM, "peer key %s has mode %04o: others may read or change "
                          "it, and speak as a daemon of the job (chmod 600 it)", path,
                          (unsigned)(st.st_mode & 07777));
    size_t n = 0;
    int r = ck__read_upto(fd, buf, KEY_FILE_LEN, &n);
    if (r < 0 && r != -EFBIG)
        return ck_err_set(err, r, "peer key %s: %s", path, strerror(-r));
    bool ok = r == 0 && n == KEY_FILE_LEN && !memcmp(buf, KEY_HEAD, sizeof KEY_HEAD - 1) &&
              buf[KEY_FILE_LEN - 1] == '\n';
    const char *hex = buf + sizeof KEY_HEAD - 1;
    for (size_t i = 0; ok && i < KD_PEER_KEY_LEN; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        ok = hi >= 0 && lo >= 0;
        key->b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (!ok)
        return ck_err_set(err, -EINVAL, "peer key %s is not a key file: one line, '%s' and "
                          "%d lowercase hex digits (%zu bytes; it has %zu%s)", path, KEY_HEAD,
                          2 * KD_PEER_KEY_LEN, (size_t)KEY_FILE_LEN, r < 0 ? n + 1 : n,
                          r < 0 ? " or more" : "");
    return 0;
}

/* Makes base in dir: a key of its own written to a file of a name no one else takes,
 * made durable, then linked to base (-EEXIST when another daemon's came first: theirs
 * is the key). */
static int key_make(int dirfd, const char *path, const char *base, ck_err *err)
{
    uint8_t k[KD_PEER_KEY_LEN];
    uint64_t tag;
    char tmp[NAME_MAX + 1], text[KEY_FILE_LEN + 1];
    int r = kd_peer_random(k, sizeof k, err);
    if (r == 0)
        r = kd_peer_random(&tag, sizeof tag, err);
    if (r == 0 && ck__name_tmp_unique(base, tag, tmp, sizeof tmp) < 0)
        r = ck_err_set(err, -ENAMETOOLONG, "making peer key %s: its name is too long", path);
    if (r < 0)
        return r;
    int at = snprintf(text, sizeof text, "%s", KEY_HEAD);
    for (size_t i = 0; i < sizeof k; i++)
        at += snprintf(text + at, sizeof text - (size_t)at, "%02x", k[i]);
    snprintf(text + at, sizeof text - (size_t)at, "\n");
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return ck_err_set(err, -errno, "making peer key %s: %s", path, strerror(errno));
    bool ok = write(fd, text, KEY_FILE_LEN) == (ssize_t)KEY_FILE_LEN && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (ok && linkat(dirfd, tmp, dirfd, base, 0) < 0) {
        ok = false;
        e = errno;
    }
    unlinkat(dirfd, tmp, 0);
    explicit_bzero(k, sizeof k);
    explicit_bzero(text, sizeof text);
    if (!ok)
        return e == EEXIST ? -EEXIST
                           : ck_err_set(err, -e, "making peer key %s: %s", path, strerror(e));
    if (fsync(dirfd) < 0)
        return ck_err_set(err, -errno, "making peer key %s: fsync of its directory: %s", path,
                          strerror(errno));
    return 0;
}

int kd_peer_key_load(const char *file, const char *durable, bool make, kd_peer_key *key,
                     ck_err *err)
{
    char dir[PATH_MAX];
    const char *base;
    memset(key, 0, sizeof *key);
    if (file) {
        snprintf(key->file, sizeof key->file, "%s", file);
        const char *slash = strrchr(file, '/');
        base = slash ? slash + 1 : file;
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) + (slash == file) : 1,
                 slash ? file : ".");
    } else {
        snprintf(key->file, sizeof key->file, "%s/%s", durable, CK_PEER_KEY);
        snprintf(dir, sizeof dir, "%s", durable);
        base = CK_PEER_KEY;
    }
    if (!base[0] || strlen(key->file) >= sizeof key->file - 1)
        return ck_err_set(err, -EINVAL, "peer key %s: not a file's path", key->file);
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return ck_err_set(err, -errno, "peer key %s: its directory %s: %s", key->file, dir,
                          strerror(errno));
    /* A link, FIFO or device planted in its place is refused, never followed or opened
     * for long. */
    int fd = ck__openat_reg(dirfd, base, O_RDONLY, 0);
    int r = 0;
    if (fd == -ENOENT && make) {
        r = key_make(dirfd, key->file, base, err);
        if (r == 0 || r == -EEXIST)
            fd = ck__openat_reg(dirfd, base, O_RDONLY, 0);
    }
    close(dirfd);
    if (r < 0 && r != -EEXIST)
        return r;
    if (fd < 0)
        return ck_err_set(err, fd, "peer key %s: %s%s", key->file, ck__why(fd),
                          fd == -ENOENT ? " (a daemon of the job makes it when it starts on "
                          "the durable root; or name the job's key with --peer-key)" : "");
    r = key_read(fd, key->file, key, err);
    close(fd);
    if (r < 0)
        explicit_bzero(key->b, sizeof key->b);
    return r;
}

/* The proof of the side named by label: HMAC-SHA256 over the label, both nonces, and
 * both ids with their NULs (so that no two id pairs give the same bytes). */
static void proof(const kd_peer_key *key, const char *label, const kd_phello *caller,
                  const kd_phello *service, uint8_t out[KD_PEER_PROOF_LEN])
{
    uint8_t msg[32 + 2 * KD_PEER_NONCE_LEN + 2 * CK_COPY_ID_MAX];
    size_t n = 0;
    n += (size_t)snprintf((char *)msg, 32, "%s", label) + 1;
    memcpy(msg + n, caller->nonce, KD_PEER_NONCE_LEN);
    n += KD_PEER_NONCE_LEN;
    memcpy(msg + n, service->nonce, KD_PEER_NONCE_LEN);
    n += KD_PEER_NONCE_LEN;
    n += (size_t)snprintf((char *)msg + n, CK_COPY_ID_MAX, "%s", caller->id) + 1;
    n += (size_t)snprintf((char *)msg + n, CK_COPY_ID_MAX, "%s", service->id) + 1;
    unsigned len = 0;
    if (!HMAC(EVP_sha256(), key->b, KD_PEER_KEY_LEN, msg, n, out, &len) ||
        len != KD_PEER_PROOF_LEN)
        memset(out, 0, KD_PEER_PROOF_LEN);     /* matches no proof a holder sends */
}

#define CALLER_LABEL "ckptd peer 9 caller"
#define SERVICE_LABEL "ckptd peer 9 service"
#define SESSION_LABEL "ckptd peer 9 session"

int kd_peer_greet(const char *id, kd_phello *me, ck__wbuf *w, ck_err *err)
{
    memset(me, 0, sizeof *me);
    snprintf(me->id, sizeof me->id, "%s", id);
    int r = kd_peer_random(me->nonce, sizeof me->nonce, err);
    if (r == 0)
        kd_pw_hello(w, me, false);
    return r;
}

int kd_peer_answer(const kd_peer_key *key, const char *id, uint64_t instance,
                   const kd_pmsg *hello, kd_phello *caller, kd_phello *me, ck__wbuf *w,
                   ck_err *err)
{
    int r = kd_pw_get_hello(hello, caller, err);
    if (r == 0) {
        memset(me, 0, sizeof *me);
        snprintf(me->id, sizeof me->id, "%s", id);
        me->instance = instance;
        r = kd_peer_random(me->nonce, sizeof me->nonce, err);
    }
    if (r == 0) {
        proof(key, SERVICE_LABEL, caller, me, me->proof);
        kd_pw_hello(w, me, true);
    }
    return r;
}

int kd_peer_check_answer(const kd_peer_key *key, const kd_phello *me, const kd_pmsg *ok,
                         kd_phello *service, ck__wbuf *auth, ck_err *err)
{
    uint8_t want[KD_PEER_PROOF_LEN];
    int r = kd_pw_get_hello(ok, service, err);
    if (r < 0)
        return r;
    proof(key, SERVICE_LABEL, me, service, want);
    if (CRYPTO_memcmp(want, service->proof, sizeof want))
        return ck_err_set(err, -EACCES, "ckptd %s does not prove that it holds this job's peer "
                          "key (%s): it is not a daemon of this job, or its key differs",
                          service->id, key->file);
    proof(key, CALLER_LABEL, me, service, want);
    kd_pw_auth(auth, want);
    return 0;
}

int kd_peer_check_auth(const kd_peer_key *key, const kd_phello *caller,
                       const kd_phello *me, const kd_pmsg *auth, ck_err *err)
{
    uint8_t got[KD_PEER_PROOF_LEN], want[KD_PEER_PROOF_LEN];
    int r = kd_pw_get_auth(auth, got, err);
    if (r < 0)
        return r;
    proof(key, CALLER_LABEL, caller, me, want);
    if (CRYPTO_memcmp(want, got, sizeof want))
        return ck_err_set(err, -EACCES, "the caller does not prove that it holds this job's "
                          "peer key: it is not a daemon of this job, or its key differs");
    return 0;
}

void kd_peer_session(const kd_peer_key *key, const kd_phello *caller, const kd_phello *service,
                     uint8_t out[KD_PEER_KEY_LEN])
{
    proof(key, SESSION_LABEL, caller, service, out);
}

int kd_peer_seal(const uint8_t session[KD_PEER_KEY_LEN], bool from_caller, uint64_t seq,
                 const uint8_t hdr[KD_PEER_HDR], const void *payload, size_t len,
                 uint8_t out[KD_PEER_SEAL_LEN])
{
    /* The direction and the number keep a message from passing as one the other side
     * sent, or as another of the same side's: a replay, a reorder or a drop fails at the
     * next message. */
    uint8_t pre[1 + 8 + KD_PEER_HDR];
    pre[0] = from_caller ? 'c' : 's';
    for (int i = 0; i < 8; i++)
        pre[1 + i] = (uint8_t)(seq >> (8 * i));
    memcpy(pre + 9, hdr, KD_PEER_HDR);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
                            OSSL_PARAM_construct_end() };
    size_t n = 0;
    bool ok = ctx && EVP_MAC_init(ctx, session, KD_PEER_KEY_LEN, params) == 1 &&
              EVP_MAC_update(ctx, pre, sizeof pre) == 1 &&
              (!len || EVP_MAC_update(ctx, payload, len) == 1) &&
              EVP_MAC_final(ctx, out, &n, KD_PEER_SEAL_LEN) == 1 && n == KD_PEER_SEAL_LEN;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? 0 : -ENOMEM;
}
