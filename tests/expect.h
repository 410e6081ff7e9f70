/* Test checks that print both sides on failure ("got 3, want 4") and
 * fail the running cmocka test. Include after <cmocka.h>. */
#ifndef TEST_EXPECT_H
#define TEST_EXPECT_H

#include <string.h>

#define EXPECT_INT(got, want, ...)                                         \
    do {                                                                   \
        long long g_ = (long long)(got), w_ = (long long)(want);           \
        if (g_ != w_) {                                                    \
            print_error(__VA_ARGS__);                                      \
            print_error(": got %lld, want %lld\n", g_, w_);                \
            fail();                                                        \
        }                                                                  \
    } while (0)

#define EXPECT_U64(got, want, ...)                                         \
    do {                                                                   \
        unsigned long long g_ = (got), w_ = (want);                        \
        if (g_ != w_) {                                                    \
            print_error(__VA_ARGS__);                                      \
            print_error(": got %llu, want %llu\n", g_, w_);                \
            fail();                                                        \
        }                                                                  \
    } while (0)

#define EXPECT_PTR(got, want, ...)                                         \
    do {                                                                   \
        const void *g_ = (got), *w_ = (want);                              \
        if (g_ != w_) {                                                    \
            print_error(__VA_ARGS__);                                      \
            print_error(": got %p, want %p\n", g_, w_);                    \
            fail();                                                        \
        }                                                                  \
    } while (0)

/* Floats compare exactly: expected values are computed by the same float
 * operations or are exactly representable. */
#define EXPECT_FLOAT(got, want, ...)                                       \
    do {                                                                   \
        float g_ = (got), w_ = (want);                                     \
        if (!(g_ == w_)) {                                                 \
            print_error(__VA_ARGS__);                                      \
            print_error(": got %.9g, want %.9g\n", (double)g_,             \
                        (double)w_);                                       \
            fail();                                                        \
        }                                                                  \
    } while (0)

#define EXPECT_STR(got, want, ...)                                         \
    do {                                                                   \
        const char *g_ = (got), *w_ = (want);                              \
        if (!g_ || strcmp(g_, w_) != 0) {                                  \
            print_error(__VA_ARGS__);                                      \
            print_error(": got \"%s\", want \"%s\"\n",                     \
                        g_ ? g_ : "(null)", w_);                           \
            fail();                                                        \
        }                                                                  \
    } while (0)

#define EXPECT_SUBSTR(text, part, ...)                                     \
    do {                                                                   \
        const char *t_ = (text);                                           \
        if (!t_ || !strstr(t_, (part))) {                                  \
            print_error(__VA_ARGS__);                                      \
            print_error(": got \"%s\", want it to contain \"%s\"\n",       \
                        t_ ? t_ : "(null)", (part));                       \
            fail();                                                        \
        }                                                                  \
    } while (0)

#endif
