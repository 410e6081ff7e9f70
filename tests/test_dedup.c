/* Unit tests of daemon/dedup.c, the node's memory of applied pushes:
 * duplicates are recognised with their status, an ACK lets old ones go
 * (and marks anything below it as a stale copy), memory stays flat over
 * a million pushes, clients without connections expire, and what is
 * remembered is bounded per client and over all clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../daemon/dedup.h"
#include "../proto/msg.h"
#include "../proto/status.h"

#include "expect.h"
#include "membuf.h"

static void test_a_recorded_push_is_seen_with_its_status_and_others_not(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 7, 1, 0);
    int st = 99;
    EXPECT_INT(psd_dedup_seen(c, 5, 0, &st), 0, "a new push");
    EXPECT_INT(psd_dedup_record(c, 5, 0, PSW_OK), 0, "record 5.0");
    EXPECT_INT(psd_dedup_record(c, 5, 2, PSW_ENOMEM), 0, "record 5.2");
    EXPECT_INT(psd_dedup_seen(c, 5, 0, &st), 1, "5.0 again");
    EXPECT_INT(st, PSW_OK, "its status");
    EXPECT_INT(psd_dedup_seen(c, 5, 2, &st), 1, "5.2 again");
    EXPECT_INT(st, PSW_ENOMEM, "its status");
    EXPECT_INT(psd_dedup_seen(c, 5, 1, &st), 0, "another part of 5");
    EXPECT_INT(psd_dedup_seen(c, 6, 0, &st), 0, "another request");
    /* Another incarnation of the same id is another client. */
    psd_dclient *c2 = psd_dedup_attach(d, 7, 2, 0);
    EXPECT_INT(c2 != c, 1, "a second incarnation has its own state");
    EXPECT_INT(psd_dedup_seen(c2, 5, 0, &st), 0, "5.0 of the new one");
    psd_dedup_free(d);
}

static void test_ack_forgets_below_the_mark_and_refuses_stale_copies(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    int st;
    for (uint64_t ts = 1; ts <= 10; ts++)
        psd_dedup_record(c, ts, 0, PSW_OK);
    psd_dedup_ack(c, 8, UINT64_MAX);
    /* A copy of 3 arriving late (reordered behind the ACK) must not be
     * applied: the client finished 3 long ago. */
    EXPECT_INT(psd_dedup_seen(c, 3, 0, &st), 1, "stale 3.0");
    EXPECT_INT(st, PSW_OK, "its status");
    EXPECT_INT(psd_dedup_seen(c, 3, 5, &st), 1, "a part 3.5 never seen");
    EXPECT_INT(psd_dedup_seen(c, 9, 0, &st), 1, "9.0, above the mark");
    EXPECT_INT(psd_dedup_seen(c, 11, 0, &st), 0, "11.0, new");
    psd_dedup_ack(c, 5, UINT64_MAX);
    EXPECT_INT(psd_dedup_seen(c, 6, 0, &st), 1, "an ACK never moves back");
    psd_dedup_free(d);
}

/* An ACK moves the mark no higher than just above the client's highest
 * push seen here: a later push is new, whatever value an ACK carried (a
 * client's bug, or another connection naming the client). A mark the
 * node took before (its snapshot, its journal) is set as it is. */
static void test_an_ack_past_every_push_seen_stops_above_the_highest(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    int st;
    psd_dedup_ack(c, UINT64_MAX, UINT64_MAX);
    EXPECT_INT(psd_dedup_seen(c, 1, 0, &st), 0, "1.0 after an ACK with "
               "no push seen");
    for (uint64_t ts = 1; ts <= 3; ts++)
        psd_dedup_record(c, ts, 0, PSW_OK);
    psd_dedup_pushed(c, 5);              /* seen, refused at a limit */
    psd_dedup_ack(c, UINT64_MAX, UINT64_MAX);
    EXPECT_INT(psd_dedup_seen(c, 5, 0, &st), 1, "5.0, marked complete");
    EXPECT_INT(psd_dedup_seen(c, 6, 0, &st), 0, "6.0, new");
    EXPECT_INT(psd_dedup_seen(c, 1000, 0, &st), 0, "1000.0, new");
    psd_dclient *e = psd_dedup_attach(d, 2, 1, 0);
    psd_dedup_mark(e, 100);
    EXPECT_INT(psd_dedup_seen(e, 99, 0, &st), 1, "99.0 below a loaded mark");
    EXPECT_INT(psd_dedup_seen(e, 100, 0, &st), 0, "100.0");
    psd_dedup_free(d);
}

