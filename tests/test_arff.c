/* Unit tests of examples/arff.c, the ARFF reader and word hasher behind
 * examples/reuters_lr: records, escapes and errors on inline text, the
 * FNV-1a reference values, and the keys a text turns into. Pure: no
 * files, no network, no downloaded data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../examples/arff.h"

#include "expect.h"

#define MAX_RECORDS 8

/* What the parse callback saw. */
typedef struct seen {
    int n;
    char text[MAX_RECORDS][128];
    int label[MAX_RECORDS];
    int stop_at;            /* fail the call for record stop_at (-1: never) */
} seen;

static int collect(const char *text, size_t len, int label, void *arg,
                   char *err, size_t errlen)
{
    seen *s = arg;
    if (s->n == s->stop_at) {
        snprintf(err, errlen, "stopped at record %d", s->n);
        return -1;
    }
    if (s->n >= MAX_RECORDS || len >= sizeof s->text[0])
        fail_msg("record %d: too many records or %zu bytes of text", s->n,
                 len);
    memcpy(s->text[s->n], text, len);
    s->text[s->n][len] = '\0';
    s->label[s->n] = label;
    s->n++;
    return 0;
}

/* Runs arff_parse on a copy of text (it writes into its buffer). */
static long parse(const char *text, seen *s, char *err, size_t errlen)
{
    size_t len = strlen(text);
    char *buf = malloc(len + 1);
    if (!buf)
        fail_msg("malloc(%zu): got NULL", len + 1);
    memcpy(buf, text, len + 1);
    memset(s, 0, sizeof *s);
    s->stop_at = -1;
    long n = arff_parse(buf, len, collect, s, err, errlen);
    free(buf);
    return n;
}

static uint64_t key_of(const char *word)
{
    return arff_fnv1a(word, strlen(word)) & (ARFF_KEY_SPACE - 1);
}

/* ---- the parser --------------------------------------------------------- */

static void test_parse_reads_text_and_class_of_each_data_line(void **state)
{
    (void)state;
    static const char text[] =
        "% a comment\n"
        "@relation 'Reuters-21578 Grain'\n"
        "\n"
        "@attribute Text string\n"
        "@attribute class-att {0,1}\n"
        "@DATA\n"
        "'WHEAT sales\\nrose',1\n"
        "  'it\\'s \\\"up\\\" \\\\ 5\\tpct' , 0  \r\n"
        "% a comment between records\n"
        "\"double, quoted\",0\n"
        "'',1";                 /* the last line has no newline */
    seen s;
    char err[128];

    long n = parse(text, &s, err, sizeof err);
    EXPECT_INT(n, 4, "records (error: %s)", err);
    EXPECT_INT(s.n, 4, "callbacks");
    EXPECT_STR(s.text[0], "WHEAT sales\nrose", "record 0 text");
    EXPECT_INT(s.label[0], 1, "record 0 class");
    EXPECT_STR(s.text[1], "it's \"up\" \\ 5\tpct", "record 1 text");
    EXPECT_INT(s.label[1], 0, "record 1 class");
    EXPECT_STR(s.text[2], "double, quoted", "record 2 text");
    EXPECT_INT(s.label[2], 0, "record 2 class");
    EXPECT_STR(s.text[3], "", "record 3 text");
    EXPECT_INT(s.label[3], 1, "record 3 class");
}

static void test_parse_rejects_bad_lines_naming_the_line(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        { "@data\n'no end,0\n", "line 2: the text has no closing quote" },
        { "@data\n'ends in a backslash\\", "line 2: the text has no "
          "closing quote" },
        { "@data\n'a' 0\n", "line 2: expected a comma after the text" },
        { "@data\n'a',2\n", "line 2: the class must be 0 or 1" },
        { "@data\n'a',\n", "line 2: the class must be 0 or 1" },
        { "@data\n'a',10\n", "line 2: unexpected characters after the "
          "class" },
        { "@data\n'a',0,'b'\n", "line 2: unexpected characters after the "
          "class" },
        { "@data\nplain words,0\n", "line 2: expected a quoted text" },
        { "@relation r\n'a',0\n", "line 2: data before the @data line" },
        { "@database x\n'a',0\n", "line 2: data before the @data line" },
        { "@data\n'a',0\n@attribute x string\n", "line 3: a header line "
          "after @data" },
        { "@relation r\n", "no @data line" },
        { "", "no @data line" },
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        seen s;
        char err[128];
        long n = parse(cases[i].text, &s, err, sizeof err);
        EXPECT_INT(n, -1, "case %zu: result", i);
        EXPECT_STR(err, cases[i].want, "case %zu: error", i);
    }
}

static void test_parse_stops_when_the_callback_fails(void **state)
{
    (void)state;
    char buf[] = "@data\n'a',0\n'b',1\n'c',0\n";
    seen s;
    char err[128];

    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    long n = arff_parse(buf, strlen(buf), collect, &s, err, sizeof err);
    EXPECT_INT(n, -1, "result");
    EXPECT_INT(s.n, 1, "records taken before the failing one");
    EXPECT_STR(err, "stopped at record 1", "error");
}

/* ---- hashing and keys --------------------------------------------------- */

