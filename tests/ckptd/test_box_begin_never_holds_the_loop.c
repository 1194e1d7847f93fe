/* A BEGIN's box list never holds ckptd's event loop. The lists that made the old
 * overlap sweep quadratic (a staircase: row i of the tensor cut after column i, so
 * every left box shares the column range of all the rows below it; 16384 boxes held
 * every client for seconds) are checked beside the loop:
 *   - 16 clients each send such a list (its last row's two boxes overlapping) and a
 *     STATUS behind it in the same write: each gets STATUS_OK first and the BEGIN's
 *     ERROR after it (an order on one connection, not a time: the loop answered the
 *     STATUS while the list was being checked; on a loop that checks it itself the
 *     ERROR comes first and the STATUS never);
 *   - each ERROR names the save and the overlapping boxes; the connection stays (the
 *     message was well formed: its plan is what was refused, as for a bad layout) and
 *     answers a STATUS after it;
 *   - another client's STATUS, sent after them all, is answered;
 *   - a staircase that tiles is admitted;
 *   - a good save commits afterwards.
 * The STATUS's and the checks' times are printed. */
#include "kc_testlib.h"

#define CLIENTS 16
#define ROWS 8192u

static ck_box *boxes;
static uint64_t *writers;

/* Rank 0's BEGIN of name: one U8 tensor of ROWS x (ROWS + 1) as a staircase of 2 ROWS
 * boxes; with overlap, the last row's left box is the whole row (so the old sweep,
 * which went along the columns, met the overlap last). */
static kc_wire staircase(const char *name, bool overlap, kc_wire_tensor *t)
{
    for (uint32_t i = 0; i < ROWS; i++) {
        uint64_t cut = i + 1;
        boxes[2 * i] = (ck_box){ .ndim = 2, .off = { i, 0 },
                                 .len = { 1, overlap && i == ROWS - 1 ? ROWS + 1 : cut } };
        boxes[2 * i + 1] = (ck_box){ .ndim = 2, .off = { i, cut }, .len = { 1, ROWS + 1 - cut } };
        writers[2 * i] = writers[2 * i + 1] = 0;
    }
    *t = (kc_wire_tensor){ .name = "w", .dtype = CK_U8, .ndim = 2,
                            .shape = { ROWS, ROWS + 1 }, .pl = { { .kind = CK_BOXES } },
                            .nboxes = 2 * ROWS, .boxes = boxes, .writers = writers };
    kc_wire d = { .step = 1, .ntensors = 1, .tensors = t,
                   .staging_size = 256u << 20 };   /* the image, each box 4 KiB-aligned */
    snprintf(d.name, sizeof d.name, "%s", name);
    d.mesh = (ck_mesh){ .ndim = 1, .size = { 1 } };
    return d;
}

int main(void)
{
    kc_watchdog(170);
    boxes = calloc(2 * ROWS, sizeof *boxes);
    writers = calloc(2 * ROWS, sizeof *writers);
    REQUIRE(boxes && writers, "out of memory");
    char root[PATH_MAX], msg[CK_ERR_MSG_MAX];
    tl_tmpdir(root, sizeof root, "kdboxes");
    kd_proc d;
    kd_start(&d, root, NULL);
    kc_daemon_pid = d.pid;
    ck_err err = { 0 };
    int status_fd;
    REQUIRE(ck__conn_connect(d.sock, &status_fd, &err) == 0, "%s", ck_err_msg(&err));

    /* The bad lists, each with a STATUS behind it; then another client's STATUS. */
    int fd[CLIENTS];
    double t0 = kd_now();
    for (int i = 0; i < CLIENTS; i++) {
        char name[32];
        snprintf(name, sizeof name, "stairs-%d", i);
        kc_wire_tensor t;
        kc_wire b = staircase(name, true, &t);
        fd[i] = kc_raw_begin_then(d.sock, &b, true);
    }
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS);
    ck__proto_end(&w);
    REQUIRE(ck__conn_send(status_fd, &w, -1, &err) == 0, "STATUS: %s", ck_err_msg(&err));
    ck__wbuf_free(&w);
    double t_sent = kd_now();
    uint16_t other = kc_reply(status_fd, NULL, 0);
    double t_status = kd_now();
    CHECK(other == CK_MSG_STATUS_OK, "the other client's STATUS got message type %u", other);
    close(status_fd);
    int ordered = 0, named = 0, kept = 0;
    for (int i = 0; i < CLIENTS; i++) {
        msg[0] = '\0';
        uint16_t first = kc_reply(fd[i], msg, sizeof msg);
        uint16_t second = first == CK_MSG_STATUS_OK ? kc_reply(fd[i], msg, sizeof msg) : 0;
        ordered += first == CK_MSG_STATUS_OK && second == CK_MSG_ERROR;
        named += strstr(msg, "stairs-") && strstr(msg, "boxes") && strstr(msg, "overlap") &&
                 strstr(msg, "[8191:8192, 0:8193)") != NULL;
        ck__proto_start(&w, CK_MSG_STATUS);
        ck__proto_end(&w);
        kept += ck__conn_send(fd[i], &w, -1, &err) == 0 &&
                kc_reply(fd[i], NULL, 0) == CK_MSG_STATUS_OK;
        ck__wbuf_free(&w);
        close(fd[i]);
        if (first != CK_MSG_STATUS_OK || second != CK_MSG_ERROR)
            fprintf(stderr, "client %d: message types %u then %u: %s\n", i, first, second, msg);
    }
    double t_last = kd_now();
    printf("%d staircases of %u boxes, each with a STATUS behind it: %d STATUS answered "
           "before the BEGIN's ERROR; another client's STATUS answered %.3f s after it was "
           "sent; all ERRORs read %.3f s after the first BEGIN\n", CLIENTS, 2 * ROWS, ordered,
           t_status - t_sent, t_last - t0);
    CHECK(ordered == CLIENTS, "%d of %d connections got STATUS_OK before their BEGIN's ERROR: "
          "the loop checked the box lists itself", ordered, CLIENTS);
    CHECK(named == CLIENTS, "%d of %d ERRORs name the overlapping boxes of the last row (the "
          "last: '%s')", named, CLIENTS, msg);
    CHECK(kept == CLIENTS, "%d of %d connections answered a STATUS after the bad list", kept,
          CLIENTS);

    /* A staircase that tiles goes through the planner to its ADMIT. */
    kc_wire_tensor t;
    kc_wire good = staircase("stairs-good", false, &t);
    int g = kc_raw_begin(d.sock, &good);
    msg[0] = '\0';
    uint16_t type = kc_reply(g, msg, sizeof msg);
    CHECK(type == CK_MSG_ADMIT, "the staircase that tiles got message type %u: %s", type, msg);
    close(g);

    CHECK(kd_wait_pid(kd_synth(root, d.sock, "fine", "2", "2", "1MiB", NULL), 60) == 0,
          "a normal save failed after the box lists");
    CHECK(tl_verify_deep(root, "fine", 7) == 0, "the normal save is bad");
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0 (see %s)", d.log);
    kc_daemon_pid = 0;
    free(boxes);
    free(writers);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    printf("ok: box lists checked beside the loop, STATUS answered meanwhile, each bad list "
           "named, its connection kept, a good one admitted\n");
    return 0;
}
