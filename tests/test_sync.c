/* Unit tests of daemon/sync.c, the training-mode state machine: joins and
 * refusals, when the node's clock and barrier move, what a lost, leaving
 * or rejoining worker does to them, and when an ssp pull may go. No
 * sockets, no loop: time is passed in. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../daemon/log.h"
#include "../daemon/sync.h"
#include "../proto/status.h"

#include "expect.h"
#include "membuf.h"

/* Owners are compared, never dereferenced: any distinct addresses do. */
static const char owner_a, owner_b, owner_c;

static void make(psd_sync *y, int workers)
{
    assert_int_equal(psd_sync_init(y, workers, 0), 0);
}

static void join(psd_sync *y, int32_t w, uint64_t client, const void *owner)
{
    char err[160];
    int rc = psd_sync_join(y, w, client, owner, "127.0.0.1:9", err,
                           sizeof err);
    if (rc)
        print_error("join of worker %d: %s\n", (int)w, err);
    EXPECT_INT(rc, 0, "psd_sync_join of worker %d", (int)w);
}

/* A version 4 HELLO: the join is pending until confirmed. */
static void join_pending(psd_sync *y, int32_t w, uint64_t client,
                         const void *owner)
{
    char err[160];
    int rc = psd_sync_join_pending(y, w, client, owner, "127.0.0.1:10", err,
                                   sizeof err);
    if (rc)
        print_error("pending join of worker %d: %s\n", (int)w, err);
    EXPECT_INT(rc, 0, "psd_sync_join_pending of worker %d", (int)w);
}

/* y saved and loaded into z (made here, nworkers as y), as a node
 * restarted at now_ms from that snapshot in format 4 (as saved) or 3
 * (each worker's 42 bytes of refused and lost clients cut off). */
static void restarted_as(const psd_sync *y, psd_sync *z, uint64_t now_ms,
                         int format)
{
    char err[256];
    membuf m = { 0 };
    psd_sink o = { mem_put, &m };
    assert_int_equal(psd_sync_save(y, &o), 0);
    assert_int_equal((int)m.len, 20 + 79 * y->nworkers);
    if (format == 3)
        for (int w = 1; w < y->nworkers; w++)
            memmove(m.p + 20 + 37 * w, m.p + 20 + 79 * w, 37);
    m.len = format == 3 ? 20 + 37 * (size_t)y->nworkers : m.len;
    make(z, y->nworkers);
    psd_source in = { mem_get, &m };
    if (psd_sync_load(z, &in, format, now_ms, err, sizeof err))
        fail_msg("load: %s", err);
    free(m.p);
}

static void restarted(const psd_sync *y, psd_sync *z, uint64_t now_ms)
{
    restarted_as(y, z, now_ms, 4);
}

/* Workers 0 and 1 of two, joined as clients 1 and 2 (owners a and b). */
static void two_workers(psd_sync *y)
{
    make(y, 2);
    join(y, 0, 1, &owner_a);
    join(y, 1, 2, &owner_b);
}

/* The clock the node has for worker w. */
static uint64_t clock_of(const psd_sync *y, int32_t w)
{
    uint64_t c, b;
    psd_sync_position(y, w, &c, &b);
    return c;
}

static void reach(psd_sync *y, int32_t w, int barrier, uint64_t v)
{
    char err[160];
    EXPECT_INT(psd_sync_reach(y, w, barrier, v, err, sizeof err), 0,
               "worker %d reaching %s %llu", (int)w,
               barrier ? "barrier" : "clock", (unsigned long long)v);
}

/* Three workers, each at clock 3, and the node's clock there too. */
static void three_workers_at_3(psd_sync *y)
{
    make(y, 3);
    join(y, 0, 1, &owner_a);
    join(y, 1, 2, &owner_b);
    join(y, 2, 3, &owner_c);
    for (int w = 0; w < 3; w++)
        reach(y, w, 0, 3);
    psd_sync_advance(y, 1);
}

/* Both workers of two_workers() finish clocks 1..n together. */
static void clocks_together(psd_sync *y, uint64_t n)
{
    for (uint64_t k = 1; k <= n; k++) {
        reach(y, 0, 0, k);
        reach(y, 1, 0, k);
        psd_sync_advance(y, k);
    }
}

/* Two workers at clock 2; worker 0 finished iteration 3, worker 1 pushed
 * in it and lost its connection at 10 ms (grace 30 s): a new process for
 * worker 1 starts after those sums. */
static void worker_1_lost_mid_step(psd_sync *y)
{
    two_workers(y);
    clocks_together(y, 2);
    reach(y, 0, 0, 3);
    psd_sync_summed(y, 1);                  /* a push of iteration 3 */
    EXPECT_INT(psd_sync_lost(y, 1, &owner_b, 10, 30), 0, "lost, grace 30 s");
}

/* Warnings (and worse) logged between capture_begin and capture_end go
 * to a temporary file; capture_end returns them (malloc'd, "" for none)
 * and puts stderr and the level (error: the tests are quiet) back. */
static int cap_fd = -1, cap_saved = -1;

static void capture_begin(void)
{
    char path[] = "/tmp/psd-test-sync-XXXXXX";
    cap_fd = mkstemp(path);
    assert_true(cap_fd >= 0);
    unlink(path);
    fflush(stderr);
    cap_saved = dup(2);
    dup2(cap_fd, 2);
    psd_log_set_level(PSD_LOG_WARN);
}

static char *capture_end(void)
{
    psd_log_set_level(PSD_LOG_ERROR);
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    char *buf = calloc(1, 4096);
    assert_non_null(buf);
    assert_true(pread(cap_fd, buf, 4095, 0) >= 0);
    close(cap_fd);
    return buf;
}

/* Runs psd_sync_tick (grace 30 s, the log every 10 s) with warnings
 * captured; returns what it logged (malloc'd, "" for nothing). */
static char *tick_log(psd_sync *y, uint64_t now_ms, int holding)
{
    capture_begin();
    psd_sync_tick(y, now_ms, 30, holding, 10000);
    return capture_end();
}

static void test_join_refuses_ids_out_of_range_and_a_second_client(
    void **state)
{
    (void)state;
    psd_sync y;
    char err[160];
    make(&y, 2);
    EXPECT_INT(psd_sync_join(&y, 2, 1, &owner_a, "h:1", err, sizeof err),
               PSW_EINVAL, "worker 2 of 2");
    EXPECT_SUBSTR(err, "worker 2 is out of range", "the reason");
    join(&y, 0, 1, &owner_a);
    EXPECT_INT(psd_sync_join(&y, 0, 2, &owner_b, "h:2", err, sizeof err),
               PSW_EBUSY, "a second client claiming worker 0");
    EXPECT_SUBSTR(err, "already connected from 127.0.0.1:9", "the reason");
    EXPECT_INT(psd_sync_holds(&y, 0, &owner_a), 1, "the first still holds");
    psd_sync_destroy(&y);
}

static void test_same_client_reconnecting_takes_its_worker_over(
    void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 1);
    join(&y, 0, 7, &owner_a);
    join(&y, 0, 7, &owner_b);
    EXPECT_INT(psd_sync_holds(&y, 0, &owner_a), 0, "old session holds");
    EXPECT_INT(psd_sync_holds(&y, 0, &owner_b), 1, "new session holds");
    /* The old connection closing later must not mark the worker lost. */
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 5, 0), 0, "old session lost");
    EXPECT_INT(psd_sync_waited(&y), 1, "workers waited for");
    EXPECT_INT(psd_sync_holds(&y, 0, &owner_b), 1, "new session holds");
    psd_sync_destroy(&y);
}

static void test_clock_moves_when_the_slowest_worker_arrives(void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 3);
    join(&y, 0, 1, &owner_a);
    join(&y, 1, 2, &owner_b);
    join(&y, 2, 3, &owner_c);
    reach(&y, 0, 0, 1);
    reach(&y, 1, 0, 1);
    EXPECT_INT(psd_sync_advance(&y, 10), 0, "two of three at clock 1");
    EXPECT_U64(y.clock, 0, "node clock");
    reach(&y, 2, 0, 1);
    EXPECT_INT(psd_sync_advance(&y, 20), 1, "all three at clock 1");
    EXPECT_U64(y.clock, 1, "node clock");
    EXPECT_U64(y.wait[0].since_ms, 20, "when it moved");
    EXPECT_INT(psd_sync_advance(&y, 30), 0, "advancing again");
    /* A repeated clock counts once. */
    reach(&y, 0, 0, 1);
    uint64_t c, b;
    psd_sync_position(&y, 0, &c, &b);
    EXPECT_U64(c, 1, "worker 0's clock after a repeat");
    psd_sync_destroy(&y);
}