/* A client with 64 pushes in flight over a million: what is remembered
 * stays within four times what is in flight. */
static void test_memory_stays_flat_with_a_sliding_window(void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 3, 3, 0);
    size_t clients, entries, bytes, bytes_early = 0, most = 0;
    const uint64_t total = 1000000, window = 64;
    for (uint64_t ts = 1; ts <= total; ts++) {
        int st;
        if (psd_dedup_seen(c, ts, 0, &st))
            fail_msg("push %llu seen before it was made",
                     (unsigned long long)ts);
        psd_dedup_record(c, ts, 0, PSW_OK);
        if (ts > window)
            psd_dedup_ack(c, ts - window, UINT64_MAX);
        psd_dedup_size(d, &clients, &entries, &bytes);
        if (entries > most)
            most = entries;
        if (ts == 10000)
            bytes_early = bytes;
    }
    EXPECT_INT(clients, 1, "clients");
    if (most > 4 * window)
        fail_msg("remembered up to %zu pushes with %llu in flight", most,
                 (unsigned long long)window);
    EXPECT_U64(bytes, bytes_early, "bytes after 10^6 pushes vs after 10^4");
    psd_dedup_free(d);
}

static void test_clients_without_connections_expire_after_the_ttl(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *a = psd_dedup_attach(d, 1, 1, 1000);
    psd_dclient *b = psd_dedup_attach(d, 2, 1, 1000);
    psd_dedup_record(a, 1, 0, PSW_OK);
    psd_dedup_record(b, 1, 0, PSW_OK);
    psd_dedup_detach(d, a, 2000);
    size_t clients, entries, bytes, uc, un;
    EXPECT_INT((int)psd_dedup_expire(d, 2999, 1000, &uc, &un), 0,
               "forgotten before the ttl");
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT(clients, 2, "clients before the ttl");
    /* a's push was never acknowledged: the caller hears of it (the node
     * logs that a copy is refused as perhaps applied), and a is kept as
     * a tombstone, not counted among the clients. */
    EXPECT_INT((int)psd_dedup_expire(d, 3000, 1000, &uc, &un), 1,
               "forgotten at the ttl");
    EXPECT_INT((int)uc, 1, "of them with pushes not acknowledged");
    EXPECT_INT((int)un, 1, "such pushes");
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT(clients, 1, "clients after the ttl (b is attached)");
    /* Coming back before the ttl keeps the memory. */
    psd_dedup_detach(d, b, 3000);
    psd_dclient *b2 = psd_dedup_attach(d, 2, 1, 3500);
    int st;
    EXPECT_INT(psd_dedup_seen(b2, 1, 0, &st), 1, "b's push after a "
               "reconnection");
    psd_dedup_expire(d, 10000, 1000, &uc, &un);
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT(clients, 1, "clients while b is attached");
    psd_dedup_free(d);
}

/* A client that pushed, had it all acknowledged and left is kept for
 * client_ttl by its mark alone: a late copy of its push is still seen
 * as complete, and it costs its struct, not a table and a ring (a trial
 * counted 533 bytes a client against conf/psd.ini's "about 200"). */
static void test_a_client_gone_with_everything_acked_keeps_only_its_mark(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    enum { N = 1000 };
    for (uint64_t id = 1; id <= N; id++) {
        psd_dclient *c = psd_dedup_attach(d, id, 1, 1000);
        assert_int_equal(psd_dedup_record(c, 1, 0, PSW_OK), 0);
        psd_dedup_ack(c, 2, UINT64_MAX);
        psd_dedup_detach(d, c, 1000);
    }
    size_t clients, entries, bytes;
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT((int)clients, N, "clients kept");
    if (bytes / N > 200)
        fail_msg("%zu bytes a client kept with nothing live", bytes / N);
    psd_dclient *c = psd_dedup_attach(d, 7, 1, 1500);
    int st = -99;
    EXPECT_INT(psd_dedup_seen(c, 1, 0, &st), 1, "a late copy of its push");
    EXPECT_INT(st, PSW_OK, "answered as complete");
    /* And it pushes again as before. */
    assert_int_equal(psd_dedup_record(c, 2, 0, PSW_OK), 0);
    EXPECT_INT(psd_dedup_seen(c, 2, 0, &st), 1, "its next push");
    EXPECT_INT(psd_dedup_seen(c, 3, 0, &st), 0, "a push it never sent");
    psd_dedup_free(d);
}

