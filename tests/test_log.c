/* Unit tests of daemon/log.c's collapsing of repeated messages: a burst
 * logs its first line and one count, a single message logs one line, no
 * message is lost from the count, messages that differ in more than
 * their numbers are counted apart. stderr goes to
 * a temporary file the tests read back; time is passed in. */
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

#include "expect.h"

static char path[] = "/tmp/psd-test-log-XXXXXX";
static int saved = -1;

/* Sends stderr to a fresh temporary file. */
static int capture(void **state)
{
    (void)state;
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    close(fd);
    psd_log_init(0, PSD_LOG_INFO);
    return 0;
}

/* Gives stderr back and removes the file. */
static int release(void **state)
{
    (void)state;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unlink(path);
    strcpy(path, "/tmp/psd-test-log-XXXXXX");
    return 0;
}

/* What was logged so far (malloc'd), and its number of lines. */
static char *logged(int *lines)
{
    fflush(stderr);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    buf[n] = '\0';
    *lines = 0;
    for (char *p = buf; *p; p++)
        *lines += *p == '\n';
    return buf;
}

static void burst_logs_its_first_line_and_one_count(void **state)
{
    (void)state;
    int lines;
    for (int i = 0; i < 977; i++)
        psd_log_rep_at(1000 + (uint64_t)i, PSD_LOG_WARN,
                       "refusing 127.0.0.1:%d: max_connections (4) reached",
                       40000 + i);
    char *log = logged(&lines);
    EXPECT_INT(lines, 1, "lines after a burst of 977 in one window");
    assert_non_null(strstr(log, "warn: refusing 127.0.0.1:40000: "
                                "max_connections (4) reached"));
    free(log);
    psd_log_flush_at(1000 + PSD_LOGREP_WINDOW_MS - 1);
    log = logged(&lines);
    EXPECT_INT(lines, 1, "lines after a flush inside the window");
    free(log);
    psd_log_flush_at(1000 + PSD_LOGREP_WINDOW_MS);
    log = logged(&lines);
    EXPECT_INT(lines, 2, "lines after a flush at the end of the window");
    const char *want = "warn: ... and 976 more like \"refusing "
                       "127.0.0.1:40000: max_connections (4) reached\" in "
                       "10 s (the last: \"refusing 127.0.0.1:40976: "
                       "max_connections (4) reached\")";
    if (!strstr(log, want))
        fail_msg("got:\n%s\nwant a line with: %s", log, want);
    free(log);
    /* Counted once: a second flush says nothing more. */
    psd_log_flush_at(1000 + 3 * PSD_LOGREP_WINDOW_MS);
    log = logged(&lines);
    EXPECT_INT(lines, 2, "lines after a second flush");
    free(log);
}

static void message_after_the_window_logs_the_count_then_itself(void **state)
{
    (void)state;
    int lines;
    psd_log_rep_at(0, PSD_LOG_WARN, "closing %d", 1);
    psd_log_rep_at(5, PSD_LOG_WARN, "closing %d", 2);
    psd_log_rep_at(9999, PSD_LOG_WARN, "closing %d", 3);
    psd_log_rep_at(12000, PSD_LOG_WARN, "closing %d", 4);
    char *log = logged(&lines);
    EXPECT_INT(lines, 3, "lines");
    char *a = strstr(log, "closing 1"), *cnt = strstr(log, "... and 2 more "
                                                           "like \"closing "
                                                           "1\" in 12 s"),
         *d = strstr(log, "closing 4");
    if (!a || !cnt || !d || !(a < cnt && cnt < d))
        fail_msg("got:\n%s\nwant closing 1, the count of 2 in 12 s, then "
                 "closing 4", log);
    assert_null(strstr(log, "closing 2"));
    free(log);
}

/* The same text again and again: the count quotes it once, with no
 * "(the last: ...)" that repeats it. */
static void identical_messages_are_quoted_once(void **state)
{
    (void)state;
    int lines;
    for (int i = 0; i < 4; i++)
        psd_log_rep_at(100000 + (uint64_t)i, PSD_LOG_WARN, "same %d", 7);
    psd_log_flush_at(100000 + PSD_LOGREP_WINDOW_MS);
    char *log = logged(&lines);
    EXPECT_INT(lines, 2, "lines");
    if (!strstr(log, "... and 3 more like \"same 7\" in 10 s\n") ||
        strstr(log, "the last"))
        fail_msg("got:\n%s", log);
    free(log);
}

/* A long message is quoted whole in the count, up to 319 bytes: at 160,
 * "... max_client_memory is 1048576" was cut to "... is 1048", which
 * read as 1048 bytes (a trial). */
static void a_long_message_is_quoted_whole_in_the_count(void **state)
{
    (void)state;
    int lines;
    const char *pad = "closing connection from 127.0.0.1:4242: it uses "
                      "1656317 bytes of buffers, the most of all 2 "
                      "connections, which use 1722109 together; and some "
                      "more words to pass 160 bytes;";
    for (int i = 0; i < 3; i++)
        psd_log_rep_at(200000 + (uint64_t)i, PSD_LOG_WARN,
                       "%s max_client_memory is %d", pad, 1048576);
    psd_log_flush_at(200000 + PSD_LOGREP_WINDOW_MS);
    char *log = logged(&lines);
    if (!strstr(log, "more like") ||
        !strstr(strstr(log, "more like"), "max_client_memory is 1048576\""))
        fail_msg("got:\n%s", log);
    free(log);
}

