/* The peer transfers' chunk buffers (ckptd/kd_peer_bufs.c, docs/decisions/
 * 0186-peer-transfer-pipeline.md): aligned for O_DIRECT, used again rather than
 * allocated per DATA, at most `keep` of them kept idle, and a pool whose owner let go
 * while buffers were still out (a send that completes after its transfer ended, a
 * message a writer thread still holds) lives until the last one came back, from
 * whichever thread gives it back. Run under ASan, a pool freed too early or never is a
 * use after free or a leak. */
#include <pthread.h>
#include <stdint.h>

#include "ckpt_testlib.h"
#include "kd.h"

typedef struct back {
    kd_bufs *b;
    void *p[2];
} back;

static void *give_back(void *arg)
{
    back *k = arg;
    for (int i = 0; i < 2; i++) {
        ((volatile uint8_t *)k->p[i])[0] = 1;      /* still ours to touch */
        kd_bufs_put(k->b, k->p[i]);
    }
    return NULL;
}

int main(void)
{
    size_t size = 4 * KD_PEER_DATA_ALIGN;
    kd_bufs *b = kd_bufs_new(size, 2);
    CHECK(b && kd_bufs_size(b) == size, "a pool of %zu-byte buffers", size);
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = kd_bufs_get(b);
        CHECK(p[i] && (uintptr_t)p[i] % KD_PEER_DATA_ALIGN == 0,
              "buffer %d is aligned to %u", i, KD_PEER_DATA_ALIGN);
    }
    /* Given back, a buffer is taken again; past `keep` idle ones, they are freed. */
    kd_bufs_put(b, p[3]);
    void *again = kd_bufs_get(b);
    CHECK(again == p[3], "a buffer given back is used again");
    kd_bufs_put(b, again);
    kd_bufs_put(b, p[2]);
    /* The owner lets go with two out; another thread gives them back later. */
    kd_bufs_drop(b);
    back k = { .b = b, .p = { p[0], p[1] } };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, give_back, &k) == 0, "a thread to give them back");
    pthread_join(th, NULL);
    /* A pool dropped with nothing out goes at once. */
    kd_bufs *idle = kd_bufs_new(size, 2);
    CHECK(idle != NULL, "a second pool");
    kd_bufs_put(idle, kd_bufs_get(idle));
    kd_bufs_drop(idle);
    if (tl_failures)
        return 1;
    printf("PASS test_peer_bufs_live_until_the_last_buffer_comes_back\n");
    return 0;
}
