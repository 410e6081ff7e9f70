/* Timestamps far into a client's life. libpsclient keys its parts in
 * flight by (ts, part) in 64 bits, 48 of them the timestamp's, and took
 * every reply of a timestamp from 2^48 on for one it never sent: from
 * then on each request failed with PS_ETIMEDOUT, though psd had applied
 * it (about nine years at a million requests a second, but a client must
 * not have an end of life). This test links the library statically, to
 * start a client's numbering just below 2^48 (client/internal.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cluster.h"
#include "expect.h"
#include "psclient.h"
#include "../client/internal.h"

static void requests_past_ts_2_to_the_48_complete(void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 2, 4, "[table.s]\ndim = 1\nupdater = sum\n"))
        fail_msg("cluster did not start");
    ps_options o;
    ps_options_init(&o);
    o.request_timeout_ms = 2000;          /* a hang bound: none is lost */
    o.max_retries = 0;
    ps_client *cl = NULL;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, "s", NULL);
    /* Nothing issued yet: the next request is 2^48 - 2. */
    const ps_ts from = ((ps_ts)1 << 48) - 2;
    pthread_mutex_lock(&cl->cu.mu);
    cl->cu.last_ts = from - 1;
    __atomic_store_n(&cl->cu.low, from, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&cl->cu.mu);
    uint64_t keys[8];
    float one[8], out[8];
    for (int i = 0; i < 8; i++) {
        keys[i] = (uint64_t)i * 7919;    /* both nodes */
        one[i] = 1;
    }
    for (int i = 0; i < 6; i++) {
        ps_ts ts = ps_push(cl, t, keys, 8, one, NULL, NULL);
        EXPECT_INT(ts == from + i, 1, "push %d numbered %lld", i,
                   (long long)ts);
        EXPECT_INT(ps_wait(cl, ts), PS_OK, "push %lld: %s", (long long)ts,
                   ps_last_error(cl));
    }
    ps_ts ts = ps_pull(cl, t, keys, 8, out, NULL, NULL);
    EXPECT_INT(ps_wait(cl, ts), PS_OK, "pull %lld: %s", (long long)ts,
               ps_last_error(cl));
    for (int i = 0; i < 8; i++)
        EXPECT_FLOAT(out[i], 6, "key %llu after six pushes",
                     (unsigned long long)keys[i]);
    ps_close(cl);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    if (getenv("PSD_TEST_ONLY"))
        cmocka_set_test_filter(getenv("PSD_TEST_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(requests_past_ts_2_to_the_48_complete),
    };
    return cmocka_run_group_tests_name("ts", tests, NULL, NULL);
}