static void test_clock_numbers_out_of_range_are_refused(void **state)
{
    (void)state;
    psd_sync y;
    char err[160];
    make(&y, 1);
    join(&y, 0, 1, &owner_a);
    EXPECT_INT(psd_sync_reach(&y, 0, 0, 0, err, sizeof err), PSW_EINVAL,
               "clock 0");
    EXPECT_SUBSTR(err, "clock 0 is out of range: counts start at 1; at most ",
                  "the reason for 0");
    /* At 0 (a fresh node) any value up to 2^62 is taken (the next test),
     * none past it: no count may wrap. */
    EXPECT_INT(psd_sync_reach(&y, 0, 0, UINT64_MAX, err, sizeof err),
               PSW_EINVAL, "clock 2^64 - 1");
    EXPECT_INT(psd_sync_reach(&y, 0, 1, (UINT64_C(1) << 62) + 1, err,
                              sizeof err), PSW_EINVAL, "barrier 2^62 + 1");
    reach(&y, 0, 1, 5);
    EXPECT_INT(psd_sync_reach(&y, 0, 1, 1000006, err, sizeof err),
               PSW_EINVAL, "barrier a million and one ahead");
    EXPECT_SUBSTR(err, "out of range", "the reason");
    reach(&y, 0, 1, 1000005);
    psd_sync_destroy(&y);
    /* A first value on a node with no count: at most 2^61, so that what a
     * client gives leaves room (a CLOCK of 2^62 was taken, and each later
     * one refused: the worker stuck for good). With counts of other
     * workers here: at most a million past the largest. */
    make(&y, 2);
    y.synchronous = 1;                   /* a node with bsp or ssp tables */
    join(&y, 0, 1, &owner_a);
    join(&y, 1, 2, &owner_b);
    EXPECT_INT(psd_sync_reach(&y, 0, 0, UINT64_C(1) << 62, err, sizeof err),
               PSW_EINVAL, "a first clock of 2^62");
    EXPECT_SUBSTR(err, "clock 4611686018427387904 is out of range: at most "
                  "2305843009213693952 (2^61, with no count of this worker "
                  "on this node)",
                  "the reason");
    reach(&y, 1, 0, 7);
    EXPECT_INT(psd_sync_reach(&y, 0, 0, 1000008, err, sizeof err),
               PSW_EINVAL, "a first clock far past worker 1's");
    EXPECT_SUBSTR(err, "at most 1000007 (1000000 past the largest count of "
                  "this node's workers)", "the reason");
    reach(&y, 0, 0, 1000007);
    reach(&y, 0, 0, 1000008);
    psd_sync_destroy(&y);
    /* An async job's workers may be any distance apart: their clocks are
     * bounded by their own counts only (on a node restarted empty, a
     * slow worker's CLOCK came first and the fast one's were refused).
     * Barriers hold every worker, so they are bounded as before; and the
     * largest of the others' counts is taken, not the first found. */
    make(&y, 3);
    join(&y, 0, 1, &owner_a);
    join(&y, 1, 2, &owner_b);
    join(&y, 2, 3, &owner_c);
    reach(&y, 0, 0, 10);
    reach(&y, 1, 0, 1500000);
    reach(&y, 0, 1, 10);
    reach(&y, 1, 1, 1000010);
    EXPECT_INT(psd_sync_reach(&y, 2, 1, 1000010 + 1000001, err, sizeof err),
               PSW_EINVAL, "a barrier a million past the largest");
    reach(&y, 2, 1, 1000010 + 1000000);
    psd_sync_destroy(&y);
}

/* A CLOCK more than two past the node's count for the worker means the
 * node missed calls (down, or back from an older snapshot, its rows
 * missing those iterations): it takes it, and says so. One or two more
 * is quiet (nodes may differ by one without missing anything). */
static void test_a_clock_that_skips_is_taken_and_logged(void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 1);
    join(&y, 0, 1, &owner_a);
    /* The warning is collapsed (psd_warn_rep): an earlier test's skip
     * must not have opened its window. */
    psd_log_flush_all();
    capture_begin();
    reach(&y, 0, 0, 1);
    reach(&y, 0, 0, 3);                  /* one skipped: nodes may differ */
    reach(&y, 0, 0, 6);
    char *buf = capture_end();
    EXPECT_SUBSTR(buf, "worker 0's clock 6 skips 2 past this node's count "
                  "for it (3): this node missed those calls", "the warning");
    if (strstr(buf, "clock 3 skips"))
        fail_msg("a clock that skips one is no news: %s", buf);
    free(buf);
    EXPECT_U64(clock_of(&y, 0), 6, "taken");
    psd_sync_destroy(&y);
}

/* A node that lost its state (started empty) while the job ran past a
 * million clocks: its counts are 0, and the workers' next CLOCK and
 * BARRIER tell it where the job is. Refused as a jump, every ps_clock
 * failed on that node for good. */
static void test_a_node_at_zero_takes_any_clock(void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 1);
    join(&y, 0, 1, &owner_a);
    reach(&y, 0, 0, 2500001);
    reach(&y, 0, 1, 2500001);
    EXPECT_INT(psd_sync_advance(&y, 1), 1, "the node's clock moves");
    EXPECT_U64(y.clock, 2500001, "node clock");
    psd_sync_destroy(&y);
}

static void test_barrier_and_clock_move_independently(void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 1, 1);
    reach(&y, 1, 1, 1);
    EXPECT_INT(psd_sync_advance(&y, 1), 0, "a barrier is not a clock");
    EXPECT_U64(y.barrier, 1, "node barrier");
    EXPECT_U64(y.clock, 0, "node clock");
    psd_sync_destroy(&y);
}

static void test_lost_worker_is_waited_for_until_its_grace_runs_out(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 0, 1);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 1000, 2), 0, "lost, grace 2 s");
    EXPECT_INT(psd_sync_tick(&y, 2999, 2, 0, 10000), 0, "tick before 2 s");
    EXPECT_INT(psd_sync_waited(&y), 2, "still waited for");
    EXPECT_INT(psd_sync_tick(&y, 3000, 2, 0, 10000), 1, "tick at 2 s");
    EXPECT_INT(psd_sync_waited(&y), 1, "waited for after the grace");
    EXPECT_INT(psd_sync_advance(&y, 3000), 1, "clock moves without it");
    EXPECT_U64(y.clock, 1, "node clock");
    psd_sync_destroy(&y);
}

static void test_lost_worker_with_no_grace_stops_being_waited_for_at_once(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 5, 0), 1, "lost, grace 0");
    EXPECT_INT(psd_sync_waited(&y), 1, "waited for");
    /* Worker 0 reached clock 1 and was let go too: the node moves to it
     * with nobody waited for, alone (nodes that still have the workers
     * wait), and says so. */
    reach(&y, 0, 0, 1);
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 6, 0), 1, "lost, grace 0");
    y.synchronous = 1;                      /* a bsp or ssp table */
    psd_log_flush_all();
    capture_begin();
    EXPECT_INT(psd_sync_advance(&y, 7), 1, "the clock moves");
    char *log = capture_end();
    EXPECT_SUBSTR(log, "clock 0 -> 1 with no worker waited for (each left, "
                  "or was let go after worker_grace)", "the warning");
    free(log);
    psd_sync_destroy(&y);
}

static void test_worker_that_left_and_rejoins_starts_at_the_nodes_clock(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_b), 1, "worker 1 leaves");
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_b), 0, "leaving twice");
    for (uint64_t k = 1; k <= 5; k++)
        reach(&y, 0, 0, k);
    EXPECT_INT(psd_sync_advance(&y, 1), 1, "worker 0 alone moves the clock");
    EXPECT_U64(y.clock, 5, "node clock");
    join(&y, 1, 2, &owner_c);
    EXPECT_U64(clock_of(&y, 1), 5, "the rejoined worker's clock");
    psd_sync_destroy(&y);
}

/* When every worker has left by its own LEAVE at one clock and one
 * barrier count, the job ran its course: all are absent again, and the
 * next job waits for all workers, live and in a replay of the same WORKER
 * records. Workers that left at different counts, or one lost whose grace
 * ran out, leave a job that goes on when one comes back. */
static void test_a_job_whose_workers_all_closed_at_one_clock_is_over(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 0, 3);
    reach(&y, 1, 0, 3);
    psd_sync_advance(&y, 1);
    psd_sync_leave(&y, 0, &owner_a);
    EXPECT_INT(psd_sync_waited(&y), 1, "waited for after worker 0 left");
    psd_sync_leave(&y, 1, &owner_b);
    EXPECT_INT(psd_sync_waited(&y), 2, "waited for once the job is over");
    EXPECT_INT(y.workers[0].state, PSD_W_ABSENT, "worker 0 after the job");
    capture_begin();
    join(&y, 0, 3, &owner_c);
    char *log = capture_end();
    EXPECT_INT((int)strlen(log), 0, "a new job's first worker: said %s",
               log);
    free(log);
    reach(&y, 0, 0, 4);
    EXPECT_INT(psd_sync_advance(&y, 2), 0, "worker 0 alone moves the clock");
    join(&y, 1, 4, &owner_a);
    EXPECT_U64(clock_of(&y, 1), 3, "worker 1 starts at the node's clock");
    reach(&y, 1, 0, 4);
    EXPECT_INT(psd_sync_advance(&y, 3), 1, "both at 4 move it");
    psd_sync_destroy(&y);

    /* The journal's records of the same: joined, joined, CLOCKs, left by
     * LEAVE twice. */
    psd_sync z;
    make(&z, 2);
    psd_sync_replay(&z, 0, 1, 0, 1, 0, 0, NULL, 0, 0, 0, 1);
    psd_sync_replay(&z, 1, 1, 0, 2, 0, 0, NULL, 0, 0, 0, 1);
    z.clock = 3;
    psd_sync_replay(&z, 0, 0, 1, 1, 3, 0, NULL, 0, 0, 0, 1);
    psd_sync_replay(&z, 1, 0, 1, 2, 3, 0, NULL, 0, 0, 0, 1);
    EXPECT_INT(z.workers[0].state == PSD_W_ABSENT &&
               z.workers[1].state == PSD_W_ABSENT, 1,
               "both absent after the replay");
    psd_sync_destroy(&z);

    /* Worker 1 left at clock 3 (out of data), worker 0 at 5: not known
     * to be over; worker 1 back goes on alone. */
    two_workers(&y);
    reach(&y, 0, 0, 3);
    reach(&y, 1, 0, 3);
    psd_sync_leave(&y, 1, &owner_b);
    reach(&y, 0, 0, 4);
    reach(&y, 0, 0, 5);
    psd_sync_advance(&y, 1);
    psd_sync_leave(&y, 0, &owner_a);
    EXPECT_INT(psd_sync_waited(&y), 0, "waited for after uneven leaves");
    /* Said: a new job started without end-job trains alone (a trial). */
    capture_begin();
    join(&y, 1, 3, &owner_c);
    log = capture_end();
    EXPECT_SUBSTR(log, "worker 1 (from 127.0.0.1:9) joins at clock 5, where the "
                  "job's other worker has left: nobody waits for "
                  "them, so it trains alone until they join. If this is a "
                  "new job, run psctl end-job first", "the warning");
    free(log);
    EXPECT_INT(psd_sync_waited(&y), 1, "waited for: worker 1 back");
    psd_sync_destroy(&y);

    /* The same with three workers: the others counted. */
    three_workers_at_3(&y);
    psd_sync_leave(&y, 2, &owner_c);
    reach(&y, 0, 0, 4);
    reach(&y, 1, 0, 4);
    psd_sync_advance(&y, 2);
    psd_sync_leave(&y, 0, &owner_a);
    psd_sync_leave(&y, 1, &owner_b);
    capture_begin();
    join(&y, 0, 9, &owner_a);
    log = capture_end();
    EXPECT_SUBSTR(log, "joins at clock 4, where the job's 2 other workers "
                  "have all left", "the warning, three workers");
    free(log);
    psd_sync_destroy(&y);

    /* Worker 0 closed; worker 1 was lost at the same clock and its grace
     * ran out: a crash is no end of the job, and its replacement goes on
     * alone instead of waiting for worker 0, which finished. */
    two_workers(&y);
    reach(&y, 0, 0, 3);
    reach(&y, 1, 0, 3);
    psd_sync_advance(&y, 1);
    psd_sync_leave(&y, 0, &owner_a);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 5, 0), 1, "lost, grace 0");
    join(&y, 1, 9, &owner_c);
    EXPECT_INT(psd_sync_waited(&y), 1, "waited for: worker 1's replacement");
    psd_sync_destroy(&y);
}

