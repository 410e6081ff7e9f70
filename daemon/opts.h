/* Command-line helpers shared by psd and psctl, over getopt_long. */
#ifndef PSD_OPTS_H
#define PSD_OPTS_H

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "near.h"
#include "psclient.h"
#include "../proto/msg.h"

/* Opens /dev/null on whichever of fds 0, 1 and 2 the caller left closed
 * (psd started with `2>&-`): else the first files and sockets opened take
 * them, and log lines and output go into a socket, a pipe of libuv's or
 * a snapshot being written. Call first in main(). */
static inline void psd_hold_std_fds(void)
{
    int fd;
    while ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0 &&
           fd <= STDERR_FILENO) {
        /* The standard fds are inherited as they were: not close-on-exec
         * (psd execs nothing, but keep the usual meaning). */
        fcntl(fd, F_SETFD, 0);
    }
    if (fd > STDERR_FILENO)
        close(fd);
}

/* --version: the release (libpsclient's, which psd and psctl ship with)
 * and the wire protocol this build speaks, which is what decides whether
 * a node and a client of different releases can talk; a server (psd) also
 * says which older clients it still accepts. psctl, a reader, speaks a
 * reader's version (proto/msg.h). */
static inline void psd_version(const char *prog, int server)
{
    printf("%s %d.%d.%d (wire protocol %d", prog, PS_VERSION_MAJOR,
           PS_VERSION_MINOR, PS_VERSION_PATCH,
           server ? PSW_VERSION : PSW_VERSION_READER);
    if (server)
        printf("; accepts clients of %d to %d", PSW_VERSION_MIN, PSW_VERSION);
    printf(")\n");
}

/* The same for a long option refused as unknown ("--skip-snapshots"):
 * writes " (did you mean --NAME?)" into buf, or "" when none is near. */
static inline const char *psd_opt_hint(const char *given,
                                       const struct option *longs,
                                       char *buf, size_t size)
{
    const char *names[64];
    size_t n = 0;
    buf[0] = '\0';
    if (strncmp(given, "--", 2) != 0)
        return buf;
    for (; longs[n].name && n < 63; n++)
        names[n] = longs[n].name;
    names[n] = NULL;
    char word[64];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(given + 2, "="),
             given + 2);
    const char *s = psd_suggest(word, names);
    if (s)
        snprintf(buf, size, " (did you mean --%s?)", s);
    return buf;
}

/* getopt_long takes any unambiguous prefix of a long option (--s for
 * --skip-snapshot, --d for --drop-table): options that move or drop data
 * must be written out. After getopt_long returned an option, idx being
 * its longindex (-1 for a short option): 1 when it was given whole, else
 * 0. *given is the argument that held it (for the message). */
static inline int psd_opt_whole(char *const *argv, int optind_,
                                const char *optarg_,
                                const struct option *longs, int idx,
                                const char **given)
{
    /* The option's own element: the one before its value when the value
     * came as the next element. */
    const char *e = argv[optind_ - 1];
    if (optarg_ && e == optarg_ && optind_ >= 2)
        e = argv[optind_ - 2];
    *given = e;
    if (idx < 0 || strncmp(e, "--", 2) != 0)
        return 1;
    size_t n = strcspn(e + 2, "=");
    return strlen(longs[idx].name) == n &&
           strncmp(e + 2, longs[idx].name, n) == 0;
}

/* The argument getopt_long refused ('?' or ':'): "--name..." as given,
 * else the letter; buf holds "-x". */
static inline const char *psd_opt_refused(char *const *argv, int optind_,
                                          int optopt_, char buf[3])
{
    const char *a = argv[optind_ - 1];
    if (strncmp(a, "--", 2) == 0 || optopt_ <= 0 || optopt_ >= 128)
        return a;
    buf[0] = '-';
    buf[1] = (char)optopt_;
    buf[2] = '\0';
    return buf;
}

/* Whether arg is one of the options themselves, in any form getopt
 * takes ("--check", "--export=DIR", "-c", "-cFILE", "-n1", flags run
 * together, and "--", the end of the options): a value of a list option
 * that is one was forgotten. */
static inline int psd_opt_is_option(const char *arg, const char *shorts,
                                    const struct option *longs)
{
    if (arg[0] != '-' || !arg[1])
        return 0;
    if (arg[1] != '-') {
        for (const char *a = arg + 1; *a; a++) {
            const char *o = *a != ':' ? strchr(shorts, *a) : NULL;
            if (!o)
                return 0;
            if (o[1] == ':')     /* takes a value: the rest is it */
                return 1;
        }
        return 1;
    }
    if (!arg[2])
        return 1;
    size_t n = strcspn(arg + 2, "=");
    for (const struct option *l = longs; l->name; l++)
        if (strlen(l->name) == n && memcmp(l->name, arg + 2, n) == 0)
            return 1;
    return 0;
}

/* getopt_long with those rules, for prog ("psd", "psctl"): the option,
 * -1 at the end, or -2 after saying on stderr what is wrong (the caller
 * exits with status 2): a long option cut short; an option given twice,
 * whose second value would silently win; a value that is the next option
 * (--export -c FILE: a value forgotten, not a folder named "-c"; a
 * negative number is a value). Options in `lists` (their vals) take one
 * value each time they are given, any value but an option of this
 * program as the next argument: they may repeat (psd --drop-table; a
 * table's name may start with '-'). For '?' and ':',
 * *refused is the argument refused, as given. Messages of getopt_long's
 * own are off (opterr): the caller says what is wrong in its words. Call
 * it for one command line per process: it remembers what it returned. */
static inline int psd_getopt(int argc, char *const *argv, const char *shorts,
                             const struct option *longs, const char *lists,
                             const char *prog, const char **refused)
{
    static char letter[3], name[64];
    static unsigned char seen[512];
    int idx = -1;
    opterr = 0;
    int o = getopt_long(argc, argv, shorts, longs, &idx);
    *refused = NULL;
    if (o == '?' || o == ':') {
        *refused = psd_opt_refused(argv, optind, optopt, letter);
        return o;
    }
    if (o < 0)
        return o;
    const char *given;
    if (!psd_opt_whole(argv, optind, optarg, longs, idx, &given)) {
        fprintf(stderr, "%s: unexpected argument \"%s\" (write the option "
                "out: --%s)\n", prog, given, longs[idx].name);
        return -2;
    }
    if (idx >= 0)
        snprintf(name, sizeof name, "--%s", longs[idx].name);
    else
        snprintf(name, sizeof name, "-%c", o);
    int list = o < 256 && strchr(lists, o) != NULL;
    if (optarg && !list && optarg[0] == '-' && optarg[1] &&
        !(optarg[1] >= '0' && optarg[1] <= '9') && optarg[1] != '.') {
        fprintf(stderr, "%s: %s needs a value, got the option \"%s\"\n",
                prog, name, optarg);
        return -2;
    }
    /* A list option's value may start with '-', but not be an option of
     * this program given as the next argument (--drop-table --check:
     * the name forgotten); --drop-table=--check names such a table. */
    if (optarg && list && optarg == argv[optind - 1] &&
        psd_opt_is_option(optarg, shorts, longs)) {
        fprintf(stderr, "%s: %s needs a value, got the option \"%s\" (a "
                "value that is written so: %s=%s)\n", prog, name, optarg,
                name, optarg);
        return -2;
    }
    if (!list && o < 512 && seen[o]++) {
        fprintf(stderr, "%s: %s given twice\n", prog, name);
        return -2;
    }
    return o;
}

#endif