static void test_fnv1a_gives_the_reference_values(void **state)
{
    (void)state;
    /* The published FNV-1a 32-bit test vectors. */
    EXPECT_U64(arff_fnv1a("", 0), 0x811c9dc5u, "fnv1a(\"\")");
    EXPECT_U64(arff_fnv1a("a", 1), 0xe40c292cu, "fnv1a(\"a\")");
    EXPECT_U64(arff_fnv1a("foobar", 6), 0xbf9cf968u, "fnv1a(\"foobar\")");
    EXPECT_U64(key_of("foobar"), 0xcf968u, "foobar's 20-bit key");
}

static void test_text_keys_are_lowercased_words_of_two_letters_or_more(
    void **state)
{
    (void)state;
    /* "U.S." and "a" are too short; digits, punctuation, newlines and a
     * non-ASCII byte end words; "GRAIN", "grain" and "Grain" are one. */
    static const char text[] =
        "GRAIN shipments rose 3.5 pct\nin U.S. a ports;grain,Grain "
        "caf\xc3\xa9x abc1def";
    static const char *const words[] = {
        "grain", "shipments", "rose", "pct", "in", "ports", "caf", "abc",
        "def",
    };
    const size_t nwords = sizeof words / sizeof words[0];
    size_t len = sizeof text - 1;
    uint64_t keys[ARFF_MAX_WORDS(sizeof text)];

    size_t n = arff_text_keys(text, len, keys);
    EXPECT_U64(n, nwords, "distinct keys");
    for (size_t i = 1; i < n; i++)
        if (keys[i - 1] >= keys[i])
            fail_msg("keys not strictly increasing at %zu: %llu then %llu",
                     i, (unsigned long long)keys[i - 1],
                     (unsigned long long)keys[i]);
    for (size_t w = 0; w < nwords; w++) {
        uint64_t k = key_of(words[w]);
        size_t i = 0;
        while (i < n && keys[i] != k)
            i++;
        if (i == n)
            fail_msg("no key %llu for \"%s\"", (unsigned long long)k,
                     words[w]);
        if (k >= ARFF_KEY_SPACE)
            fail_msg("key %llu of \"%s\" is outside the key space",
                     (unsigned long long)k, words[w]);
    }
}

static void test_text_keys_fit_the_documented_room(void **state)
{
    (void)state;
    /* The densest text: two-letter words with one byte between them. */
    static const char text[] = "ab cd ef gh ij";
    size_t len = sizeof text - 1, room = ARFF_MAX_WORDS(sizeof text - 1);
    uint64_t keys[16];

    for (size_t i = 0; i < 16; i++)
        keys[i] = UINT64_MAX;
    EXPECT_U64(arff_text_keys(text, len, keys), 5, "keys");
    EXPECT_U64(room, 5, "ARFF_MAX_WORDS(%zu)", len);
    EXPECT_U64(keys[room], UINT64_MAX, "the key after the room");
    EXPECT_U64(arff_text_keys("", 0, keys), 0, "keys of an empty text");
    EXPECT_U64(arff_text_keys("a 1 .", 5, keys), 0, "keys of no words");
}

static void test_set_parse_keeps_labels_and_keys_per_document(void **state)
{
    (void)state;
    char buf[] = "@data\n'Grain, wheat and GRAIN',1\n'oil',0\n'7 %',0\n";
    arff_set s;
    char err[128];

    int rc = arff_set_parse(buf, strlen(buf), &s, err, sizeof err);
    EXPECT_INT(rc, 0, "arff_set_parse (error: %s)", err);
    EXPECT_U64(s.n, 3, "documents");
    EXPECT_U64(s.npos, 1, "positive documents");
    EXPECT_INT(s.labels[0], 1, "label 0");
    EXPECT_INT(s.labels[1], 0, "label 1");
    EXPECT_U64(s.start[0], 0, "start[0]");
    EXPECT_U64(s.start[1], 3, "start[1]: grain, wheat, and");
    EXPECT_U64(s.start[2], 4, "start[2]: oil");
    EXPECT_U64(s.start[3], 4, "start[3]: no words in the last one");
    EXPECT_U64(s.keys[3], key_of("oil"), "document 1's key");
    for (size_t i = 0; i < s.start[s.n]; i++)
        if (s.keys[i] == ARFF_BIAS_KEY)
            fail_msg("key %zu is the bias key, which is not stored", i);
    arff_destroy(&s);
    EXPECT_PTR(s.keys, NULL, "keys after arff_destroy");
    arff_destroy(&s);       /* a zeroed set is fine */

    char bad[] = "@data\n'a',0\n'b',3\n";
    rc = arff_set_parse(bad, strlen(bad), &s, err, sizeof err);
    EXPECT_INT(rc, -1, "arff_set_parse of a bad class");
    EXPECT_STR(err, "line 3: the class must be 0 or 1", "error");
    EXPECT_U64(s.n, 0, "documents after a failure");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_reads_text_and_class_of_each_data_line),
        cmocka_unit_test(test_parse_rejects_bad_lines_naming_the_line),
        cmocka_unit_test(test_parse_stops_when_the_callback_fails),
        cmocka_unit_test(test_fnv1a_gives_the_reference_values),
        cmocka_unit_test(
            test_text_keys_are_lowercased_words_of_two_letters_or_more),
        cmocka_unit_test(test_text_keys_fit_the_documented_room),
        cmocka_unit_test(test_set_parse_keeps_labels_and_keys_per_document),
    };
    return cmocka_run_group_tests_name("arff", tests, NULL, NULL);
}