static void test_many_clients_each_keep_their_own_pushes(void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    enum { N = 1000 };
    psd_dclient *c[N];
    for (int i = 0; i < N; i++) {
        c[i] = psd_dedup_attach(d, (uint64_t)i, 42, 0);
        psd_dedup_record(c[i], (uint64_t)i + 1, 0, PSW_OK);
    }
    for (int i = 0; i < N; i++) {
        int st;
        EXPECT_PTR(psd_dedup_attach(d, (uint64_t)i, 42, 0), c[i],
                   "client %d found again", i);
        EXPECT_INT(psd_dedup_seen(c[i], (uint64_t)i + 1, 0, &st), 1,
                   "client %d's push", i);
        EXPECT_INT(psd_dedup_seen(c[i], (uint64_t)i + 2, 0, &st), 0,
                   "client %d: another's timestamp", i);
    }
    psd_dedup_free(d);
}

static size_t remembered(const psd_dedup *d)
{
    size_t clients, entries, bytes;
    psd_dedup_size(d, &clients, &entries, &bytes);
    return entries;
}

/* A client that had 10^5 pushes in flight and ACKs all but 10 gives the
 * memory back, and every push costs at most 288 bytes meanwhile. */
static void test_memory_comes_back_when_a_burst_is_acked(void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    size_t clients, entries, bytes, empty;
    psd_dedup_size(d, &clients, &entries, &empty);
    for (uint64_t ts = 1; ts <= 100000; ts++) {
        psd_dedup_record(c, ts, 0, PSW_OK);
        psd_dedup_size(d, &clients, &entries, &bytes);
        if (bytes - empty > 288 * entries + 1024)
            fail_msg("%zu bytes for %zu pushes", bytes - empty, entries);
    }
    for (uint64_t low = 2; low <= 99990; low += 7) {
        psd_dedup_ack(c, low, UINT64_MAX);
        psd_dedup_size(d, &clients, &entries, &bytes);
        if (bytes - empty > 288 * entries + 1024)
            fail_msg("%zu bytes for %zu pushes after ACK %llu",
                     bytes - empty, entries, (unsigned long long)low);
    }
    psd_dedup_ack(c, 99991, UINT64_MAX);
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT(entries, 10, "pushes left");
    if (bytes - empty > 2048)
        fail_msg("%zu bytes for 10 pushes", bytes - empty);
    int st;
    EXPECT_INT(psd_dedup_seen(c, 99995, 0, &st), 1, "a push left");
    EXPECT_INT(psd_dedup_seen(c, 99990, 0, &st), 1, "one below the mark");
    psd_dedup_free(d);
}

/* A client that never ACKs is refused at its limit, whole requests at a
 * time; an ACK makes room again. */
static void test_a_client_is_refused_at_max_unacked_until_it_acks(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    char why[256];
    for (uint64_t ts = 1; ts <= 100; ts++) {
        EXPECT_INT(psd_dedup_room(d, c, ts, 100, 1000, why, sizeof why), 0,
                   "push %llu, under the limit", (unsigned long long)ts);
        psd_dedup_record(c, ts, 0, PSW_OK);
    }
    EXPECT_INT(remembered(d), 100, "remembered");
    EXPECT_INT(psd_dedup_room(d, c, 101, 100, 1000, why, sizeof why), -1,
               "push 101, over the limit");
    if (!strstr(why, "max_unacked_pushes = 100"))
        fail_msg("why: %s", why);
    /* The other parts of the latest request still go in. */
    EXPECT_INT(psd_dedup_room(d, c, 100, 100, 1000, why, sizeof why), 0,
               "another part of push 100");
    psd_dedup_record(c, 100, 1, PSW_OK);
    psd_dedup_ack(c, 31, UINT64_MAX);
    EXPECT_INT(remembered(d), 71, "remembered after ACK 31");
    EXPECT_INT(psd_dedup_room(d, c, 101, 100, 1000, why, sizeof why), 0,
               "push 101 after the ACK");
    psd_dedup_free(d);
}

