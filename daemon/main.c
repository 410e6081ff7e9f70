/* psd: the parameter server daemon. Parses the command line, loads the
 * config, runs one libuv loop, and handles signals: SIGTERM/SIGINT stop
 * cleanly, SIGHUP reloads. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "config.h"
#include "durable.h"
#include "export.h"
#include "import.h"
#include "reshard.h"
#include "journal.h"
#include "log.h"
#include "notify.h"
#include "opts.h"
#include "preflight.h"
#include "server.h"
#include "snapshot.h"

/* Writes text to stderr as errors, each of its lines after `pre` and
 * with the journal's error priority when stderr is the journal (journald
 * makes each line a record: "<3>" on the first alone left the others
 * at info). */
static void say_errors(const char *pre, const char *text)
{
    const char *prio = psd_log_prefix(PSD_LOG_ERROR);
    while (*text) {
        size_t n = strcspn(text, "\n");
        fprintf(stderr, "%s%s%.*s\n", prio, pre, (int)n, text);
        text += n + (text[n] == '\n');
    }
}

/* What --help, --version and --check print must not end short with
 * status 0 (a full disk): rc, or 1 when stdout did not take it all (a
 * reader that went needs no word: | head ends --check with EPIPE here,
 * --help and --version with SIGPIPE, not ignored yet). */
static int out_done(int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    if (errno != EPIPE)
        fprintf(stderr, "psd: writing the output: %s\n",
                strerror(errno ? errno : EIO));
    return rc ? rc : 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: psd -c FILE [-n NODE] [--skip-snapshot] [--drop-table "
            "NAME]...\n"
            "                               run node NODE (default 0) of the "
            "cluster in FILE\n"
            "       psd --check -c FILE [-n NODE] [--skip-snapshot] "
            "[--drop-table NAME]...\n"
            "                               validate FILE as psd would before "
            "starting node\n"
            "                               NODE (default: every node) and "
            "exit; with\n"
            "                               --skip-snapshot, not the node's "
            "snapshot and journal\n"
            "       psd --export DIR -c FILE [-n NODE] [--drop-table NAME]...\n"
            "                               write the rows of each node (NODE's "
            "only with -n),\n"
            "                               its snapshot and the journal after "
            "it, read only,\n"
            "                               into DIR as NumPy .npy files, with "
            "DIR/export.nodeN.json\n"
            "                               listing them, and exit\n"
            "       psd --import DIR -c FILE [-n NODE]\n"
            "                               write each node's first snapshot "
            "into its empty\n"
            "                               data_dir from the .npy files in "
            "DIR (NAME.npy and\n"
            "                               NAME.keys.npy per table, or an "
            "export), and exit\n"
            "       psd --reshard DIR -c FILE --to NEW\n"
            "                               write into DIR the snapshots of "
            "NEW's nodes, each\n"
            "                               with the shards NEW gives it, from "
            "the stopped nodes\n"
            "                               of FILE (snapshot and journal, "
            "read only); NEW\n"
            "                               differs from FILE in its nodes, "
            "not its shards or\n"
            "                               tables; and exit\n"
            "\n"
            "At start psd restores the node from its snapshot and journal in "
            "data_dir;\n--skip-snapshot moves them aside (*.skipped.TIME) "
            "and starts from the\ninitial values instead. The snapshot's "
            "tables are found in FILE by name: a\ntable added starts from "
            "its init; one removed from FILE is refused unless\n"
            "--drop-table NAME lets its rows go.\n"
            "\n"
            "Logs go to stderr, which psd never reopens: append (2>>FILE) or "
            "pipe it to a\nlogger. SIGTERM/SIGINT: finish in-flight work, "
            "write a final snapshot and\nexit 0 (1 when that snapshot "
            "failed; a second SIGINT gives up on it). Bad\narguments exit 2 "
            "(a NODE that FILE does not list is an error of FILE's: 1).\n"
            "SIGHUP: re-read FILE and apply hyper-parameters and limits "
            "(replace FILE\nwhole, with mv: a half-written one's missing "
            "keys take their defaults).\nSIGUSR1, SIGUSR2: logged, nothing "
            "else.\n"
            "--version: psd's release and the wire protocols it speaks.\n"
            "-c and -n are also --config FILE and --node NODE (or "
            "--config=FILE);\n-h, --help: this text.\n");
}