/* A snapshot taken between the first and the last close of a job keeps
 * who closed: after the restart, the others' closes still end the job, and
 * the next job waits for all its workers. A snapshot of format 2 (no
 * `closed`) loads with every leave taken for a close (the older psd that
 * wrote it ended a job once all had left at one count), and a `closed`
 * byte that does not fit its state is refused. */
static void test_a_job_end_survives_a_snapshot_between_the_closes(
    void **state)
{
    (void)state;
    char err[256];
    psd_sync y;
    three_workers_at_3(&y);
    psd_sync_leave(&y, 0, &owner_a);
    membuf m = { 0 };
    psd_sink o = { mem_put, &m };
    assert_int_equal(psd_sync_save(&y, &o), 0);
    EXPECT_INT((int)m.len, 20 + 3 * 79, "20 bytes, then 79 per worker");
    psd_sync_destroy(&y);

    psd_sync z;
    make(&z, 3);
    psd_source in = { mem_get, &m };
    if (psd_sync_load(&z, &in, 4, 100, err, sizeof err))
        fail_msg("load: %s", err);
    EXPECT_INT(z.workers[0].state == PSD_W_LEFT && z.workers[0].closed, 1,
               "worker 0 left by its close");
    EXPECT_INT(z.workers[1].state, PSD_W_GONE, "worker 1 lost, may come back");
    join(&z, 1, 2, &owner_b);
    join(&z, 2, 3, &owner_c);
    psd_sync_leave(&z, 1, &owner_b);
    psd_sync_leave(&z, 2, &owner_c);
    for (int w = 0; w < 3; w++)
        EXPECT_INT(z.workers[w].state, PSD_W_ABSENT, "worker %d after the "
                   "job's end", w);
    join(&z, 0, 4, &owner_a);
    reach(&z, 0, 0, 4);
    EXPECT_INT(psd_sync_advance(&z, 200), 0, "the next job waits for all");
    psd_sync_destroy(&z);

    /* Format 2: the same bytes with each worker's first 36 only. */
    membuf f2 = { 0 };
    mem_put(&f2, m.p, 20);
    for (int w = 0; w < 3; w++)
        mem_put(&f2, m.p + 20 + w * 79, 36);
    make(&z, 3);
    psd_source in2 = { mem_get, &f2 };
    if (psd_sync_load(&z, &in2, 2, 100, err, sizeof err))
        fail_msg("load of format 2: %s", err);
    EXPECT_INT(z.workers[0].state == PSD_W_LEFT && z.workers[0].closed, 1,
               "format 2: a leave counts as a close, as the psd that "
               "wrote it judged at the next join");
    EXPECT_INT(z.workers[1].state, PSD_W_GONE, "format 2: worker 1 lost");
    psd_sync_destroy(&z);

    /* closed = 1 on a worker that is not LEFT (worker 1, lost). */
    m.at = 0;
    m.p[20 + 79 + 36] = 1;
    make(&z, 3);
    EXPECT_INT(psd_sync_load(&z, &in, 4, 100, err, sizeof err), -1,
               "closed on a worker still connected");
    EXPECT_INT(strstr(err, "worker 1 has closed = 1 in state 1") != NULL, 1,
               "%s", err);
    psd_sync_destroy(&z);
    free(m.p);
    free(f2.p);
}

static void test_nobody_waited_for_means_the_largest_clock_seen(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 0, 3);
    reach(&y, 1, 0, 2);
    psd_sync_leave(&y, 0, &owner_a);
    psd_sync_leave(&y, 1, &owner_b);
    psd_sync_advance(&y, 1);
    EXPECT_U64(y.clock, 3, "node clock with nobody left");
    psd_sync_destroy(&y);
}

static void test_ssp_pull_waits_only_beyond_the_staleness(void **state)
{
    (void)state;
    psd_sync y;
    uint64_t need = 0;
    two_workers(&y);
    for (uint64_t k = 1; k <= 3; k++)
        reach(&y, 0, 0, k);
    psd_sync_advance(&y, 1);
    EXPECT_INT(psd_sync_pull_ready(&y, 0, 3, &need), 1, "3 ahead, s = 3");
    EXPECT_INT(psd_sync_pull_ready(&y, 0, 2, &need), 0, "3 ahead, s = 2");
    EXPECT_U64(need, 1, "the node clock it waits for");
    EXPECT_INT(psd_sync_pull_ready(&y, -1, 0, &need), 1, "a reader");
    reach(&y, 1, 0, 1);
    psd_sync_advance(&y, 2);
    EXPECT_INT(psd_sync_pull_ready(&y, 0, 2, &need), 1, "after the slow one");
    psd_sync_destroy(&y);
}

static void test_first_join_behind_the_nodes_clock_starts_at_it(void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 2);
    /* What a journal replay leaves: the node's clock moved by CLOCK
     * records, the workers never connected since the start. */
    y.clock = 4;
    y.barrier = 2;
    join(&y, 1, 9, &owner_a);
    uint64_t c, b;
    psd_sync_position(&y, 1, &c, &b);
    EXPECT_U64(c, 4, "the joining worker's clock");
    EXPECT_U64(b, 2, "the joining worker's barrier");
    reach(&y, 1, 0, 5);
    EXPECT_INT(psd_sync_advance(&y, 1), 0, "worker 0 never came");
    psd_sync_destroy(&y);
}

static void test_worker_ahead_that_left_and_rejoins_keeps_its_clock(
    void **state)
{
    (void)state;
    psd_sync y;
    uint64_t need = 0, c, b;
    two_workers(&y);
    for (uint64_t k = 1; k <= 3; k++)       /* ssp: clocks do not wait */
        reach(&y, 0, 0, k);
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 5, 0), 1, "lost, grace 0");
    psd_sync_advance(&y, 5);
    EXPECT_U64(y.clock, 0, "node clock: worker 1 is at 0");
    /* The same client back: it goes on counting from 3. */
    join(&y, 0, 1, &owner_c);
    psd_sync_position(&y, 0, &c, &b);
    EXPECT_U64(c, 3, "the rejoined worker's clock");
    EXPECT_INT(psd_sync_pull_ready(&y, 0, 1, &need), 0,
               "3 ahead of worker 1, s = 1");
    EXPECT_U64(need, 2, "the node clock it waits for");
    psd_sync_destroy(&y);
}

/* Worker 1 pushed to the bsp sums of clock 2 -> 3, then lost its
 * connection, while worker 0 waits at clock 3. A new process for worker
 * 1 (another client id) starts at clock 3: the pushes made before the
 * loss stay in that clock's sums, where the new process's pushes must not
 * join them. It was the slowest, so the node's clock moves. */
static void test_new_process_for_a_lost_worker_starts_after_its_sums(
    void **state)
{
    (void)state;
    psd_sync y;
    worker_1_lost_mid_step(&y);
    join(&y, 1, 3, &owner_c);
    EXPECT_U64(clock_of(&y, 1), 3, "the new process's clock");
    EXPECT_INT(psd_sync_advance(&y, 11), 1, "the node's clock moves");
    EXPECT_U64(y.clock, 3, "node clock");
    EXPECT_INT(psd_sync_divisor(&y, 2), 2, "both workers in the mean");
    psd_sync_destroy(&y);
}

/* The same, but the lost worker had not pushed since its last clock: the
 * new process starts at that clock, and the node waits for it there. */
static void test_new_process_for_a_lost_worker_that_did_not_push(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    psd_sync_summed(&y, 1);                 /* summed into clock 0 -> 1 */
    reach(&y, 0, 0, 1);
    reach(&y, 1, 0, 1);
    psd_sync_advance(&y, 1);
    reach(&y, 0, 0, 2);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 10, 30), 0, "lost, grace 30 s");
    join(&y, 1, 3, &owner_c);
    EXPECT_U64(clock_of(&y, 1), 1, "the new process's clock");
    EXPECT_INT(psd_sync_advance(&y, 11), 0, "the node waits for it");
    psd_sync_destroy(&y);
}

/* The same client back after its grace ran out, having pushed in the
 * clock in progress (its reply lost with the connection): it goes on at
 * that clock, its pushes in that clock's sum, and its next clock ends the
 * iteration. It was moved on a clock, as a new process is: its client
 * took that clock for its count, so its next ps_clock skipped an
 * iteration and gave that iteration's sum nothing. */