/* A record that comes after newer ones (a retransmission) is counted
 * until what came before it is below the mark, then dropped with it. */
static void test_the_count_follows_acks_over_out_of_order_records(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    for (uint64_t ts = 10; ts < 110; ts++)
        psd_dedup_record(c, ts, 0, PSW_OK);
    psd_dedup_record(c, 5, 0, PSW_OK);   /* late */
    for (uint64_t ts = 110; ts < 1000; ts++)   /* the ring grows past it */
        psd_dedup_record(c, ts, 0, PSW_OK);
    EXPECT_INT(remembered(d), 991, "remembered");
    psd_dedup_ack(c, 50, UINT64_MAX);
    EXPECT_INT(remembered(d), 951, "after ACK 50 (5 still counted)");
    psd_dedup_ack(c, 500, UINT64_MAX);
    EXPECT_INT(remembered(d), 500, "after ACK 500");
    psd_dedup_ack(c, 5000, UINT64_MAX);
    EXPECT_INT(remembered(d), 0, "after ACK 5000");
    int st;
    EXPECT_INT(psd_dedup_seen(c, 6000, 0, &st), 0, "6000, new");
    EXPECT_INT(psd_dedup_record(c, 6000, 0, PSW_OK), 0, "record 6000");
    EXPECT_INT(remembered(d), 1, "after a new record");
    psd_dedup_free(d);
}

/* At the node's limit, the client gone longest is forgotten to make room;
 * clients with a connection never are, and when only they hold pushes,
 * the push is refused. */
static void test_the_node_forgets_clients_gone_longest_at_its_limit(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *a = psd_dedup_attach(d, 1, 1, 0);
    psd_dclient *b = psd_dedup_attach(d, 2, 1, 0);
    psd_dclient *c = psd_dedup_attach(d, 3, 1, 0);
    for (uint64_t ts = 1; ts <= 10; ts++) {
        psd_dedup_record(a, ts, 0, PSW_OK);
        psd_dedup_record(b, ts, 0, PSW_OK);
        psd_dedup_record(c, ts, 0, PSW_OK);
    }
    psd_dedup_detach(d, b, 500);   /* b left first, */
    psd_dedup_detach(d, a, 800);   /* then a; c stays */
    char why[256];
    EXPECT_INT(psd_dedup_room(d, c, 11, 100, 30, why, sizeof why), 1,
               "c's push at the node's limit");
    if (!strstr(why, "max_remembered_pushes = 30"))
        fail_msg("why: %s", why);
    uint64_t id, inc, since;
    size_t count;
    EXPECT_INT(psd_dedup_forget_idlest(d, &id, &inc, &count, &since), 1,
               "forget one");
    EXPECT_U64(id, 2, "the client gone longest");
    EXPECT_INT(count, 10, "its pushes");
    EXPECT_U64(since, 500, "gone since");
    EXPECT_INT(remembered(d), 20, "remembered after");
    EXPECT_INT(psd_dedup_room(d, c, 11, 100, 30, why, sizeof why), 0,
               "c's push now");
    psd_dedup_record(c, 11, 0, PSW_OK);
    EXPECT_INT(psd_dedup_forget_idlest(d, &id, &inc, &count, &since), 1,
               "forget another");
    EXPECT_U64(id, 1, "then a");
    EXPECT_INT(psd_dedup_forget_idlest(d, &id, &inc, &count, &since), 0,
               "c is connected: nobody else to forget");
    size_t clients, entries, bytes;
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT(clients, 1, "clients left");
    EXPECT_INT(entries, 11, "c's pushes");
    /* b, coming back, finds its tombstone: whether its old pushes were
     * applied is not known (2), so a copy is refused, not applied again
     * (before, the node had forgotten b whole and applied it again); a
     * new push is new. */
    psd_dclient *b2 = psd_dedup_attach(d, 2, 1, 900);
    int st;
    EXPECT_INT(psd_dedup_seen(b2, 5, 0, &st), 2, "b's old push");
    EXPECT_INT(psd_dedup_seen(b2, 11, 0, &st), 0, "b's next push");
    psd_dedup_free(d);
}

/* After a restart from a snapshot, an ACK counts off what it completed
 * as it did before: the count, and so max_unacked_pushes, do not depend
 * on the order the snapshot happened to list the pushes in. */