static uv_signal_t sig_term, sig_int, sig_hup, sig_usr1, sig_usr2;
static uv_timer_t watchdog;

/* WATCHDOG=1 from the loop itself: a loop that stops turning stops the
 * pings, and systemd restarts psd. Twice per period, as sd_watchdog_enabled
 * advises. */
static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    psd_notify("WATCHDOG=1");
}

/* For RELOADING=1: systemd 253+ wants the CLOCK_MONOTONIC time with it. */
static unsigned long long monotonic_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull +
           (unsigned long long)ts.tv_nsec / 1000;
}

/* One line on stderr (the log) before an abort ends psd: libuv aborts on
 * an error it cannot handle (epoll_ctl out of memory, say), and psd
 * vanished with nothing in its log (a fault trial). Then the default
 * action, which ends the process as the abort meant to. */
static void on_abort(int signum)
{
    static const char line[] = "psd: aborted: an internal check failed "
                               "(in libuv or psd), as if killed with "
                               "kill -9: restart it; a core dump, where "
                               "one is kept, says where\n";
    ssize_t n = write(STDERR_FILENO, line, sizeof line - 1);
    (void)n;
    signal(signum, SIG_DFL);
    raise(signum);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    psd_server *s = h->data;
    psd_info("received %s, stopping", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    psd_notify("STOPPING=1\nSTATUS=stopping: writing the final snapshot");
    psd_server_stop(s);
    uv_close((uv_handle_t *)&watchdog, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_hup, NULL);
    uv_close((uv_handle_t *)&sig_usr1, NULL);
    uv_close((uv_handle_t *)&sig_usr2, NULL);
    /* Closing the handles gave the signals back their default action,
     * which for SIGHUP and SIGTERM is to end the process: one arriving
     * while connections drain or the final snapshot is written would kill
     * psd before that snapshot. A reload then has nothing to apply and a
     * second SIGTERM asks for what is under way. A second SIGINT (Ctrl-C
     * again) still ends psd at once, for an operator who gives up on the
     * final snapshot. */
    signal(SIGHUP, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
}

/* SIGUSR1 and SIGUSR2 end a process by default: a logrotate script's
 * "kill -USR1" (the way many daemons reopen their logs) killed psd with
 * no final snapshot and no word, every push since the last one lost. psd
 * has nothing to do on them; it says so. */
static void on_usr(uv_signal_t *h, int signum)
{
    (void)h;
    psd_info("received %s: psd does nothing on it (SIGHUP reloads the ini "
             "file, SIGTERM saves and stops; the log goes to stderr, which "
             "psd never reopens)", signum == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    psd_notify("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
               monotonic_usec());
    psd_server_reload(h->data);
    psd_notify("READY=1\nSTATUS=%s", psd_server_status(h->data));
}

/* Parses a node index: a whole number, no sign, no trailing text. */
static int parse_node(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

static void no_work(uv_work_t *w)
{
    (void)w;
}

static void no_after(uv_work_t *w, int status)
{
    (void)w;
    (void)status;
}

/* libuv starts its thread pool at the first work queued, and its threads
 * take the signal mask of the thread that queues it. The loop runs that
 * empty work to its end here (it has nothing else yet): left pending, it
 * would keep uv_loop_close from freeing the loop when psd refuses to
 * start. */
static void start_thread_pool(uv_loop_t *loop)
{
    static uv_work_t w;
    if (uv_queue_work(loop, &w, no_work, no_after) == 0)
        uv_run(loop, UV_RUN_DEFAULT);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *export_dir = NULL, *reshard_dir = NULL;
    const char *to = NULL, *import_dir = NULL;
    int node = 0, check = 0, skip = 0, node_given = 0, ndrop = 0;
    static const char *drop[64];
    psd_hold_std_fds();

    /* getopt_long, so that each option takes its value in every usual
     * form: -n 1, -n1, --node 1, --node=1. Its own messages are off:
     * psd says what is wrong in its words, and shows the usage. */
    static const struct option longs[] = {
        { "config", required_argument, NULL, 'c' },
        { "node", required_argument, NULL, 'n' },
        { "check", no_argument, NULL, 'C' },
        { "skip-snapshot", no_argument, NULL, 'S' },
        { "drop-table", required_argument, NULL, 'D' },
        { "export", required_argument, NULL, 'E' },
        { "reshard", required_argument, NULL, 'R' },
        { "import", required_argument, NULL, 'I' },
        { "to", required_argument, NULL, 'T' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 }
    };
    for (;;) {
        const char *a;
        int o = psd_getopt(argc, argv, ":c:n:h", longs, "D", "psd", &a);
        if (o == -1)
            break;
        if (o == -2)
            return 2;
        const char *name = o == 'c' ? "-c" : o == 'E' ? "--export"
                           : o == 'R' ? "--reshard" : o == 'T' ? "--to"
                           : o == 'I' ? "--import"
                           : o == 'D' ? "--drop-table" : NULL;
        if (name && !optarg[0]) {
            fprintf(stderr, "psd: %s: expected %s\n", name,
                    o == 'c' || o == 'T' ? "a file"
                    : o == 'E' || o == 'R' || o == 'I' ? "a folder"
                                                         : "a table name");
            return 2;
        }
        switch (o) {
        case 'C':
            check = 1;
            break;
        case 'S':
            skip = 1;
            break;
        case 'c':
            path = optarg;
            break;
        case 'E':
            export_dir = optarg;
            break;
        case 'R':
            reshard_dir = optarg;
            break;
        case 'I':
            import_dir = optarg;
            break;
        case 'T':
            to = optarg;
            break;
        case 'n':
            node_given = 1;
            if (parse_node(optarg, &node)) {
                fprintf(stderr, "psd: -n: expected a node index, got \"%s\"\n",
                        optarg);
                return 2;
            }
            break;
        case 'D':
            if (ndrop == (int)(sizeof drop / sizeof *drop)) {
                fprintf(stderr, "psd: --drop-table: at most %d tables at "
                        "one start\n", ndrop);
                return 2;
            }
            drop[ndrop++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return out_done(0);
        case 'V':
            psd_version("psd", 1);
            return out_done(0);
        case ':':
            fprintf(stderr, "psd: %s: expected %s\n", a,
                    optopt == 'D' ? "a table name"
                    : optopt == 'n' ? "a node index"
                    : optopt == 'E' || optopt == 'R' || optopt == 'I'
                        ? "a folder" : "a file");
            return 2;
        default: {
            char hint[96];
            fprintf(stderr, "psd: unexpected argument \"%s\"%s\n", a,
                    psd_opt_hint(a, longs, hint, sizeof hint));
            usage(stderr);
            return 2;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "psd: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (export_dir && (check || skip)) {
        fprintf(stderr, "psd: --export reads the nodes' snapshots and "
                "journals: it goes with neither --check nor --skip-snapshot\n");
        return 2;
    }
    if (reshard_dir && (check || skip || export_dir || node_given ||
                        ndrop || !to)) {
        fprintf(stderr, "psd: --reshard %s\n", !to
                ? "needs --to NEW, the ini of the new layout"
                : "moves every node of a stopped cluster: it goes with none "
                  "of --check, --skip-snapshot, --export, -n, --drop-table");
        return 2;
    }
    if (import_dir && (check || skip || export_dir || reshard_dir ||
                       ndrop)) {
        fprintf(stderr, "psd: --import writes new nodes' first snapshots: it "
                "goes with none of --check, --skip-snapshot, --export, "
                "--reshard, --drop-table\n");
        return 2;
    }
    if (to && !reshard_dir) {
        fprintf(stderr, "psd: --to goes with --reshard DIR\n");
        return 2;
    }
    if (!path) {
        fprintf(stderr, "psd: -c FILE is required (the cluster's ini file)"
                "\n");
        usage(stderr);
        return 2;
    }
    /* Reading the file, then loading the snapshot and the journal, may
     * take minutes, and until the loop's handler is in place a SIGHUP
     * would end psd (its default action; systemd does not restart a
     * service a SIGHUP ended). Held back from here on, before the file is
     * read (a reload sent right after a start killed psd while it parsed
     * a file of many tables), it becomes a reload once psd serves. The
     * tools (--check, --export, --reshard, --import) keep the default: a
     * hangup ends them. Before SIGPIPE is ignored, which tests take as
     * the sign that psd's main() runs. */
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    if (!check && !export_dir && !reshard_dir && !import_dir) {
        sigprocmask(SIG_BLOCK, &hup, NULL);
        /* Ignored while psd loads (on_usr says so once it serves). */
        signal(SIGUSR1, SIG_IGN);
        signal(SIGUSR2, SIG_IGN);
    }
    /* A tool whose output goes to a pipe closed early (psd --reshard ...
     * | head) gets a write error, not SIGPIPE in the middle of writing
     * its files; the daemon, a write error for a peer that vanished. */
    signal(SIGPIPE, SIG_IGN);
    if (reshard_dir)
        return psd_reshard(path, to, reshard_dir);
    if (import_dir)
        return psd_import(path, node_given ? node : -1, import_dir);

    psd_config cfg;
    char err[8192];
    if (psd_config_load(&cfg, path, err, sizeof err)) {
        say_errors("", err);
        return 1;
    }
    /* A table the file still has is never dropped: naming one is a
     * mistake to stop at, not to ignore. */
    for (int i = 0; i < ndrop; i++)
        for (int j = 0; j < cfg.ntables; j++)
            if (!strcmp(drop[i], cfg.tables[j].name)) {
                fprintf(stderr, "psd: --drop-table %s: %s has a table "
                        "'%s' (line %d), and psd never drops a table the "
                        "file has: remove --drop-table %s (it lets go a "
                        "table the snapshot holds and the file no longer "
                        "does; to start a table over, give it a new name)\n",
                        drop[i], path, drop[i], cfg.tables[j].line, drop[i]);
                psd_config_destroy(&cfg);
                return 1;
            }
    if (export_dir) {
        psd_config_destroy(&cfg);
        return psd_export(path, node_given ? node : -1, drop, ndrop,
                          export_dir);
    }
    if (check) {
        /* Everything psd would refuse to start for, not only the syntax:
         * the token file, host names, protected mode. */
        psd_preflight pf;
        int bad = 0;
        if (node_given && node >= cfg.nnodes) {
            fprintf(stderr, "%s%s: node %d does not exist (the file lists %d "
                    "node%s)\n", psd_log_prefix(PSD_LOG_ERROR), path, node,
                    cfg.nnodes, cfg.nnodes == 1 ? "" : "s");
            bad = 1;
        }
        bad += psd_preflight_run(&pf, &cfg, path, node_given ? node : -1);
        /* A snapshot or journal that a changed layout cannot load (psd
         * would refuse to start until --skip-snapshot): the node's, or
         * every node's found in the folder (several nodes may share
         * one). A data_dir that cannot be a folder was reported above
         * and holds none. */
        char dir[4096];
        psd_config_data_dir(&cfg, dir, sizeof dir);
        /* With no psd for node -n here, its port must be free: --check
         * said OK to a second psd of another data_dir on the same port,
         * whose start then failed. A port its own psd holds is expected
         * (--check before a SIGHUP runs beside it); where that cannot be
         * told (another user's folder, no OFD locks), not judged. */
        char inuse[1024];
        if (node_given && pf.bind_set &&
            psd_durable_holder(dir, node) == -1 &&
            psd_server_check_bind(&cfg, path, node, &pf.bind, inuse,
                                  sizeof inuse)) {
            fprintf(stderr, "%s%s\n", psd_log_prefix(PSD_LOG_ERROR), inuse);
            bad++;
        }
        /* Plain --check looks at the nodes on loopback addresses as ones
         * of this host (their memory, their ports' range): a port another
         * program held passed without a word, and the start failed (a
         * newcomer's trial on a shared machine). A note, not a problem:
         * that node's own psd, run from a data_dir this check does not
         * see (a relative one from another folder, systemd's per-node
         * StateDirectory), holds the port as it should (a review). */
        for (int i = 0; !node_given && i < cfg.nnodes; i++) {
            struct sockaddr_storage sa;
            if (psd_preflight_loopback_bind(&cfg, i, &sa) &&
                psd_durable_holder(dir, i) == -1 &&
                psd_server_check_bind(&cfg, path, i, &sa, inuse,
                                      sizeof inuse))
                printf("%s: unless it is node %d's own psd, run from "
                       "another data_dir than %s, that node cannot start "
                       "now\n", inuse, i, dir);
        }
        uint64_t biggest = 0;            /* the largest snapshot here */
        for (int i = 0; !skip && !pf.data_dir_bad && i < cfg.nnodes; i++) {
            if (node_given && i != node)
                continue;
            char why[1024];
            /* Not a failure: --check before a SIGHUP runs beside the
             * node; but a start would be refused while it runs. */
            long holder = psd_durable_holder(dir, i);
            if (holder >= 0) {
                char pid[32] = "";
                if (holder > 0)
                    snprintf(pid, sizeof pid, " (pid %ld)", holder);
                printf("%s: node %d runs now: a psd%s holds its lock in %s, "
                       "so a second psd for it is refused until that one "
                       "stops (SIGHUP reloads it in place)\n", path, i, pid,
                       dir);
            }
            psd_snap_info si;
            psd_snap_tables tm = { .drop = drop, .ndrop = ndrop };
            int rc = psd_snapshot_check(dir, i, &cfg, &tm, &si, why,
                                        sizeof why);
            /* The journal after a snapshot was written under its tables. */
            uint64_t from = rc == 0 && si.journal_seq ? si.journal_seq : 1;
            uint64_t snap_ms = rc == 0 ? si.created_ms : 0;
            int had_snap = rc == 0, of_0_1 = 0;
            if (had_snap && si.bytes > biggest)
                biggest = si.bytes;
            char too_big[600];
            if (had_snap && ndrop == 0 &&
                !psd_snapshot_fits(si.bytes, too_big, sizeof too_big)) {
                fprintf(stderr, "%snode %d's snapshot in %s cannot load "
                        "here: %s\n", psd_log_prefix(PSD_LOG_ERROR), i, dir,
                        too_big);
                bad++;
            }
            if (rc >= 0 && rc != 2)
                rc = psd_journal_check(
                    dir, i,
                    psd_durable_replay_shape(dir, i, &cfg,
                                             had_snap ? &si : NULL, &of_0_1),
                    tm.map ? 0 : psd_config_inits(&cfg), from,
                    (size_t)cfg.max_frame + 4096, why, sizeof why);
            /* Not a failure: the start goes on, and says what was lost. */
            uint64_t head =
                rc == 0 ? psd_journal_lost_head(dir, i, from, snap_ms) : 0;
            if (head)
                printf("%s: node %d's newest journal segment (%llu, as "
                       "psd-node%d.journal.head says) is missing from %s: a "
                       "start warns that the pushes it acknowledged are "
                       "lost\n", path, i, (unsigned long long)head, i, dir);
            if (rc >= 0 && rc != 2 && had_snap && !of_0_1 &&
                si.version < PSD_SNAPSHOT_VERSION)
                printf("%s: node %d's snapshot is of format %u, an older "
                       "psd's: psd reads it, and the node's next snapshot is "
                       "of format %d, which a psd before " PSD_SNAPSHOT_SINCE
                       " refuses, as it does the journal's records of workers "
                       "this psd writes (keep a copy of %s if you may go "
                       "back)\n",
                       path, i,
                       si.version, PSD_SNAPSHOT_VERSION, dir);
            if (rc >= 0 && rc != 2 && of_0_1)
                printf("%s: node %d's %s was written by psd 0.1, which kept "
                       "no table's updater nor consistency mode: psd takes "
                       "each one's from the file and writes a snapshot of "
                       "this release when it starts\n", path, i,
                       had_snap ? "snapshot" : "journal");
            if (rc == 0 && tm.map && !tm.added && !tm.dropped)
                printf("%s: node %d's snapshot holds the file's tables in "
                       "another order: kept by name; psd writes a snapshot "
                       "in the file's order when it starts\n", path, i);
            else if (rc == 0 && tm.map)
                printf("%s: node %d's snapshot holds other tables than the "
                       "file: %u kept by name, %d new (from their init), %d "
                       "dropped (--drop-table); psd writes a snapshot of the "
                       "new tables when it starts\n", path, i,
                       si.ntables - (uint32_t)tm.dropped, tm.added,
                       tm.dropped);
            for (int k = 0; rc == 0 && k < ndrop; k++)
                if (!(tm.drop_used >> k & 1))
                    printf("%s: --drop-table %s: node %d's snapshot holds no "
                           "table of that name: nothing dropped for it\n",
                           path, drop[k], i);
            free(tm.map);
            if (rc < 0) {
                /* Not always the ini: a snapshot may be missing or
                 * damaged while the file is as it was. */
                fprintf(stderr, "%s%s (node %d cannot start from its files: "
                        "put back what changed or is missing, the ini or the "
                        "file named; only if they are lost for good, "
                        "--skip-snapshot sets them aside and starts that node "
                        "empty)\n", psd_log_prefix(PSD_LOG_ERROR), why, i);
                bad++;
            } else if (rc == 2) {
                /* Not proof of anything: psd may run as another user. */
                printf("%s: node %d's snapshot and journal were not checked "
                       "(run --check as the user psd runs as)\n", why, i);
            }
        }
        /* The next snapshot needs room for a whole new file beside the
         * last (renamed over it once written), and the journal its
         * segment up to snapshot_journal_mb: 662 MiB free beside a 2.4
         * GiB snapshot said nothing, and the next snapshot filled the
         * disk, refusing pushes while it grew (a big-model trial). Below
         * 64 MiB free the preflight's own note says so already. */
        struct statvfs vfs;
        double free_mib = 0, snap_mib = (double)biggest / (1 << 20);
        double need = snap_mib + (cfg.durability == PSD_DUR_LOG
                                      ? (double)cfg.snapshot_journal_mb : 0);
        if (biggest && statvfs(dir, &vfs) == 0)
            free_mib = (double)vfs.f_bavail * (double)vfs.f_frsize /
                       (1 << 20);
        char at[32] = "";
        if (cfg.data_dir_line > 0)
            snprintf(at, sizeof at, ":%d", cfg.data_dir_line);
        if (biggest && free_mib >= 64 && free_mib < need)
            printf("%s%s: [server] data_dir: the file system of %s has "
                   "%.1f MiB free, and the next snapshot needs about %.1f MiB "
                   "there (a new file as large as the last, %.1f MiB%s): it "
                   "will fail%s\n", path, at, dir, free_mib,
                   need, snap_mib, cfg.durability == PSD_DUR_LOG
                       ? ", and the journal up to snapshot_journal_mb" : "",
                   cfg.durability == PSD_DUR_LOG
                       ? ", and while it grows the journal may not be "
                         "written (pushes refused)" : "");
        for (int i = 0; i < cfg.nnotes; i++)
            printf("%s\n", cfg.notes[i]);
        for (int i = 0; i < pf.nnotes; i++)
            printf("%s\n", pf.notes[i]);
        for (int i = 0; i < pf.nproblems; i++)
            say_errors("", pf.problems[i]);
        if (!bad)
            printf("%s: OK (%d node%s, %u shard%s, %d table%s%s)\n", path,
                   cfg.nnodes, cfg.nnodes == 1 ? "" : "s", cfg.shards,
                   cfg.shards == 1 ? "" : "s", cfg.ntables,
                   cfg.ntables == 1 ? "" : "s",
                   pf.token_len ? ", clients must authenticate" : "");
        psd_preflight_destroy(&pf);
        psd_config_destroy(&cfg);
        return out_done(bad ? 1 : 0);
    }
    if (psw_auth_init()) {
        fprintf(stderr, "%spsd: libsodium cannot start\n",
                psd_log_prefix(PSD_LOG_ERROR));
        psd_config_destroy(&cfg);
        return 1;
    }

#ifdef __GLIBC__
    /* Frame and reply buffers of 256 KiB and more get pages of their own,
     * given back when freed, so that psd's resident memory follows the
     * buffers max_client_memory counts. (glibc would otherwise raise this
     * threshold to the largest block freed, up to 32 MiB, and keep such
     * blocks in its heap after they are freed.) */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    /* A full disk or a file size limit must cost an error, not the
     * process (SIGPIPE is ignored above). */
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGABRT, on_abort);
    psd_log_init(node, cfg.log_level);
    for (int i = 0; i < cfg.nnotes; i++)
        psd_warn("%s", cfg.notes[i]);

    uv_loop_t loop;
    int lrc = uv_loop_init(&loop);
    if (lrc) {
        /* Too few fds (prlimit --nofile) for libuv's own: said, not a
         * crash inside the loop that never was. */
        psd_error("cannot start the event loop: %s", uv_strerror(lrc));
        return 1;
    }
    static psd_server srv;
    /* A SIGTERM or SIGINT during loading ends psd at once (nothing is
     * lost: what it loads is on disk). From the moment it listens, a
     * client may push, so one is held back until the loop's handler can
     * stop psd properly: a stop right after start (a test, or systemd
     * restarting a unit) otherwise killed it without its final snapshot.
     * Holding back works only if no other thread takes the signal: libuv's
     * thread pool (fsyncs, name lookups) is started here, with all three
     * blocked, and its threads keep that mask for good. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    start_thread_pool(&loop);
    sigprocmask(SIG_UNBLOCK, &stop, NULL);
    psd_start_opts opts = { skip, drop, ndrop };
    int ok = psd_server_init(&srv, &loop, &cfg, path, node, &opts, err,
                             sizeof err) == 0;
    sigprocmask(SIG_BLOCK, &stop, NULL);
    if (!ok || psd_server_listen(&srv, err, sizeof err)) {
        /* The journal's priority too: journalctl -p err shows it. */
        say_errors("psd: ", err);
        psd_server_destroy(&srv);
        uv_loop_close(&loop);
        return 1;
    }
    uv_signal_init(&loop, &sig_term);
    uv_signal_init(&loop, &sig_int);
    uv_signal_init(&loop, &sig_hup);
    sig_term.data = sig_int.data = sig_hup.data = &srv;
    uv_signal_start(&sig_term, on_stop_signal, SIGTERM);
    uv_signal_start(&sig_int, on_stop_signal, SIGINT);
    uv_signal_start(&sig_hup, on_hup, SIGHUP);
    uv_signal_init(&loop, &sig_usr1);
    uv_signal_init(&loop, &sig_usr2);
    uv_signal_start(&sig_usr1, on_usr, SIGUSR1);
    uv_signal_start(&sig_usr2, on_usr, SIGUSR2);
    sigprocmask(SIG_UNBLOCK, &hup, NULL);
    sigprocmask(SIG_UNBLOCK, &stop, NULL);
    uv_timer_init(&loop, &watchdog);
    uint64_t wd = psd_notify_watchdog_usec();
    if (wd) {
        uint64_t ms = wd / 2000 ? wd / 2000 : 1;
        uv_timer_start(&watchdog, on_watchdog, ms, ms);
    }
    /* Restored and listening: clients may come. */
    psd_notify("READY=1\nSTATUS=%s", psd_server_status(&srv));

    uv_run(&loop, UV_RUN_DEFAULT);

    int final = psd_server_final(&srv);
    if (final)
        psd_notify("STATUS=the final snapshot failed (see the log)");
    int rc = uv_loop_close(&loop);
    if (rc)
        psd_warn("event loop closed with handles open: %s", uv_strerror(rc));
    psd_server_destroy(&srv);
    /* Floods still inside their window say how many they were. */
    psd_log_flush_all();
    psd_info("stopped");
    return final ? 1 : 0;
}