static void test_same_client_back_after_its_grace_keeps_its_clock(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    clocks_together(&y, 2);
    psd_sync_summed(&y, 1);                 /* a push of iteration 2 */
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 1000, 2), 0, "lost, grace 2 s");
    EXPECT_INT(psd_sync_tick(&y, 3000, 2, 0, 10000), 1, "grace over");
    join(&y, 1, 2, &owner_c);               /* client 2 again */
    EXPECT_U64(clock_of(&y, 1), 2, "its clock: the iteration it is in");
    reach(&y, 0, 0, 3);
    EXPECT_INT(psd_sync_advance(&y, 3001), 0, "the node waits for it");
    reach(&y, 1, 0, 3);                     /* its next ps_clock */
    EXPECT_INT(psd_sync_advance(&y, 3002), 1, "then moves");
    EXPECT_U64(y.clock, 3, "node clock");
    psd_sync_destroy(&y);
}

/* The client a new process replaced comes back (its partition healed):
 * refused for good, even once the new process left, so that two processes
 * never train as one worker; a third one may still take the id. */
static void test_replaced_client_is_refused_when_it_comes_back(void **state)
{
    (void)state;
    psd_sync y;
    char err[200];
    two_workers(&y);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 10, 30), 0, "lost, grace 30 s");
    join(&y, 1, 3, &owner_c);
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_b, "h:2", err, sizeof err),
               PSW_EINVAL, "the replaced client, while the new one holds it");
    EXPECT_SUBSTR(err, "worker 1 was taken over by a new process",
                  "the reason");
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_c), 1, "the new process leaves");
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_b, "h:2", err, sizeof err),
               PSW_EINVAL, "the replaced client, after it left");
    int owner_d;
    join(&y, 1, 4, &owner_d);
    EXPECT_INT(psd_sync_holds(&y, 1, &owner_d), 1, "a third process holds it");
    psd_sync_destroy(&y);
}

/* The same after worker_grace ran out (the worker is no longer waited
 * for): a new process that comes later still replaces the lost client,
 * which is refused for good too, as is each earlier one; the client that
 * left by LEAVE was not lost, and a new process after it replaces no one. */
static void test_clients_replaced_after_their_grace_are_refused_too(
    void **state)
{
    (void)state;
    psd_sync y;
    char err[200];
    int owner_d, owner_e;
    two_workers(&y);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 10, 1), 0, "lost, grace 1 s");
    psd_sync_tick(&y, 2000, 1, 0, 10000);
    EXPECT_INT(y.workers[1].state, PSD_W_LEFT, "no longer waited for");
    join(&y, 1, 3, &owner_c);                /* client 3 replaces 2 */
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_b, "h:2", err, sizeof err),
               PSW_EINVAL, "client 2, replaced after its grace");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 3000, 30), 0, "3 lost too");
    join(&y, 1, 4, &owner_d);                /* client 4 replaces 3 */
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_b, "h:2", err, sizeof err),
               PSW_EINVAL, "client 2, two replacements ago");
    EXPECT_INT(psd_sync_join(&y, 1, 3, &owner_c, "h:3", err, sizeof err),
               PSW_EINVAL, "client 3");
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_d), 1, "client 4 leaves");
    join(&y, 1, 5, &owner_e);                /* after a LEAVE: no one */
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_e), 1, "client 5 leaves");
    join(&y, 1, 4, &owner_d);                /* 4 was not replaced */
    psd_sync_destroy(&y);
}

/* The same client back after a lost connection takes its clock over even
 * with pushes in the sums: its retransmissions are recognised, and it
 * goes on with the iteration it was in. */
static void test_same_client_back_keeps_the_clock_it_pushed_in(void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 0, 1);
    psd_sync_summed(&y, 1);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 10, 30), 0, "lost, grace 30 s");
    join(&y, 1, 2, &owner_c);
    EXPECT_U64(clock_of(&y, 1), 0, "the clock it had");
    EXPECT_INT(psd_sync_advance(&y, 11), 0, "the node waits for it");
    psd_sync_destroy(&y);
}

/* A worker that pushed, then left before its clock (ps_close, or its
 * grace ran out) while the others still compute that iteration: a new
 * process joining for it starts at the next clock, for the same reason. */
static void test_worker_that_pushed_and_left_rejoins_after_its_sums(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    psd_sync_summed(&y, 1);
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_b), 1, "worker 1 leaves");
    psd_sync_advance(&y, 1);
    EXPECT_U64(y.clock, 0, "worker 0 still computes");
    /* Right for a process that replaces one that died mid-step; a new
     * job's trainer after a run stopped half-way is a clock ahead of its
     * peers, and the job would wait for ever: said, naming the way out. */
    psd_log_flush_all();
    capture_begin();
    psd_log_set_level(PSD_LOG_INFO);
    join(&y, 1, 4, &owner_c);
    char *log = capture_end();
    EXPECT_SUBSTR(log, "worker 1 (from 127.0.0.1:9) starts at clock 1, one "
                  "past the node's clock 0: an earlier process of it pushed "
                  "in clock 0 and those pushes stand. If this is a new job, "
                  "run psctl end-job first", "the warning");
    free(log);
    EXPECT_U64(clock_of(&y, 1), 1, "the rejoined worker's clock");
    reach(&y, 0, 0, 1);
    EXPECT_INT(psd_sync_advance(&y, 2), 1, "worker 0's clock moves it");
    EXPECT_U64(y.clock, 1, "node clock");
    psd_sync_destroy(&y);

    /* A pending join's lines wait for its confirmation: an open that
     * fails is not taken in, and read as a takeover that never happened,
     * its advice to end the job wrong, repeated at every retry. */
    two_workers(&y);
    psd_sync_summed(&y, 1);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 10, 30), 0, "lost");
    psd_log_flush_all();
    capture_begin();
    psd_log_set_level(PSD_LOG_INFO);
    join_pending(&y, 1, 4, &owner_c);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 11, 30), 1, "undone");
    join_pending(&y, 1, 5, &owner_c);
    EXPECT_INT(psd_sync_confirm(&y, 1, &owner_c), 1, "confirmed");
    log = capture_end();
    EXPECT_SUBSTR(log, "worker 1 (from 127.0.0.1:10) lost its connection "
                  "before its open completed", "the undone join");
    const char *take = "worker 1: a new process from 127.0.0.1:10 takes "
                       "over";
    const char *first = strstr(log, take);
    if (!first || strstr(first + 1, take))
        fail_msg("one takeover line, the confirmed one's: %s", log);
    if (first < strstr(log, "before its open completed"))
        fail_msg("the takeover line came before the undone join's: %s",
                 log);
    EXPECT_SUBSTR(log, "starts at clock 1, one past the node's clock 0",
                  "the confirmed join's");
    free(log);
    psd_sync_destroy(&y);
}

/* The node says whom it waits for once a request has waited 10 s, not
 * as soon as one is held after 10 s without a clock: workers that
 * compute longer than that between clocks are not waited for at all
 * until one of them clocks. Later lines give the whole wait so far. */
static void test_wait_is_logged_after_10_s_of_holding_not_of_computing(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    /* 15 s of computing: nothing held, nothing to say. */
    for (uint64_t t = 100; t <= 15000; t += 100)
        free(tick_log(&y, t, 0));
    reach(&y, 0, 0, 1);                  /* worker 0's CLOCK is held */
    EXPECT_INT(psd_sync_advance(&y, 15050), 0, "worker 1 still computes");
    char *log = tick_log(&y, 15100, PSD_HOLD_CLOCK);
    if (*log)
        fail_msg("a CLOCK held for 100 ms was reported: %s", log);
    free(log);
    for (uint64_t t = 15200; t < 25000; t += 100)
        free(tick_log(&y, t, PSD_HOLD_CLOCK));
    log = tick_log(&y, 25000, PSD_HOLD_CLOCK);
    EXPECT_SUBSTR(log, "clock 1: waiting 10 s for workers 1 (not in it yet)",
                  "after 10 s of holding");
    free(log);
    for (uint64_t t = 25100; t < 35000; t += 100)
        free(tick_log(&y, t, PSD_HOLD_CLOCK));
    log = tick_log(&y, 35000, PSD_HOLD_CLOCK);
    EXPECT_SUBSTR(log, "clock 1: waiting 20 s for workers 1 (not in it yet)",
                  "after 20 s of holding");
    free(log);
    psd_sync_destroy(&y);
}

/* One worker entered a barrier while the other, one step further, waits
 * in ps_clock for it: each waits for the other until sync_timeout_ms.
 * The wait log says so on both sides, instead of "at this clock" for a
 * worker that sits in a barrier. Held on one side only (the other
 * worker computes), it is an ordinary wait. */
static void test_a_barrier_and_a_clock_waiting_for_each_other_are_named(
    void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 0, 1);                  /* worker 0 in ps_clock(1) */
    reach(&y, 1, 1, 1);                  /* worker 1 in ps_barrier(1) */
    EXPECT_INT(psd_sync_advance(&y, 100), 0, "nothing moves");
    int both = PSD_HOLD_CLOCK | PSD_HOLD_BARRIER;
    free(tick_log(&y, 100, both));
    char *log = tick_log(&y, 10100, both);
    EXPECT_SUBSTR(log, "clock 1: waiting 10 s for workers 1 (in barrier 1): "
                  "workers in ps_barrier and workers held at a clock (in "
                  "ps_clock, or in a pull of a bsp or ssp table that waits "
                  "for it) wait for each other", "the clock's side");
    EXPECT_SUBSTR(log, "barrier 1: waiting 10 s for workers 0 (at clock 1): "
                  "workers in ps_barrier and workers held at a clock (in "
                  "ps_clock, or in a pull of a bsp or ssp table that waits "
                  "for it) wait for each other", "the barrier's side");
    free(log);
    psd_sync_destroy(&y);
    two_workers(&y);
    reach(&y, 1, 1, 1);                  /* worker 0 still computes */
    free(tick_log(&y, 100, PSD_HOLD_BARRIER));
    log = tick_log(&y, 10100, PSD_HOLD_BARRIER);
    EXPECT_SUBSTR(log, "barrier 1: waiting 10 s for workers 0 (not in it "
                  "yet)\n", "an ordinary wait");
    free(log);
    psd_sync_destroy(&y);
}