static void test_the_count_follows_acks_after_a_snapshot_is_loaded(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 9, 1, 0);
    for (uint64_t ts = 1; ts <= 1000; ts++)
        psd_dedup_record(c, ts, 0, PSW_OK);
    membuf m = { 0 };
    psd_sink o = { mem_put, &m };
    EXPECT_INT(psd_dedup_save(d, &o), 0, "save");
    psd_dedup_free(d);
    psd_dedup *d2 = psd_dedup_new();
    psd_source in = { mem_get, &m };
    char err[128];
    EXPECT_INT(psd_dedup_load(d2, &in, 0, err, sizeof err), 0, "load");
    EXPECT_INT(remembered(d2), 1000, "remembered after the load");
    psd_dclient *c2 = psd_dedup_attach(d2, 9, 1, 0);
    psd_dedup_ack(c2, 501, UINT64_MAX);
    EXPECT_INT(remembered(d2), 500, "after ACK 501");
    char why[256];
    EXPECT_INT(psd_dedup_room(d2, c2, 1001, 600, 10000, why, sizeof why), 0,
               "push 1001 with 500 unacked, max_unacked_pushes 600");
    psd_dedup_ack(c2, 1001, UINT64_MAX);
    EXPECT_INT(remembered(d2), 0, "after ACK 1001");
    free(m.p);
    psd_dedup_free(d2);
}

/* A client forgotten with pushes it had not acknowledged is kept as a
 * tombstone: a copy of one of them is "not known" (2), not new; back, it
 * stays one while it has not acknowledged past them, and is forgotten
 * for good once it has; tombstones are bounded (the oldest go first) and
 * not saved. */
static void test_a_client_forgotten_with_unacked_pushes_leaves_a_tombstone(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *a = psd_dedup_attach(d, 1, 1, 0);
    psd_dedup_record(a, 1, 0, PSW_OK);
    psd_dedup_record(a, 2, 0, PSW_OK);
    psd_dedup_detach(d, a, 0);
    size_t uc, un, clients, entries, bytes;
    EXPECT_INT((int)psd_dedup_expire(d, 1000, 1000, &uc, &un), 1, "expired");
    psd_dedup_size(d, &clients, &entries, &bytes);
    EXPECT_INT(clients, 0, "clients (the tombstone is not one)");
    EXPECT_INT(entries, 0, "pushes remembered");
    /* Not expired again while a tombstone. */
    EXPECT_INT((int)psd_dedup_expire(d, 5000, 1000, &uc, &un), 0,
               "a tombstone does not expire");
    a = psd_dedup_attach(d, 1, 1, 5000);
    int st;
    EXPECT_INT(psd_dedup_seen(a, 2, 0, &st), 2, "a copy of push 2");
    EXPECT_INT(psd_dedup_seen(a, 3, 0, &st), 0, "push 3, new");
    psd_dedup_record(a, 3, 0, PSW_OK);
    psd_dedup_ack(a, 4, UINT64_MAX);     /* past 1..3 (its copies stale) */
    EXPECT_INT(psd_dedup_seen(a, 2, 0, &st), 1, "push 2, below the mark");
    EXPECT_INT(st, PSW_OK, "a stale copy");
    psd_dedup_detach(d, a, 5000);
    /* Everything acknowledged: forgotten for good at the ttl, no
     * tombstone (a client not known after it). */
    EXPECT_INT((int)psd_dedup_expire(d, 8000, 1000, &uc, &un), 1,
               "expired for good");
    EXPECT_INT((int)uc, 0, "with nothing unacknowledged");
    a = psd_dedup_attach(d, 1, 1, 9000);
    EXPECT_INT(psd_dedup_seen(a, 2, 0, &st), 0, "a client not known");
    psd_dedup_detach(d, a, 9000);
    /* A push refused at a check (seen, psd_dedup_pushed, but not
     * recorded) is checked again when sent again, tombstone or not: only
     * pushes applied are below what a tombstone forgot. */
    psd_dclient *f = psd_dedup_attach(d, 4, 1, 9000);
    psd_dedup_record(f, 5, 0, PSW_OK);
    psd_dedup_pushed(f, 9);
    psd_dedup_detach(d, f, 9000);
    psd_dedup_expire(d, 10000, 1000, &uc, &un);
    f = psd_dedup_attach(d, 4, 1, 10000);
    EXPECT_INT(psd_dedup_seen(f, 5, 0, &st), 2, "push 5, applied, forgotten");
    EXPECT_INT(psd_dedup_seen(f, 9, 0, &st), 0, "push 9, refused before");
    psd_dedup_ack(f, 10, UINT64_MAX);
    psd_dedup_detach(d, f, 10000);
    /* Tombstones are not saved. */
    psd_dclient *b = psd_dedup_attach(d, 2, 1, 9000);
    psd_dedup_record(b, 7, 0, PSW_OK);
    psd_dedup_detach(d, b, 9000);
    psd_dedup_expire(d, 20000, 1000, &uc, &un);
    membuf m = { 0 };
    psd_sink o = { mem_put, &m };
    EXPECT_INT(psd_dedup_save(d, &o), 0, "save");
    psd_dedup *d2 = psd_dedup_new();
    psd_source in = { mem_get, &m };
    char err[128];
    EXPECT_INT(psd_dedup_load(d2, &in, 0, err, sizeof err), 0, "load");
    psd_dedup_size(d2, &clients, &entries, &bytes);
    EXPECT_INT(clients, 0, "clients loaded");
    free(m.p);
    psd_dedup_free(d2);
    /* At most 16384 tombstones (the oldest forgotten first). */
    for (uint64_t id = 100; id < 100 + 16384 + 10; id++) {
        psd_dclient *x = psd_dedup_attach(d, id, 1, 30000);
        psd_dedup_record(x, 1, 0, PSW_OK);
        psd_dedup_detach(d, x, 30000);
    }
    psd_dedup_expire(d, 40000, 1000, &uc, &un);
    int kept = 0;
    for (uint64_t id = 100; id < 100 + 16384 + 10; id++)
        kept += psd_dedup_seen(psd_dedup_attach(d, id, 1, 40000), 1, 0,
                               &st) == 2;
    EXPECT_INT(kept, 16384, "tombstones kept of 16394");
    psd_dedup_free(d);
}

