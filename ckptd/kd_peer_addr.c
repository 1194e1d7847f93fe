/* kd_peer_addr.c - where a peer service listens: ADDR[:PORT] as operators write it, and
 * the address file ROOT/.ckptd.ID.peer through which the daemons of a job find each
 * other on the durable root they share (docs/FORMAT.md, "Directory layout"):
 *
 *   ckptd peer 1
 *   address HOST:PORT
 *   instance I
 *
 * It is written under a temporary name, fsynced and renamed into place, so a reader
 * sees a whole file or none; removed at exit, and by recovery once its daemon's lock
 * is free (a daemon that was killed). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kd.h"

#include "io/rootfs.h"
#include "save/meet.h"

#define ADDR_FILE_MAX 512

int kd_addr_parse(const char *s, unsigned default_port, struct sockaddr_storage *sa,
                  socklen_t *len, ck_err *err)
{
    char host[KD_PEER_ADDR_MAX], port[16];
    const char *colon = strrchr(s, ':');
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof host)
        return ck_err_set(err, -EINVAL, "peer address '%.64s': 1 to %d bytes of HOST[:PORT]", s,
                          KD_PEER_ADDR_MAX - 1);
    snprintf(port, sizeof port, "%u", default_port);
    if (s[0] == '[') {
        /* [V6] or [V6]:PORT */
        const char *close = strchr(s, ']');
        if (!close || (close[1] && close[1] != ':'))
            return ck_err_set(err, -EINVAL, "peer address '%s': expected [IPV6]:PORT", s);
        snprintf(host, sizeof host, "%.*s", (int)(close - s - 1), s + 1);
        if (close[1])
            snprintf(port, sizeof port, "%s", close + 2);
    } else if (colon && strchr(s, ':') == colon) {
        snprintf(host, sizeof host, "%.*s", (int)(colon - s), s);
        snprintf(port, sizeof port, "%s", colon + 1);
    } else {
        snprintf(host, sizeof host, "%s", s);
    }
    unsigned p;
    if (!kd_decimal(port, 0, 65535, &p))
        return ck_err_set(err, -EINVAL, "peer address '%s': port '%s' is not 0 to 65535", s,
                          port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *res = NULL;
    int g = host[0] ? getaddrinfo(host, port, &hints, &res) : EAI_NONAME;
    if (g != 0 || !res)
        return ck_err_set(err, -EADDRNOTAVAIL, "peer address '%s': host '%s': %s", s, host,
                          g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

void kd_addr_format(const struct sockaddr *sa, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(out, len, "[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const void *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(out, len, "%s:%u", host, ntohs(a->sin_port));
    }
}

static int file_name(const char *id, char *out, size_t len, ck_err *err)
{
    int r = ck__node_id_check(id, err);
    if (r == 0 && ck__name_engine(id, CK_ENGINE_PEER, out, len) < 0)
        r = ck_err_set(err, -ENAMETOOLONG, "daemon id %s: too long", id);
    return r;
}

int kd_addr_publish(const char *root, const char *id, const char *addr, uint64_t instance,
                    ck_err *err)
{
    char name[CK_NODE_ID_MAX + 16], buf[ADDR_FILE_MAX];
    int r = file_name(id, name, sizeof name, err);
    if (r < 0)
        return r;
    int n = snprintf(buf, sizeof buf, "ckptd peer %d\naddress %s\ninstance %" PRIu64 "\n",
                     KD_PEER_VERSION, addr, instance);
    return ck__meet_put(root, root, name, buf, (size_t)n, true, err);
}

void kd_addr_unpublish(const char *root, const char *id)
{
    char name[CK_NODE_ID_MAX + 16];
    int rootfd = file_name(id, name, sizeof name, NULL) == 0 ? ck__root_open(root, NULL) : -1;
    if (rootfd < 0)
        return;
    unlinkat(rootfd, name, 0);
    close(rootfd);
}

int kd_addr_lookup(const char *root, const char *id, char *addr, size_t len,
                   uint64_t *instance, ck_err *err)
{
    char name[CK_NODE_ID_MAX + 16], buf[ADDR_FILE_MAX], a[KD_PEER_ADDR_MAX];
    int r = file_name(id, name, sizeof name, err);
    int rootfd = r < 0 ? r : ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd;
    size_t k = 0;
    r = ck__read_small(rootfd, name, buf, sizeof buf - 1, &k);
    close(rootfd);
    if (r < 0 && r != -EFBIG)
        return ck_err_set(err, r, "%s/%s: %s", root, name,
                          r == -ENOENT ? "no such file: no ckptd of that id publishes a peer "
                          "address there (not started with --peer-listen, or stopped)"
                          : ck__why(r));
    buf[k] = '\0';
    int v = 0, used = 0;
    if (r < 0 || sscanf(buf, "ckptd peer %d\naddress %127s\ninstance %" SCNu64 "\n%n", &v, a,
                        instance, &used) != 3 || (size_t)used != k || v != KD_PEER_VERSION ||
        strlen(a) >= len)
        return ck_err_set(err, -EBADMSG, "%s/%s: not a 'ckptd peer %d' address file", root,
                          name, KD_PEER_VERSION);
    snprintf(addr, len, "%s", a);
    return 0;
}