/* A worker whose open failed part way (its client gave up before every
 * node answered) lost its connection before its OPENED: this node puts
 * it back as it was before the HELLO, absent and waited for, as on the
 * nodes its HELLO never reached; it never lets it go after a grace, and
 * never journals it. Confirmed, the same loss is an ordinary one. */
static void test_a_pending_join_lost_before_its_open_completed_is_undone(
    void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 2);
    join(&y, 0, 1, &owner_a);
    join_pending(&y, 1, 2, &owner_b);
    EXPECT_INT(y.workers[1].state, PSD_W_LIVE, "pending: live");
    char err[256];
    psd_sync_ended e;
    psd_sync_leave(&y, 0, &owner_a);
    EXPECT_INT(psd_sync_end(&y, 0, 0, &e, err, sizeof err), PSW_EBUSY,
               "end-job while worker 1's open is pending");
    EXPECT_SUBSTR(err, "worker 1 is connected (from 127.0.0.1:10, at clock 0, "
                  "its open not yet completed)", "why");
    join(&y, 0, 1, &owner_a);
    EXPECT_INT(psd_sync_dirty(&y, 0), 0, "worker 0 is journaled");
    EXPECT_INT(psd_sync_dirty(&y, 1), -1, "a pending worker is not");
    EXPECT_INT(psd_sync_confirm(&y, 1, &owner_a), 0, "not owner a's");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 1000, 2), 1,
               "lost before its open completed: undone");
    EXPECT_INT(y.workers[1].state, PSD_W_ABSENT, "as before its HELLO");
    EXPECT_INT(psd_sync_dirty(&y, 0), -1, "nothing to journal");
    reach(&y, 0, 0, 1);
    EXPECT_INT(psd_sync_tick(&y, 5000, 2, 0, 10000), 0, "no grace runs out");
    EXPECT_INT(psd_sync_advance(&y, 5000), 0, "worker 1 still waited for");
    EXPECT_INT(psd_sync_waited(&y), 2, "both waited for");

    /* The same worker's open completing: confirmed, then lost. */
    join_pending(&y, 1, 3, &owner_c);
    EXPECT_INT(psd_sync_confirm(&y, 1, &owner_c), 1, "OPENED");
    EXPECT_INT(psd_sync_confirm(&y, 1, &owner_c), 0, "a second OPENED");
    EXPECT_INT(psd_sync_dirty(&y, 0), 1, "journaled once confirmed");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 6000, 2), 0, "lost, grace 2 s");
    EXPECT_INT(y.workers[1].state, PSD_W_GONE, "gone");
    EXPECT_INT(psd_sync_tick(&y, 8000, 2, 0, 10000), 1, "its grace ran out");
    EXPECT_INT(psd_sync_advance(&y, 8000), 1, "the clock moves without it");
    psd_sync_destroy(&y);
}

/* A new process for a lost worker whose open is pending: its join put it
 * after its predecessor's sums, a clock further on, but until confirmed
 * it holds the node where the lost one did, so that no node ends a clock
 * that the nodes its HELLO never reached still wait on; undone, the lost
 * process is lost as before (its grace from when it was lost, and not
 * refused if it comes back). */
static void test_a_pending_new_process_holds_the_node_where_it_was(
    void **state)
{
    (void)state;
    psd_sync y;
    worker_1_lost_mid_step(&y);
    join_pending(&y, 1, 3, &owner_c);
    EXPECT_U64(clock_of(&y, 1), 3, "the new process's clock");
    EXPECT_INT(psd_sync_advance(&y, 11), 0, "held where the lost one was");
    EXPECT_U64(y.clock, 2, "node clock");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 12, 30), 1, "its open failed");
    EXPECT_INT(y.workers[1].state, PSD_W_GONE, "the lost one, as before");
    EXPECT_U64(clock_of(&y, 1), 2, "its clock");
    EXPECT_INT(psd_sync_tick(&y, 10 + 29999, 30, 0, 100000), 0,
               "its grace counts from its own loss");
    EXPECT_INT(psd_sync_tick(&y, 10 + 30000, 30, 0, 100000), 1,
               "and runs out then");
    join(&y, 1, 2, &owner_b);               /* not refused as replaced */

    /* The lost one back while the new process is pending: busy (it may
     * yet be undone), not refused for good; undone, it gets back in. */
    char err[160];
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 40100, 30), 0, "lost again");
    join_pending(&y, 1, 4, &owner_c);
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_a, "127.0.0.1:9", err,
                             sizeof err), PSW_EBUSY, "the lost one, back");
    EXPECT_SUBSTR(err, "whose open has not completed", "why");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 40200, 30), 1, "undone");
    join(&y, 1, 2, &owner_a);

    /* Its grace counts from its last try while refused, not from its
     * loss: takeovers that kept failing for longer than the grace let it
     * go the moment the last one was undone (the churn trial). */
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_a, 50000, 30), 0, "lost again");
    join_pending(&y, 1, 5, &owner_c);
    EXPECT_INT(psd_sync_tick(&y, 75000, 30, 0, 1000000), 0, "a tick");
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_a, "127.0.0.1:9", err,
                             sizeof err), PSW_EBUSY, "it tries, refused");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 85000, 30), 1, "undone");
    EXPECT_INT(psd_sync_tick(&y, 85000, 30, 0, 1000000), 0,
               "35 s after its loss, 10 s after its last try: waited for");
    EXPECT_INT(y.workers[1].state, PSD_W_GONE, "still waited for");
    join(&y, 1, 2, &owner_a);
    EXPECT_INT(y.workers[1].state, PSD_W_LIVE, "back");

    /* Confirmed, the new process's join counts. */
    psd_sync z;
    two_workers(&z);
    reach(&z, 0, 0, 1);
    psd_sync_summed(&z, 1);
    EXPECT_INT(psd_sync_lost(&z, 1, &owner_b, 10, 30), 0, "lost");
    join_pending(&z, 1, 3, &owner_c);
    EXPECT_INT(psd_sync_advance(&z, 11), 0, "held while pending");
    EXPECT_INT(psd_sync_divisor(&z, 0), 2, "counted as the lost one");
    EXPECT_INT(psd_sync_confirm(&z, 1, &owner_c), 1, "OPENED");
    EXPECT_INT(psd_sync_advance(&z, 12), 1, "the node's clock moves");
    EXPECT_U64(z.clock, 1, "node clock");
    psd_sync_destroy(&y);
    psd_sync_destroy(&z);
}

/* Worker 0 closed; a new process of it was pending on this node (its
 * HELLO reached no other) when worker 1 closed too, so this node could
 * not end the job then, where the others did. Its open failing, the
 * worker is back as closed, and the job ends here too: else this node
 * let the next job's first worker train alone while the others waited
 * for every worker (the review's case). */
static void test_an_undone_join_lets_the_job_end(void **state)
{
    (void)state;
    psd_sync y;
    two_workers(&y);
    reach(&y, 0, 0, 1);
    reach(&y, 1, 0, 1);
    psd_sync_advance(&y, 1);
    EXPECT_INT(psd_sync_leave(&y, 0, &owner_a), 1, "worker 0 closes");
    join_pending(&y, 0, 3, &owner_c);
    EXPECT_INT(psd_sync_leave(&y, 1, &owner_b), 1, "worker 1 closes");
    EXPECT_INT(y.workers[1].state, PSD_W_LEFT, "the job is not over yet");
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_c, 5, 30), 1, "its open failed");
    for (int w = 0; w < 2; w++)
        EXPECT_INT(y.workers[w].state, PSD_W_ABSENT, "worker %d: the job "
                   "ran its course", w);
    join(&y, 0, 4, &owner_a);
    reach(&y, 0, 0, 2);
    EXPECT_INT(psd_sync_advance(&y, 6), 0, "the next job waits for all");
    psd_sync_destroy(&y);
}

/* The final review's cases. A pending new process that starts past its
 * predecessor's sums never moves the node on, not even when the one it
 * replaces was let go (nobody else waited for): the node applied a
 * clock's sums for a join that was then undone. The "waiting for" line
 * names such a worker (its own clock past the node's, it was left out).
 * A second HELLO of the same client while pending keeps the first one's
 * deferred lines. */
static void test_a_pending_join_past_the_sums_moves_nothing(void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 1);
    join(&y, 0, 1, &owner_a);
    for (uint64_t k = 1; k <= 5; k++)
        reach(&y, 0, 0, k);
    psd_sync_advance(&y, 1);
    psd_sync_summed(&y, 0);                 /* a push of iteration 6 */
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 10, 0), 1, "let go at once");
    EXPECT_U64(y.clock, 5, "node clock");
    psd_log_flush_all();
    capture_begin();
    psd_log_set_level(PSD_LOG_INFO);
    join_pending(&y, 0, 2, &owner_b);
    join_pending(&y, 0, 2, &owner_c);       /* its second connection */
    EXPECT_U64(clock_of(&y, 0), 6, "the new process's clock");
    EXPECT_INT(psd_sync_advance(&y, 11), 0, "the node stays");
    EXPECT_U64(y.clock, 5, "node clock while pending");
    EXPECT_INT(psd_sync_confirm(&y, 0, &owner_c), 1, "confirmed");
    char *log = capture_end();
    EXPECT_SUBSTR(log, "starts at clock 6, one past the node's clock 5",
                  "the first HELLO's line, said at the confirmation");
    free(log);
    psd_sync_destroy(&y);

    two_workers(&y);
    clocks_together(&y, 5);
    psd_sync_summed(&y, 0);
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 10, 30), 0, "lost");
    reach(&y, 1, 0, 6);                     /* held: worker 0 is at 5 */
    join_pending(&y, 0, 3, &owner_c);
    EXPECT_INT(psd_sync_advance(&y, 11), 0, "held where the lost one was");
    log = tick_log(&y, 10 + 12000, PSD_HOLD_CLOCK);
    EXPECT_SUBSTR(log, "clock 6: waiting 12 s for workers 0 (its open not "
                  "completed)", "the wait names it");
    free(log);
    psd_sync_destroy(&y);
}