/* The parts of a request are waived past the limits, but a request has
 * PSW_MAX_PARTS parts at most, and so many go past the node's limit in
 * all: a client that sent a million parts of one ts went past both
 * limits with every one (a trial: 1,050,000 remembered against 5,000,
 * 300 MB, every other client's pushes refused while it stayed). The
 * waiver is counted again from a snapshot. */
static void test_one_requests_parts_are_waived_up_to_the_most_it_may_have(
    void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    psd_dclient *o = psd_dedup_attach(d, 2, 1, 0);
    char why[256];
    EXPECT_INT(psd_dedup_room(d, c, 5, 10, 100, why, sizeof why), 0,
               "ts 5's first part");
    psd_dedup_record(c, 5, 0, PSW_OK);
    uint32_t part = 1;
    while (part < 3 * PSW_MAX_PARTS &&
           psd_dedup_room(d, c, 5, 10, 100, why, sizeof why) == 0)
        psd_dedup_record(c, 5, part++, PSW_OK);
    EXPECT_INT(part, PSW_MAX_PARTS, "parts of ts 5 taken");
    if (!strstr(why, "max_unacked_pushes = 10"))
        fail_msg("why: %s", why);
    /* Over the node's limit, by one request's parts at most. */
    psd_dclient *e = psd_dedup_attach(d, 3, 1, 0);
    psd_dedup_record(e, 9, 0, PSW_OK);
    part = 1;
    while (part < 3 * PSW_MAX_PARTS &&
           psd_dedup_room(d, e, 9, 1000000, 100, why, sizeof why) == 0)
        psd_dedup_record(e, 9, part++, PSW_OK);
    EXPECT_INT(remembered(d), 100 + PSW_MAX_PARTS, "remembered in all");
    if (!strstr(why, "max_remembered_pushes = 100"))
        fail_msg("why: %s", why);
    EXPECT_INT(psd_dedup_room(d, o, 1, 10, 100, why, sizeof why), 1,
               "another client's push over the limit");
    psd_dedup_ack(c, 6, UINT64_MAX);
    psd_dedup_ack(e, 10, UINT64_MAX);
    EXPECT_INT(psd_dedup_room(d, o, 1, 10, 100, why, sizeof why), 0,
               "after the ACKs");
    /* Loaded from a snapshot, a request's parts count as they did. */
    for (part = 0; part < PSW_MAX_PARTS - 1; part++)
        psd_dedup_record(c, 7, part, PSW_OK);
    membuf m = { 0 };
    psd_sink out = { mem_put, &m };
    EXPECT_INT(psd_dedup_save(d, &out), 0, "save");
    psd_dedup *d2 = psd_dedup_new();
    psd_source in = { mem_get, &m };
    char err[128];
    EXPECT_INT(psd_dedup_load(d2, &in, 0, err, sizeof err), 0, "load");
    psd_dclient *c2 = psd_dedup_attach(d2, 1, 1, 0);
    EXPECT_INT(psd_dedup_room(d2, c2, 7, 10, 1000000, why, sizeof why), 0,
               "ts 7's last part after the load");
    psd_dedup_record(c2, 7, part, PSW_OK);
    EXPECT_INT(psd_dedup_room(d2, c2, 7, 10, 1000000, why, sizeof why), -1,
               "a part past the most a request has, after the load");
    free(m.p);
    psd_dedup_free(d2);
    psd_dedup_free(d);
}

