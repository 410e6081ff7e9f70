/* Unit tests of daemon/npy.c, the .npy reader psd --import uses (and the
 * writer psd --export uses): what numpy writes is read, and every file
 * that is not such an array is refused with a reason, without reading
 * past its header. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../daemon/npy.h"

#include "expect.h"

static char dir[] = "/tmp/psd-test-npy-XXXXXX";

/* Writes a file: the magic, version `major`, a header of hl bytes
 * (h, padded with spaces to hl, the last byte a newline; hl 0: h as it
 * is), then `data` bytes of a counting pattern. */
static const char *file(const char *name, int major, const char *h,
                        size_t hl, size_t data)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t n = strlen(h);
    if (!hl)
        hl = n;
    unsigned char pre[12] = { 0x93, 'N', 'U', 'M', 'P', 'Y',
                              (unsigned char)major, 0 };
    size_t pl = major == 1 ? 10 : 12;
    pre[8] = (unsigned char)(hl & 0xff);
    pre[9] = (unsigned char)(hl >> 8);
    if (major != 1) {
        pre[10] = (unsigned char)(hl >> 16);
        pre[11] = (unsigned char)(hl >> 24);
    }
    fwrite(pre, 1, pl, f);
    fwrite(h, 1, n < hl ? n : hl, f);
    for (size_t i = n; i + 1 < hl; i++)
        fputc(' ', f);
    if (n < hl)
        fputc('\n', f);
    for (size_t i = 0; i < data; i++)
        fputc((int)(i & 0xff), f);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void refused(const char *path, const char *says)
{
    psd_npy a;
    char err[512];
    EXPECT_INT(psd_npy_open(&a, path, err, sizeof err), -1, "%s", path);
    if (!strstr(err, says))
        fail_msg("%s: want \"%s\" in: %s", path, says, err);
    EXPECT_PTR(a.f, NULL, "nothing left open");
}

static void test_what_numpy_writes_is_read(void **state)
{
    (void)state;
    psd_npy a;
    char err[512];
    const char *p = file("a.npy", 1, "{'descr': '<f4', 'fortran_order': "
                         "False, 'shape': (3, 2), }", 118, 24);
    EXPECT_INT(psd_npy_open(&a, p, err, sizeof err), 0, "%s", err);
    EXPECT_INT(a.kind, 'f', "kind");
    EXPECT_U64(a.n, 3, "rows");
    EXPECT_INT((int)a.dim, 2, "dim");
    float v[6];
    EXPECT_INT((int)psd_npy_read(&a, v, 2), 2, "two rows");
    EXPECT_INT((int)psd_npy_read(&a, v, 5), 1, "the last");
    EXPECT_INT((int)psd_npy_read(&a, v, 5), 0, "the end");
    psd_npy_close(&a);
    /* Version 2, keys as int64, a 1-D shape, Python 2's long. */
    p = file("k.npy", 2, "{'fortran_order': False, 'shape': (4L,), "
             "'descr': '<i8'}", 116, 32);
    EXPECT_INT(psd_npy_open(&a, p, err, sizeof err), 0, "%s", err);
    EXPECT_INT(a.kind, 'i', "kind");
    EXPECT_U64(a.n, 4, "rows");
    EXPECT_INT((int)a.dim, 0, "1-D");
    psd_npy_close(&a);
    /* What psd --export writes. */
    char path[256];
    snprintf(path, sizeof path, "%s/w.npy", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    EXPECT_INT(psd_npy_header(f, "u8", 5, 0), 0, "header");
    uint64_t k[5] = { 1, 2, 3, 4, 5 };
    fwrite(k, 8, 5, f);
    fclose(f);
    EXPECT_INT(psd_npy_open(&a, path, err, sizeof err), 0, "%s", err);
    EXPECT_INT(a.kind, 'u', "kind");
    uint64_t back[5];
    EXPECT_INT((int)psd_npy_read(&a, back, 5), 5, "rows");
    EXPECT_INT(memcmp(back, k, sizeof k), 0, "keys");
    psd_npy_close(&a);
}

static void test_what_is_not_such_an_array_is_refused(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/none.npy", dir);
    refused(path, "No such file");
    refused(dir, "not a regular file");
    snprintf(path, sizeof path, "%s/fifo.npy", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    refused(path, "not a regular file");      /* not waited on */
    snprintf(path, sizeof path, "%s/text.npy", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("1,2,3\n4,5,6\n", f);
    fclose(f);
    refused(path, "not an .npy file");
    refused(file("v9.npy", 9, "{}", 0, 0), ".npy version 9 is not 1, 2 or 3");
    refused(file("h0.npy", 1, "", 0, 0), "a header of 0 bytes");
    refused(file("big.npy", 2, "{", 1u << 20, 0), "a header of 1048576");
    const char *cut = file("cut.npy", 1, "{'descr': '<f4'", 200, 0);
    assert_int_equal(truncate(cut, 40), 0);
    refused(cut, "cut short in its header");
    refused(file("nodict.npy", 1, "{'descr': '<f4', 'shape': (1,), }", 0,
                 4), "its header lacks descr, fortran_order or shape");
    refused(file("fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, "
                 "'shape': (2, 2), }", 0, 16), "Fortran order");
    refused(file("f8.npy", 1, "{'descr': '<f8', 'fortran_order': False, "
                 "'shape': (2,), }", 0, 16), "its type is '<f8';");
    refused(file("be.npy", 1, "{'descr': '>f4', 'fortran_order': False, "
                 "'shape': (2,), }", 0, 8), "its type is '>f4';");
    /* descr last, the header ending inside its value: nothing is read
     * past the header (ASan would say). */
    refused(file("short.npy", 1, "{'fortran_order': False, 'shape': (1,), "
                 "'descr': '<", 0, 0), "its type is '<;");
    refused(file("3d.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (2, 2, 2), }", 0, 32),
            "its shape (2, 2, 2) is not (N,) or (N, D)");
    refused(file("neg.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (-2,), }", 0, 0), "its shape (-2,) is not");
    refused(file("wide.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (1, 65537), }", 0, 0), "rows of 65537 values");
    refused(file("lies.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (3, 2), }", 118, 20), "it is cut short or has "
                 "more");
    refused(file("more.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (3, 2), }", 118, 28), "it is cut short or has "
                 "more");
    /* A 'shape' inside another value is not the dict's. */
    refused(file("inner.npy", 1, "{'descr': '<f4', 'note': \"'shape': "
                 "(1,)\", 'fortran_order': False, }", 0, 4),
            "its header lacks descr, fortran_order or shape");
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_what_numpy_writes_is_read),
        cmocka_unit_test(test_what_is_not_such_an_array_is_refused),
    };
    return cmocka_run_group_tests_name("npy", tests, setup, teardown);
}