/* A node restarted under its workers has them lost (GONE, loaded with
 * their clients). A second process claiming one pending there while the
 * real one reconnects: the real one is told the takeover is pending, and
 * its grace counts from its try. It was refused as if another client held
 * the worker, its grace counted from the restart, and opens of the second
 * process failing one after another outlasted it: the worker was let go
 * as the last failed, and that clock ended without it (the churn trial). */
static void test_a_worker_loaded_lost_is_waited_for_while_it_tries(
    void **state)
{
    (void)state;
    char err[256];
    psd_sync y, z, r;
    two_workers(&y);
    restarted(&y, &z, 1000);
    EXPECT_INT(z.workers[1].state, PSD_W_GONE, "worker 1: lost");
    join(&z, 0, 1, &owner_a);               /* worker 0 is back */
    join_pending(&z, 1, 9, &owner_c);       /* a second process */
    EXPECT_INT(psd_sync_tick(&z, 25000, 30, 0, 1000000), 0, "a tick");
    EXPECT_INT(psd_sync_join(&z, 1, 2, &owner_b, "127.0.0.1:9", err,
                             sizeof err), PSW_EBUSY, "the real one");
    EXPECT_SUBSTR(err, "whose open has not completed", "why");
    EXPECT_INT(psd_sync_lost(&z, 1, &owner_c, 40000, 30), 1, "undone");
    EXPECT_INT(psd_sync_tick(&z, 40000, 30, 0, 1000000), 0,
               "39 s after the restart, 15 s after its try: waited for");
    join(&z, 1, 2, &owner_b);
    EXPECT_INT(z.workers[1].state, PSD_W_LIVE, "back");

    /* And its refreshed grace still runs out. */
    EXPECT_INT(psd_sync_lost(&z, 1, &owner_b, 50000, 30), 0, "lost again");
    join_pending(&z, 1, 9, &owner_c);
    EXPECT_INT(psd_sync_tick(&z, 60000, 30, 0, 1000000), 0, "a tick");
    EXPECT_INT(psd_sync_join(&z, 1, 2, &owner_b, "127.0.0.1:9", err,
                             sizeof err), PSW_EBUSY, "it tries");
    EXPECT_INT(psd_sync_lost(&z, 1, &owner_c, 70000, 30), 1, "undone");
    EXPECT_INT(psd_sync_tick(&z, 89999, 30, 0, 1000000), 0, "29.999 s");
    EXPECT_INT(psd_sync_tick(&z, 90000, 30, 0, 1000000), 1, "30 s: let go");

    /* From a snapshot of format 3, which does not hold whom the node
     * had replaced, a process that takes a loaded worker over does not
     * refuse the loaded client for good: the loaded client may be the
     * replacement and the process a stale one that it replaced (a trial:
     * refused for good, the replacement was locked out and the job
     * stalled). Back once the other is gone, it gets in. */
    restarted_as(&y, &r, 1000, 3);
    join(&r, 1, 9, &owner_c);               /* another client takes over */
    EXPECT_INT(psd_sync_lost(&r, 1, &owner_c, 2000, 30), 0, "it is lost");
    EXPECT_INT(psd_sync_join(&r, 1, 2, &owner_b, "127.0.0.1:9", err,
                             sizeof err), 0, "the loaded client: %s", err);

    /* Serving starts their grace afresh: a load longer than the grace let
     * every loaded worker go at the first tick. */
    psd_sync_serving(&r, 100000);
    EXPECT_INT(psd_sync_tick(&r, 100100, 30, 0, 1000000), 0,
               "a load of 99 s, then the first tick");
    EXPECT_INT(r.workers[0].state, PSD_W_GONE, "worker 0: still waited for");
    psd_sync_destroy(&y);
    psd_sync_destroy(&z);
    psd_sync_destroy(&r);
}

/* Client `taker` takes worker w of y over and loses its connection at
 * now_ms; then client `back` (another process, or the one taken over
 * from) asks for the worker: its join's status, the reason in err. */
static int back_after_a_takeover(psd_sync *y, int32_t w, uint64_t taker,
                                 uint64_t back, uint64_t now_ms, char *err,
                                 size_t errlen)
{
    static const char taking, coming;
    join(y, w, taker, &taking);
    EXPECT_INT(psd_sync_lost(y, w, &taking, now_ms, 30), 0,
               "client %llu lost", (unsigned long long)taker);
    return psd_sync_join(y, w, back, &coming, "127.0.0.1:9", err, errlen);
}

/* Whom a node had replaced is saved (format 4) and journaled (WORKER
 * records), so that a restart does not let a replaced process back: a
 * stale process, back after a restart, took the worker over from its
 * replacement, which was then refused for good, and the job stalled (the
 * churn trial). Loaded workers count as lost, as after a loss: a new
 * process that takes one over refuses the loaded client for good. A
 * client let go by end-job stays refused with end-job's reason. */
static void test_whom_a_node_replaced_survives_its_restart(void **state)
{
    (void)state;
    char err[256];
    psd_sync y, z, r;
    two_workers(&y);                        /* clients 1 and 2 */
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 10, 30), 0, "2 is lost");
    join(&y, 1, 9, &owner_c);               /* 9 takes over: 2 refused */
    restarted(&y, &z, 1000);
    EXPECT_INT(psd_sync_join(&z, 1, 2, &owner_b, "127.0.0.1:9", err,
                             sizeof err), PSW_EINVAL,
               "the replaced process, after the restart");
    EXPECT_SUBSTR(err, "was taken over by a new process while", "why, "
                  "with no address while the replacement is not back");
    join(&z, 1, 9, &owner_c);               /* its replacement is back */
    /* Worker 0 was connected at the save: its client 1 is lost. */
    EXPECT_INT(back_after_a_takeover(&z, 0, 5, 1, 2000, err, sizeof err),
               PSW_EINVAL, "the client loaded as lost, taken over by 5");
    psd_sync_destroy(&z);

    /* The same from WORKER records: the one of 9's join holds 2. */
    make(&r, 2);
    psd_sync_replay(&r, 0, 1, 0, 1, 0, 0, y.workers[0].replaced,
                    y.workers[0].ended_mask, 0, 0, 10);
    psd_sync_replay(&r, 1, 1, 0, 9, 0, 0, y.workers[1].replaced,
                    y.workers[1].ended_mask, 0, 0, 10);
    EXPECT_INT(psd_sync_join(&r, 1, 2, &owner_b, "127.0.0.1:9", err,
                             sizeof err), PSW_EINVAL,
               "the replaced process, after a replay");
    EXPECT_INT(back_after_a_takeover(&r, 0, 5, 1, 2000, err, sizeof err),
               PSW_EINVAL, "the client replayed as joined, taken over");
    psd_sync_destroy(&r);
    /* A record of an older psd does not say: nobody is refused, though
     * its client counts as lost (end-job lets it go). */
    make(&r, 2);
    psd_sync_replay(&r, 0, 1, 0, 1, 0, 0, NULL, 0, 0, 0, 10);
    EXPECT_INT(r.workers[0].unknown, 1, "an older record: unknown");
    EXPECT_U64(r.workers[0].lost_id, 1, "its client, lost by the restart");
    EXPECT_INT(back_after_a_takeover(&r, 0, 5, 1, 2000, err, sizeof err), 0,
               "an older record's client: %s", err);
    psd_sync_destroy(&r);

    /* Loaded from format 3 (whom the node replaced unknown), then saved
     * by this psd, or its leave journaled, and restarted again before 9
     * came back: still nobody is refused. Derived at each load, the
     * second load took 9 for lost, stale 2 took the worker over and 9
     * was locked out (a review). */
    psd_sync u, v;
    restarted_as(&y, &u, 1000, 3);
    EXPECT_INT(psd_sync_tick(&u, 31000, 30, 0, 1000000), 1, "9 let go");
    for (int from = 0; from < 2; from++) {
        if (from == 0)
            restarted(&u, &v, 32000);
        else {
            make(&v, 2);
            const psd_worker *w = &u.workers[1];
            psd_sync_replay(&v, 1, 0, 0, w->client_id, w->clock, w->barrier,
                            w->replaced, w->ended_mask, w->lost_id,
                            w->unknown, 32000);
        }
        /* 2: the stale process */
        EXPECT_INT(back_after_a_takeover(&v, 1, 2, 9, 33000, err,
                                         sizeof err), 0, "9, after the %s: %s",
                   from ? "replay" : "second load", err);
        psd_sync_destroy(&v);
    }
    psd_sync_destroy(&u);
    /* The same when 9 came back between the two restarts (its own
     * reconnection is no new knowledge): at the second load 9 was taken
     * for lost, stale 2 took the worker over and 9 was locked out (a
     * trial). 2 gets in, as after a format 3 load; 9 is not refused. */
    restarted_as(&y, &u, 1000, 3);
    join(&u, 1, 9, &owner_c);               /* 9 is back */
    restarted(&u, &v, 2000);
    EXPECT_INT(back_after_a_takeover(&v, 1, 2, 9, 3000, err, sizeof err), 0,
               "9, back between: %s", err);
    psd_sync_destroy(&v);
    psd_sync_destroy(&u);
    /* Nor through a lost connection after the upgrade (a review). The
     * load says what the upgrade left open, at every load until the job
     * ends. */
    capture_begin();
    restarted_as(&y, &u, 1000, 3);
    char *log = capture_end();
    EXPECT_SUBSTR(log, "whom this node had replaced is not known (the job "
                  "in progress ran under a psd before 0.4.1): until that job "
                  "ends (2 of its workers loaded)", "the load's warning");
    free(log);
    join(&u, 1, 9, &owner_c);
    EXPECT_INT(psd_sync_lost(&u, 1, &owner_c, 2000, 30), 0, "9 lost");
    EXPECT_INT(back_after_a_takeover(&u, 1, 2, 9, 3000, err, sizeof err), 0,
               "9 after a lost connection: %s", err);
    psd_sync_destroy(&u);
    /* end-job still lets the loaded clients go (a review: while unknown
     * kept them from being the lost ones, it let go of none). */
    restarted_as(&y, &u, 1000, 3);
    join(&u, 1, 9, &owner_c);
    restarted(&u, &v, 2000);
    psd_sync_ended e0;
    assert_int_equal(psd_sync_end(&v, 0, 0, &e0, err, sizeof err), 0);
    EXPECT_INT(e0.let_go, 2, "both loaded clients let go");
    EXPECT_INT(psd_sync_join(&v, 1, 9, &owner_c, "127.0.0.1:9", err,
                             sizeof err), PSW_EINVAL, "9 after end-job");
    EXPECT_SUBSTR(err, "its job was ended since", "why");
    EXPECT_INT(v.workers[1].unknown, 0, "a new job: known again");
    psd_sync_destroy(&v);
    psd_sync_destroy(&u);

    /* end-job lets lost client 9 go; restarted, it reads why. */
    EXPECT_INT(psd_sync_leave(&y, 0, &owner_a), 1, "0 closes");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 20, 30), 0, "9 is lost");
    psd_sync_ended e;
    assert_int_equal(psd_sync_end(&y, 0, 0, &e, err, sizeof err), 0);
    restarted(&y, &z, 1000);
    EXPECT_INT(psd_sync_join(&z, 1, 9, &owner_c, "127.0.0.1:9", err,
                             sizeof err), PSW_EINVAL, "9, let go");
    EXPECT_SUBSTR(err, "its job was ended since (psctl end-job)", "why");
    EXPECT_INT(psd_sync_join(&z, 1, 2, &owner_b, "127.0.0.1:9", err,
                             sizeof err), PSW_EINVAL, "2, still replaced");
    EXPECT_SUBSTR(err, "was taken over by a new process", "why");
    psd_sync_destroy(&z);
    psd_sync_destroy(&y);
}