/* A request one part of which was refused at the limits is refused
 * whole: its later parts, and a copy of the refused one, once an ACK
 * made room (they were taken: a trial's requests applied in part on one
 * node); the client's next request is taken. */
static void a_request_refused_in_part_is_refused_whole(void **state)
{
    (void)state;
    psd_dedup *d = psd_dedup_new();
    psd_dclient *c = psd_dedup_attach(d, 1, 1, 0);
    char why[256];
    for (uint64_t ts = 1; ts <= 10; ts++)
        psd_dedup_record(c, ts, 0, PSW_OK);
    EXPECT_INT(psd_dedup_room(d, c, 11, 10, 1000, why, sizeof why), -1,
               "part 0 of push 11, at max_unacked_pushes");
    psd_dedup_refused(c, 11);
    psd_dedup_ack(c, 6, UINT64_MAX);     /* room for five more */
    EXPECT_INT(psd_dedup_room(d, c, 11, 10, 1000, why, sizeof why), -1,
               "part 1 of push 11, or a copy of part 0, with room");
    if (!strstr(why, "refused a part of this push"))
        fail_msg("why: %s", why);
    EXPECT_INT(psd_dedup_room(d, c, 12, 10, 1000, why, sizeof why), 0,
               "push 12");
    /* A push of another ts ends the request: 11 may be sent again. */
    psd_dedup_pushed(c, 11);
    EXPECT_INT(psd_dedup_room(d, c, 11, 10, 1000, why, sizeof why), -1,
               "push 11, its parts still in a row");
    psd_dedup_pushed(c, 12);
    EXPECT_INT(psd_dedup_room(d, c, 11, 10, 1000, why, sizeof why), 0,
               "push 11 sent again after push 12");
    psd_dedup_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_a_recorded_push_is_seen_with_its_status_and_others_not),
        cmocka_unit_test(
            test_ack_forgets_below_the_mark_and_refuses_stale_copies),
        cmocka_unit_test(
            test_an_ack_past_every_push_seen_stops_above_the_highest),
        cmocka_unit_test(test_memory_stays_flat_with_a_sliding_window),
        cmocka_unit_test(
            test_clients_without_connections_expire_after_the_ttl),
        cmocka_unit_test(test_a_client_gone_with_everything_acked_keeps_only_its_mark),
        cmocka_unit_test(test_many_clients_each_keep_their_own_pushes),
        cmocka_unit_test(test_memory_comes_back_when_a_burst_is_acked),
        cmocka_unit_test(
            test_a_client_is_refused_at_max_unacked_until_it_acks),
        cmocka_unit_test(
            test_the_count_follows_acks_over_out_of_order_records),
        cmocka_unit_test(
            test_the_node_forgets_clients_gone_longest_at_its_limit),
        cmocka_unit_test(
            test_the_count_follows_acks_after_a_snapshot_is_loaded),
        cmocka_unit_test(
            test_a_client_forgotten_with_unacked_pushes_leaves_a_tombstone),
        cmocka_unit_test(
            test_one_requests_parts_are_waived_up_to_the_most_it_may_have),
        cmocka_unit_test(a_request_refused_in_part_is_refused_whole),
    };
    return cmocka_run_group_tests_name("dedup", tests, NULL, NULL);
}