static void single_message_logs_one_line_and_no_count(void **state)
{
    (void)state;
    int lines;
    psd_log_rep_at(50, PSD_LOG_WARN, "only %d", 1);
    psd_log_flush_at(50 + 10 * PSD_LOGREP_WINDOW_MS);
    psd_log_rep_at(60 + 10 * PSD_LOGREP_WINDOW_MS, PSD_LOG_WARN, "only %d",
                   2);
    char *log = logged(&lines);
    EXPECT_INT(lines, 2, "lines");
    assert_null(strstr(log, "more like"));
    free(log);
}

static void messages_that_differ_in_words_are_counted_apart(void **state)
{
    (void)state;
    int lines;
    for (int i = 0; i < 3; i++) {
        psd_log_rep_at(100 + (uint64_t)i, PSD_LOG_WARN, "worker %d is out "
                       "of range", 7 + i);
        psd_log_rep_at(100 + (uint64_t)i, PSD_LOG_INFO, "worker %d is "
                       "already connected", i);
    }
    psd_log_flush_at(100 + PSD_LOGREP_WINDOW_MS);
    char *log = logged(&lines);
    EXPECT_INT(lines, 4, "lines");
    assert_non_null(strstr(log, "warn: worker 7 is out of range"));
    assert_non_null(strstr(log, "info: worker 0 is already connected"));
    assert_non_null(strstr(log, "warn: ... and 2 more like \"worker 7 is "
                                "out of range\""));
    assert_non_null(strstr(log, "info: ... and 2 more like \"worker 0 is "
                                "already connected\""));
    free(log);
}

static void more_kinds_than_slots_lose_no_count(void **state)
{
    (void)state;
    int lines;
    char word[8];
    /* Two of each kind: the second is counted, or, when its kind's window
     * was ended early for room, logged. Either way every message shows. */
    for (int k = 0; k < PSD_LOGREP_KINDS + 10; k++) {
        snprintf(word, sizeof word, "%c%c", 'a' + k % 26, 'a' + k / 26);
        psd_log_rep_at(200 + (uint64_t)k, PSD_LOG_WARN, "kind %s", word);
        psd_log_rep_at(200 + (uint64_t)k, PSD_LOG_WARN, "kind %s", word);
    }
    psd_log_flush_at(200 + 2 * PSD_LOGREP_WINDOW_MS);
    char *log = logged(&lines);
    int shown = 0;
    for (const char *p = log; (p = strstr(p, "kind ")); p++)
        shown++;
    int counted = 0;
    for (const char *p = log; (p = strstr(p, "... and 1 more")); p++)
        counted++;
    /* Each kind: its line (and its count line, which quotes it). */
    EXPECT_INT(shown, 2 * (PSD_LOGREP_KINDS + 10), "kind texts in the log");
    EXPECT_INT(counted, PSD_LOGREP_KINDS + 10, "count lines");
    free(log);
}

static void messages_below_the_level_are_counted_silently(void **state)
{
    (void)state;
    int lines;
    psd_log_set_level(PSD_LOG_ERROR);
    for (int i = 0; i < 5; i++)
        psd_log_rep_at((uint64_t)i, PSD_LOG_WARN, "quiet %d", i);
    psd_log_flush_at(PSD_LOGREP_WINDOW_MS);
    psd_log_set_level(PSD_LOG_INFO);
    char *log = logged(&lines);
    EXPECT_INT(lines, 0, "lines");
    free(log);
}

/* Peers on IPv6 are alike however their hex digits differ: each
 * address was a kind of its own, so a flood from many was a line each. */
static void ipv6_peers_are_alike(void **state)
{
    (void)state;
    int lines;
    static const char *const peers[] = { "[2001:db8::1]:40000",
                                         "[fe80::abcd:ef]:40001",
                                         "[::ffff:10.0.0.2]:5",
                                         "[2001:db8:aaaa::ff]:7" };
    for (int i = 0; i < 4; i++)
        psd_log_rep_at(300000 + (uint64_t)i, PSD_LOG_WARN,
                       "refusing %s: max_connections (4) reached", peers[i]);
    char *log = logged(&lines);
    EXPECT_INT(lines, 1, "lines after 4 refusals of IPv6 peers:\n%s", log);
    free(log);
    psd_log_flush_at(300000 + PSD_LOGREP_WINDOW_MS);
    log = logged(&lines);
    if (!strstr(log, "... and 3 more like \"refusing [2001:db8::1]:40000"))
        fail_msg("got:\n%s", log);
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            burst_logs_its_first_line_and_one_count, capture, release),
        cmocka_unit_test_setup_teardown(
            message_after_the_window_logs_the_count_then_itself, capture,
            release),
        cmocka_unit_test_setup_teardown(
            single_message_logs_one_line_and_no_count, capture, release),
        cmocka_unit_test_setup_teardown(
            identical_messages_are_quoted_once, capture, release),
        cmocka_unit_test_setup_teardown(
            a_long_message_is_quoted_whole_in_the_count, capture, release),
        cmocka_unit_test_setup_teardown(
            messages_that_differ_in_words_are_counted_apart, capture,
            release),
        cmocka_unit_test_setup_teardown(more_kinds_than_slots_lose_no_count,
                                        capture, release),
        cmocka_unit_test_setup_teardown(
            messages_below_the_level_are_counted_silently, capture, release),
        cmocka_unit_test_setup_teardown(ipv6_peers_are_alike, capture,
                                        release),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