/* The same client's second connection (its first not yet seen closed)
 * keeps the join pending; a snapshot taken meanwhile has the worker as
 * it was before the HELLO, so a node restarted from it has not taken it
 * in either. */
static void test_a_pending_join_is_saved_as_it_was(void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 2);
    join(&y, 0, 1, &owner_a);
    join_pending(&y, 1, 2, &owner_b);
    join_pending(&y, 1, 2, &owner_c);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 5, 30), 0,
               "the taken-over connection's loss changes nothing");
    EXPECT_INT(y.workers[1].pending, 1, "still pending");
    psd_sync z;
    restarted(&y, &z, 100);
    EXPECT_INT(z.workers[0].state, PSD_W_GONE, "worker 0 joined: lost");
    EXPECT_INT(z.workers[1].state, PSD_W_ABSENT, "worker 1 never joined");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_c, 6, 30), 1, "undone");
    EXPECT_INT(y.workers[1].state, PSD_W_ABSENT, "absent");
    /* A version 3 HELLO of the same client confirms at once. */
    join_pending(&y, 1, 2, &owner_b);
    join(&y, 1, 2, &owner_c);
    EXPECT_INT(y.workers[1].pending, 0, "confirmed by a version 3 HELLO");
    psd_sync_destroy(&y);
    psd_sync_destroy(&z);
}


/* psctl end-job: refused while a worker is connected, and then nothing
 * changes. */
static void test_end_job_is_refused_while_a_worker_is_connected(void **state)
{
    (void)state;
    psd_sync y;
    psd_sync_ended e;
    char err[256];
    two_workers(&y);
    reach(&y, 0, 0, 2);
    EXPECT_INT(psd_sync_leave(&y, 0, &owner_a), 1, "worker 0 leaves");
    EXPECT_INT(psd_sync_end(&y, 0, 0, &e, err, sizeof err), PSW_EBUSY,
               "end-job with worker 1 connected");
    if (!strstr(err, "worker 1 is connected (from 127.0.0.1:9, at clock 0)"))
        fail_msg("the refusal: %s", err);
    EXPECT_INT(y.workers[0].state, PSD_W_LEFT, "worker 0 still left");
    EXPECT_INT(y.workers[1].state, PSD_W_LIVE, "worker 1 still live");
    EXPECT_U64(clock_of(&y, 0), 2, "worker 0's clock");
    psd_sync_destroy(&y);
}

/* A job whose workers stopped at different counts: worker 0 closed at
 * clock 3, worker 1 went on alone to 5, pushed into clock 6 and lost its
 * connection. end-job ends it at clock 6 (the sums pushed into it count
 * as its end), both workers absent there, so that the next job waits for
 * both; the lost client is refused should it come back; the WORKER
 * records the node journals replay to the same state. */
static void test_end_job_ends_a_job_whose_workers_stopped_apart(void **state)
{
    (void)state;
    psd_sync y;
    psd_sync_ended e;
    char err[256];
    two_workers(&y);
    for (uint64_t k = 1; k <= 3; k++) {
        reach(&y, 0, 0, k);
        reach(&y, 1, 0, k);
    }
    reach(&y, 1, 1, 1);
    psd_sync_advance(&y, 1);
    EXPECT_INT(psd_sync_leave(&y, 0, &owner_a), 1, "worker 0 leaves at 3");
    reach(&y, 1, 0, 4);
    reach(&y, 1, 0, 5);
    psd_sync_advance(&y, 2);
    EXPECT_U64(y.clock, 5, "worker 1 alone moved the clock");
    psd_sync_summed(&y, 1);
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 3, 30), 0, "lost, grace 30 s");
    while (psd_sync_dirty(&y, 0) >= 0)
        ;                                    /* journaled so far */
    EXPECT_INT(psd_sync_end(&y, 0, 0, &e, err, sizeof err), 0, "end-job");
    EXPECT_INT(e.in_progress, 1, "a job was in progress");
    EXPECT_INT(e.pending, 1, "worker 1's push of clock 6 is in the sums");
    EXPECT_INT(e.moved, 1, "the clock moved");
    EXPECT_U64(e.from, 5, "from");
    EXPECT_U64(e.clock, 6, "the job ends at clock 6");
    EXPECT_U64(e.barrier, 1, "and at worker 1's barrier");
    EXPECT_INT(e.divisor, 1, "divided by the one worker whose push it holds");
    EXPECT_INT(e.let_go, 1, "worker 1's lost client let go");
    EXPECT_U64(y.clock, 6, "the node's clock");
    EXPECT_U64(y.barrier, 1, "the node's barrier");
    for (int w = 0; w < 2; w++) {
        uint64_t c, b;
        psd_sync_position(&y, w, &c, &b);
        EXPECT_INT(y.workers[w].state, PSD_W_ABSENT, "worker %d absent", w);
        EXPECT_U64(c, 6, "worker %d's clock", w);
        EXPECT_U64(b, 1, "worker %d's barrier", w);
    }
    EXPECT_INT(psd_sync_dirty(&y, 0), 0, "worker 0 to journal");
    EXPECT_INT(psd_sync_dirty(&y, 1), 1, "worker 1 to journal");
    EXPECT_INT(psd_sync_join(&y, 1, 2, &owner_b, "h:2", err, sizeof err),
               PSW_EINVAL, "the lost client back");
    if (!strstr(err, "its job was ended since (psctl end-job)"))
        fail_msg("the refusal: %s", err);
    join(&y, 0, 3, &owner_c);
    EXPECT_U64(clock_of(&y, 0), 6, "the next job starts at 6");
    reach(&y, 0, 0, 7);
    EXPECT_INT(psd_sync_advance(&y, 4), 0, "worker 0 alone does not move it");
    EXPECT_INT(psd_sync_waited(&y), 2, "both workers waited for");
    psd_sync_destroy(&y);

    /* The journal's WORKER records: worker 0 left by LEAVE at 3, worker 1
     * joined; then end-job's, every worker left by LEAVE at 6 and 1 (its
     * CLOCK record moves the node's clock, in request.c). */
    psd_sync z;
    make(&z, 2);
    psd_sync_replay(&z, 0, 0, 1, 1, 3, 0, NULL, 0, 0, 0, 10);
    psd_sync_replay(&z, 1, 1, 0, 2, 5, 1, NULL, 0, 0, 0, 10);
    psd_sync_replay(&z, 0, 0, 1, 1, 6, 1, NULL, 0, 0, 0, 10);
    psd_sync_replay(&z, 1, 0, 1, 2, 6, 1, NULL, 0, 0, 0, 10);
    for (int w = 0; w < 2; w++)
        EXPECT_INT(z.workers[w].state, PSD_W_ABSENT, "replayed worker %d", w);
    EXPECT_U64(z.barrier, 1, "the replayed node's barrier");
    psd_sync_destroy(&z);
}

/* end-job on a node whose job is over only raises its counts (psctl
 * lines the nodes up): nothing in progress, no sums; counts above what a
 * clock may reach are refused. */
static void test_end_job_again_only_raises_the_counts(void **state)
{
    (void)state;
    psd_sync y;
    psd_sync_ended e;
    char err[256];
    make(&y, 2);
    EXPECT_INT(psd_sync_end(&y, 0, 0, &e, err, sizeof err), 0, "fresh node");
    EXPECT_INT(e.in_progress, 0, "nothing in progress on a fresh node");
    EXPECT_INT(e.moved, 0, "nor moved");
    EXPECT_INT(psd_sync_end(&y, 8, 2, &e, err, sizeof err), 0, "raised");
    EXPECT_INT(e.in_progress | e.pending | e.let_go, 0, "nothing else");
    EXPECT_INT(e.moved, 1, "the clock moved");
    EXPECT_U64(clock_of(&y, 1), 8, "worker 1's clock");
    EXPECT_U64(y.barrier, 2, "the node's barrier");
    EXPECT_INT(psd_sync_end(&y, 4, 1, &e, err, sizeof err), 0, "lower");
    EXPECT_U64(e.clock, 8, "counts never go back");
    EXPECT_INT(psd_sync_end(&y, 8 + 1000001, 0, &e, err, sizeof err),
               PSW_EINVAL, "more than a million past the node's count");
    EXPECT_INT(psd_sync_end(&y, 0, 8 + 1000000, &e, err, sizeof err), 0,
               "a million past it");
    psd_sync_destroy(&y);
    /* A node with no count of its own takes any up to 2^61: what a
     * hostile client gives cannot stop the clock's numbers (2^62). */
    make(&y, 2);
    EXPECT_INT(psd_sync_end(&y, (UINT64_C(1) << 61) + 1, 0, &e, err,
                            sizeof err), PSW_EINVAL, "past 2^61");
    if (!strstr(err, "is out of range: this node's largest is 0"))
        fail_msg("the refusal: %s", err);
    EXPECT_U64(y.clock, 0, "unchanged by the refusal");
    EXPECT_INT(psd_sync_end(&y, UINT64_C(1) << 61, 0, &e, err, sizeof err),
               0, "2^61");
    psd_sync_destroy(&y);
}

/* With aggregate = mean the sum of the clock in progress is divided by
 * the workers whose pushes it holds, not by a lost one that pushed
 * nothing (as once its grace ran out). A job that never clocked (worker
 * 0 joined and was lost, worker 1 never came) is journaled whole: a
 * WORKER record for each, or the replay leaves worker 0 not waited for
 * and the next job's worker 1 trains alone. */
static void test_end_job_divides_by_who_pushed_and_journals_everyone(
    void **state)
{
    (void)state;
    psd_sync y;
    psd_sync_ended e;
    char err[256];
    two_workers(&y);
    reach(&y, 0, 0, 3);
    reach(&y, 1, 0, 3);
    psd_sync_advance(&y, 1);
    psd_sync_summed(&y, 0);
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 2, 30), 0, "0 lost");
    EXPECT_INT(psd_sync_lost(&y, 1, &owner_b, 2, 30), 0, "1 lost");
    EXPECT_INT(psd_sync_end(&y, 0, 0, &e, err, sizeof err), 0, "end-job");
    EXPECT_INT(e.divisor, 1, "worker 0 alone pushed into clock 4");
    EXPECT_U64(e.clock, 4, "clock 4 counts as finished");
    psd_sync_destroy(&y);

    make(&y, 2);
    join(&y, 0, 1, &owner_a);
    EXPECT_INT(psd_sync_lost(&y, 0, &owner_a, 2, 30), 0, "0 lost");
    while (psd_sync_dirty(&y, 0) >= 0)
        ;
    EXPECT_INT(psd_sync_end(&y, 0, 0, &e, err, sizeof err), 0, "end-job");
    EXPECT_INT(e.in_progress, 1, "a job that never clocked");
    EXPECT_INT(psd_sync_dirty(&y, 0), 0, "worker 0 to journal");
    EXPECT_INT(psd_sync_dirty(&y, 1), 1, "worker 1, never joined, too");
    psd_sync z;
    make(&z, 2);
    psd_sync_replay(&z, 0, 1, 0, 1, 0, 0, NULL, 0, 0, 0, 10);
    psd_sync_replay(&z, 0, 0, 1, 1, 0, 0, NULL, 0, 0, 0, 10);
    psd_sync_replay(&z, 1, 0, 1, 0, 0, 0, NULL, 0, 0, 0, 10);
    EXPECT_INT(psd_sync_waited(&z), 2, "both waited for after the replay");
    psd_sync_destroy(&z);
    psd_sync_destroy(&y);
}

/* Lines in text that contain what. */
static int lines_with(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* A worker's process that opens and closes in a loop wrote a join and a
 * leave line each time (400 lines in 0.5 s, naming no peer): the first
 * few of each 10 s are logged, with the peer, the rest summed up in one
 * line by the tick after the window. Per worker: another worker lost in
 * the same burst is still said. */
static void test_a_flapping_workers_lines_are_few_and_name_its_peer(
    void **state)
{
    (void)state;
    psd_sync y;
    make(&y, 2);
    int a, b;
    join(&y, 1, 7, &b);
    capture_begin();
    psd_log_set_level(PSD_LOG_INFO);
    psd_sync_advance(&y, 1000);
    for (int i = 0; i < 100; i++) {
        join(&y, 0, 100 + (uint64_t)i, &a);
        psd_sync_leave(&y, 0, &a);
    }
    psd_sync_lost(&y, 1, &b, 1500, 30);
    psd_sync_tick(&y, 12000, 30, 0, 10000);
    char *log = capture_end();
    int said = lines_with(log, "worker 0 left (from 127.0.0.1:9)") +
               lines_with(log, "worker 0 rejoined at clock 0 (from "
                               "127.0.0.1:9)");
    if (said < 1 || said > 4)
        fail_msg("%d join and leave lines of worker 0, want 1..4:\n%s", said,
                 log);
    char want[128];
    snprintf(want, sizeof want, "worker 0: %d more joins, losses and leaves "
             "in 11 s, not logged (0 of them losses; the last from "
             "127.0.0.1:9)", 199 - said);
    if (!strstr(log, want))
        fail_msg("no \"%s\" in:\n%s", want, log);
    EXPECT_INT(lines_with(log, "worker 1 lost its connection (from "
                          "127.0.0.1:9); waiting up to 30 s"), 1,
               "worker 1's loss, in the same burst:\n%s", log);
    free(log);
    /* Losses past the burst are summed up as a warning: at log_level =
     * warn the loss lines are the ones an operator sees. */
    capture_begin();
    for (int i = 0; i < 10; i++) {
        join(&y, 1, 7, &b);
        psd_sync_lost(&y, 1, &b, 20000, 30);
    }
    psd_sync_tick(&y, 31000, 30, 0, 10000);
    log = capture_end();
    if (!strstr(log, "warn: worker 1: ") || !strstr(log, "of them losses"))
        fail_msg("no warning of worker 1's losses past the burst:\n%s", log);
    free(log);
    psd_sync_destroy(&y);
}

int main(void)
{
    /* The state machine logs joins and losses; keep the output to TAP. */
    psd_log_init(0, PSD_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_join_refuses_ids_out_of_range_and_a_second_client),
        cmocka_unit_test(test_same_client_reconnecting_takes_its_worker_over),
        cmocka_unit_test(test_clock_moves_when_the_slowest_worker_arrives),
        cmocka_unit_test(test_clock_numbers_out_of_range_are_refused),
        cmocka_unit_test(test_a_node_at_zero_takes_any_clock),
        cmocka_unit_test(test_a_clock_that_skips_is_taken_and_logged),
        cmocka_unit_test(test_barrier_and_clock_move_independently),
        cmocka_unit_test(
            test_lost_worker_is_waited_for_until_its_grace_runs_out),
        cmocka_unit_test(
            test_lost_worker_with_no_grace_stops_being_waited_for_at_once),
        cmocka_unit_test(
            test_worker_that_left_and_rejoins_starts_at_the_nodes_clock),
        cmocka_unit_test(
            test_a_job_whose_workers_all_closed_at_one_clock_is_over),
        cmocka_unit_test(
            test_a_job_end_survives_a_snapshot_between_the_closes),
        cmocka_unit_test(test_nobody_waited_for_means_the_largest_clock_seen),
        cmocka_unit_test(test_ssp_pull_waits_only_beyond_the_staleness),
        cmocka_unit_test(test_first_join_behind_the_nodes_clock_starts_at_it),
        cmocka_unit_test(
            test_worker_ahead_that_left_and_rejoins_keeps_its_clock),
        cmocka_unit_test(
            test_new_process_for_a_lost_worker_starts_after_its_sums),
        cmocka_unit_test(
            test_new_process_for_a_lost_worker_that_did_not_push),
        cmocka_unit_test(
            test_same_client_back_after_its_grace_keeps_its_clock),
        cmocka_unit_test(test_replaced_client_is_refused_when_it_comes_back),
        cmocka_unit_test(
            test_a_pending_join_lost_before_its_open_completed_is_undone),
        cmocka_unit_test(test_a_pending_new_process_holds_the_node_where_it_was),
        cmocka_unit_test(test_a_pending_join_is_saved_as_it_was),
        cmocka_unit_test(
            test_a_worker_loaded_lost_is_waited_for_while_it_tries),
        cmocka_unit_test(test_whom_a_node_replaced_survives_its_restart),
        cmocka_unit_test(test_an_undone_join_lets_the_job_end),
        cmocka_unit_test(test_a_pending_join_past_the_sums_moves_nothing),
        cmocka_unit_test(
            test_clients_replaced_after_their_grace_are_refused_too),
        cmocka_unit_test(test_same_client_back_keeps_the_clock_it_pushed_in),
        cmocka_unit_test(
            test_worker_that_pushed_and_left_rejoins_after_its_sums),
        cmocka_unit_test(
            test_wait_is_logged_after_10_s_of_holding_not_of_computing),
        cmocka_unit_test(
            test_a_barrier_and_a_clock_waiting_for_each_other_are_named),
        cmocka_unit_test(test_end_job_is_refused_while_a_worker_is_connected),
        cmocka_unit_test(test_end_job_ends_a_job_whose_workers_stopped_apart),
        cmocka_unit_test(test_end_job_again_only_raises_the_counts),
        cmocka_unit_test(
            test_end_job_divides_by_who_pushed_and_journals_everyone),
        cmocka_unit_test(
            test_a_flapping_workers_lines_are_few_and_name_its_peer),
    };
    return cmocka_run_group_tests_name("sync", tests, NULL, NULL);
}
