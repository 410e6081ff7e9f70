/* Unit tests of daemon/config.c: valid files give the right values and
 * defaults; every class of error gives "PATH:LINE: reason" with the right
 * line; the files in conf/ parse. Runs with cmocka; no network. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include "../daemon/config.h"
#include "../daemon/inifile.h"
#include "../daemon/preflight.h"
#include "../proto/msg.h"

#include "expect.h"

#define ERRLEN 4096

/* ---- helpers ------------------------------------------------------------ */

/* Writes n bytes of text to a new file under /tmp; its name goes to path
 * (PATH_LEN bytes). The caller unlinks it. */
#define PATH_LEN 64
static void write_temp(char *path, const char *text, size_t n)
{
    snprintf(path, PATH_LEN, "/tmp/psd-test-config-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        fail_msg("mkstemp(%s) failed", path);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Loads text (n bytes) through a temporary file, removed before return.
 * The file's name stays in path for checking error prefixes. */
static int load_bytes(const char *text, size_t n, psd_config *c, char *path,
                      char *err)
{
    write_temp(path, text, n);
    int rc = psd_config_load(c, path, err, ERRLEN);
    unlink(path);
    return rc;
}

static int load_text(const char *text, psd_config *c, char *path, char *err)
{
    return load_bytes(text, strlen(text), c, path, err);
}

/* Loads text that must be valid; fails the test with the error if not. */
static void load_ok(const char *text, psd_config *c)
{
    char path[PATH_LEN], err[ERRLEN];
    if (load_text(text, c, path, err) != 0)
        fail_msg("got error \"%s\", want success for:\n%s", err, text);
}

/* Path of a file of the source tree: $PSD_SRC_DIR/rel, else ./rel. */
static void src_path(char *buf, size_t len, const char *rel)
{
    const char *dir = getenv("PSD_SRC_DIR");
    snprintf(buf, len, "%s/%s", dir && *dir ? dir : ".", rel);
}

static void assert_float_eq(float got, float want, const char *what)
{
    if (got != want)
        fail_msg("%s: got %.9g, want %.9g", what, (double)got, (double)want);
}

/* An error case: the text, the line the error must name (0: none) and a
 * phrase the message must contain after "PATH:LINE: " (or the whole rest
 * of the message when exact). */
typedef struct error_case {
    const char *name;
    const char *text;
    size_t len;                 /* 0: strlen(text) */
    int line;
    const char *phrase;
    int exact;
} error_case;

/* Checks that loading c->text fails with c's line and phrase, and that the
 * config is left empty. */
static void run_error_case(void **state)
{
    const error_case *ec = *state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN], want[PATH_LEN + 16];
    size_t n = ec->len ? ec->len : strlen(ec->text);
    int rc = load_bytes(ec->text, n, &c, path, err);
    if (rc != -1)
        fail_msg("got rc %d, want -1 (\"%s\") for:\n%s", rc, ec->phrase,
                 ec->text);
    if (ec->line > 0)
        snprintf(want, sizeof want, "%s:%d: ", path, ec->line);
    else
        snprintf(want, sizeof want, "%s: ", path);
    size_t wl = strlen(want);
    if (strncmp(err, want, wl) != 0)
        fail_msg("got \"%s\", want prefix \"%s\" for:\n%s", err, want,
                 ec->text);
    const char *rest = err + wl;
    if (ec->exact ? strcmp(rest, ec->phrase) != 0
                  : strstr(rest, ec->phrase) == NULL)
        fail_msg("got \"%s\", want %s \"%s\" for:\n%s", rest,
                 ec->exact ? "exactly" : "a message containing",
                 ec->phrase, ec->text);
    assert_null(c.nodes);
    assert_null(c.tables);
    assert_int_equal(c.nnodes, 0);
    assert_int_equal(c.ntables, 0);
    psd_config_destroy(&c);
}

/* 150 bytes of a token. */
#define TOKEN10 "0123456789"
#define TOKEN150 TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10 \
    TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10 TOKEN10

/* Lines 1-2 of most cases. */
#define CLUSTER "[cluster]\nnodes = 127.0.0.1:7070\n"
/* Lines 1-2, then [table.emb] on line 3 and dim on line 4. */
#define EMB CLUSTER "[table.emb]\ndim = 4\n"

/* The schema example of docs/design.md section 5, verbatim (hence the
 * long lines) up to its consistency line (line 22). */
#define DESIGN_HEAD \
    "[cluster]\n" \
    "nodes   = 127.0.0.1:7070, 127.0.0.1:7071   ; node i listens on the i-th address\n" \
    "shards  = 16                               ; shards per table\n" \
    "workers = 4                                ; workers that bsp/ssp tables wait for\n" \
    "\n" \
    "[server]\n" \
    "data_dir          = /var/lib/psd           ; snapshots (and logs) of this node\n" \
    "snapshot_interval = 300                    ; seconds; 0 = only on SIGTERM or on request\n" \
    "durability        = snapshot               ; snapshot | log (append log of applied pushes)\n" \
    "fsync             = everysec               ; log only: always | everysec | no\n" \
    "auth_token        =                        ; empty: no auth, only loopback addresses allowed\n" \
    "max_frame         = 64M\n" \
    "log_level         = info\n" \
    "\n" \
    "[table.emb]\n" \
    "kind        = sparse                       ; dense needs rows = N\n" \
    "dim         = 16\n" \
    "updater     = adagrad                      ; sum | assign | sgd | adagrad | adam | ftrl\n" \
    "lr          = 0.05\n" \
    "init        = uniform -0.01 0.01           ; zeros | constant V | uniform LO HI | normal MEAN STD\n" \
    "seed        = 7\n"
#define DESIGN_STALENESS \
    "staleness   = 2                            ; ssp only\n"

/* 250 bytes of 'x'. */
#define X50 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
#define X250 X50 X50 X50 X50 X50
/* 63 and 64 characters. */
#define NAME63 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
#define NAME64 NAME63 "-"
/* 130 bytes. */
#define A65 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define A130 A65 A65

#define NUL_TEXT CLUSTER "[server]\nlog_level = in\0fo\n"

static const error_case error_cases[] = {
    /* cross-checks */
    { "listen_needs_one_address_per_node",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
      "listen = 127.0.0.1:8070\n", 0, 3,
      "[cluster] listen: 1 address for 2 nodes (one per node, in the "
      "order of nodes)", 1 },
    { "listen_refuses_a_duplicate_address",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
      "listen = 127.0.0.1:8070, 127.0.0.1:8070\n", 0, 3,
      "[cluster] listen: entry 2 \"127.0.0.1:8070\" clashes with [cluster] "
      "listen entry 1 \"127.0.0.1:8070\": both take port 8070 of address "
      "127.0.0.1 on host 127.0.0.1", 1 },
    /* psd binds metrics_listen with a numeric parser (daemon/metrics.c):
     * a name passed --check and then stopped psd without a line. */
    { "metrics_listen_host_name_is_refused_at_its_line",
      CLUSTER "[server]\nmetrics_listen = localhost:9470\n", 0, 4,
      "[server] metrics_listen: expected a numeric IPv4 or [IPv6] address "
      "(names are not resolved here), got \"localhost:9470\" (entry 1 of "
      "\"localhost:9470\")", 1 },
    { "metrics_listen_refuses_a_duplicate_address_on_one_host",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
      "[server]\nmetrics_listen = 127.0.0.1:9470, 127.0.0.1:9470\n", 0, 4,
      "[server] metrics_listen: entry 2 \"127.0.0.1:9470\" clashes with "
      "[server] metrics_listen entry 1 \"127.0.0.1:9470\": both take port "
      "9470 of address 127.0.0.1 on host 127.0.0.1", 1 },
    /* Sockets the nodes of one host bind must be able to listen side by
     * side: before, such a file passed --check and psd stopped at bind,
     * with no line. */
    { "metrics_listen_on_the_nodes_own_client_address_is_refused",
      CLUSTER "[server]\nmetrics_listen = 127.0.0.1:7070\n", 0, 4,
      "[server] metrics_listen: entry 1 \"127.0.0.1:7070\" clashes with "
      "[cluster] nodes entry 1 \"127.0.0.1:7070\" (node 0 listens on its "
      "nodes address: no listen is set): both take port 7070 of address "
      "127.0.0.1 on host 127.0.0.1", 1 },
    { "metrics_listen_on_the_listen_address_is_refused",
      CLUSTER "listen = 127.0.0.1:8070\n[server]\n"
      "metrics_listen = 127.0.0.1:8070\n", 0, 5,
      "[server] metrics_listen: entry 1 \"127.0.0.1:8070\" clashes with "
      "[cluster] listen entry 1 \"127.0.0.1:8070\": both take port 8070 of "
      "address 127.0.0.1 on host 127.0.0.1", 1 },
    { "metrics_listen_on_another_nodes_client_address_is_refused",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n[server]\n"
      "metrics_listen = 127.0.0.1:9470, 127.0.0.1:7070\n", 0, 4,
      "[server] metrics_listen: entry 2 \"127.0.0.1:7070\" clashes with "
      "[cluster] nodes entry 1 \"127.0.0.1:7070\" (node 0 listens", 0 },
    { "a_wildcard_listen_beside_an_address_of_one_host_is_refused",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
      "listen = 0.0.0.0:8070, 127.0.0.1:8070\n", 0, 3,
      "[cluster] listen: entry 2 \"127.0.0.1:8070\" clashes with [cluster] "
      "listen entry 1 \"0.0.0.0:8070\": 0.0.0.0:8070 takes port 8070 on "
      "every IPv4 address of host 127.0.0.1", 1 },
    /* The same with metrics_listen set (every node has two sockets) and
     * the value continued on the next line. */
    { "a_wildcard_listen_clash_is_found_beside_metrics_and_continuations",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
      "listen = 0.0.0.0:8070,\n  127.0.0.1:8070\n[server]\n"
      "metrics_listen = 127.0.0.1:9470, 127.0.0.1:9471\n", 0, 3,
      "[cluster] listen: entry 2 \"127.0.0.1:8070\" clashes with [cluster] "
      "listen entry 1 \"0.0.0.0:8070\": 0.0.0.0:8070 takes port 8070 on "
      "every IPv4 address of host 127.0.0.1 (continued on line 4)", 1 },
    /* Reported at metrics_listen's line, not at nodes' (line 2), though
     * node 2's client socket comes later: the bind is what to change. */
    { "a_wildcard_metrics_listen_on_another_nodes_port_is_refused",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n[server]\n"
      "metrics_listen = 0.0.0.0:7071, 127.0.0.1:9471\n", 0, 4,
      "[server] metrics_listen: entry 1 \"0.0.0.0:7071\" clashes with "
      "[cluster] nodes entry 2 \"127.0.0.1:7071\" (node 1 listens on its "
      "nodes address: no listen is set): 0.0.0.0:7071 takes port 7071 on "
      "every IPv4 address of host 127.0.0.1", 1 },
    { "an_ipv6_wildcard_beside_an_ipv6_address_is_refused",
      "[cluster]\nnodes = [::1]:7070\n[server]\n"
      "metrics_listen = [::]:7070\n", 0, 4,
      "[server] metrics_listen: entry 1 \"[::]:7070\" clashes with "
      "[cluster] nodes entry 1 \"[::1]:7070\"", 0 },
    /* libuv binds IPv6 with IPV6_V6ONLY off: [::] takes IPv4 too. */
    { "an_ipv6_wildcard_beside_an_ipv4_address_is_refused",
      CLUSTER "listen = [::]:7070\n[server]\n"
      "auth_token = 0123456789abcdef0123456789abcdef\n"
      "metrics_listen = 127.0.0.1:7070\n", 0, 6,
      "[server] metrics_listen: entry 1 \"127.0.0.1:7070\" clashes with "
      "[cluster] listen entry 1 \"[::]:7070\": [::]:7070 takes port 7070 on "
      "every IPv6 and IPv4 address of host 127.0.0.1", 1 },
    { "an_ipv4_mapped_address_is_its_ipv4_address",
      CLUSTER "[server]\nmetrics_listen = [::ffff:127.0.0.1]:7070\n", 0, 4,
      "both take port 7070 of address 127.0.0.1 on host 127.0.0.1", 0 },
    { "peer_timeout_below_two_heartbeats_is_refused_at_its_line",
      CLUSTER "[server]\nheartbeat_ms = 500\npeer_timeout_ms = 999\n", 0, 5,
      "[server] peer_timeout_ms (999) must be at least twice heartbeat_ms "
      "(500)", 1 },
    { "a_long_heartbeat_needs_a_longer_peer_timeout",
      CLUSTER "[server]\nheartbeat_ms = 3000\n", 0, 4,
      "[server] peer_timeout_ms (4000) must be at least twice heartbeat_ms "
      "(3000)", 1 },
    /* structure */
    { "unknown_section_is_refused_at_its_header",
      CLUSTER "[clutser]\nshards = 4\n", 0, 3,
      "unknown section [clutser]", 0 },
    { "unknown_key_in_server_names_section_and_key",
      CLUSTER "[server]\nmax_frames = 1M\n", 0, 4,
      "[server] max_frames: unknown key (did you mean max_frame?)", 1 },
    { "unknown_key_in_a_table_names_the_table",
      EMB "learning_rate = 0.1\n", 0, 5,
      "[table.emb] learning_rate: unknown key (did you mean lr?)", 1 },
    { "a_key_of_another_section_says_where_it_belongs",
      CLUSTER "[server]\nworker_grace = 5\n", 0, 4,
      "[server] worker_grace: unknown key (it belongs in the [cluster] "
      "section)", 1 },
    { "a_near_miss_of_another_sections_key_says_both",
      CLUSTER "[server]\nlearning_rate = 0.1\nworker_grce = 5\n", 0, 4,
      "[server] learning_rate: unknown key (did you mean lr? it belongs in "
      "a [table.NAME] section)", 0 },
    { "a_table_key_in_server_says_where_it_belongs",
      CLUSTER "[server]\nlr = 0.1\n", 0, 4,
      "[server] lr: unknown key (it belongs in a [table.NAME] section)", 1 },
    { "unknown_key_is_case_sensitive",
      EMB "LR = 0.1\n", 0, 5, "[table.emb] LR: unknown key (did you mean "
      "lr?)", 1 },
    { "duplicate_key_is_refused_at_its_second_line",
      EMB "lr = 0.1\ndim = 8\n", 0, 6,
      "[table.emb] dim: duplicate key (first at line 4)", 1 },
    { "duplicate_key_in_cluster_is_refused",
      CLUSTER "nodes = 127.0.0.1:7071\n", 0, 3,
      "[cluster] nodes: duplicate key (first at line 2)", 1 },
    { "duplicate_table_section_is_refused",
      EMB "[table.emb]\ndim = 8\n", 0, 5,
      "duplicate section [table.emb] (first at line 3)", 1 },
    { "duplicate_cluster_section_is_refused",
      CLUSTER "[server]\n[cluster]\nshards = 4\n", 0, 4,
      "duplicate section [cluster] (first at line 1)", 1 },
    { "key_outside_any_section_is_refused",
      "shards = 4\n" CLUSTER, 0, 1,
      "key \"shards\" outside any section", 1 },
    { "line_without_equals_is_refused",
      CLUSTER "[server]\nlog_level\n", 0, 4,
      "expected \"key = value\" or \"[section]\", got \"log_level\"", 1 },
    { "line_without_equals_echoes_only_its_first_word",
      CLUSTER "[server]\nauth_token 0123456789abcdefSECRET\n", 0, 4,
      "expected \"key = value\" or \"[section]\", got \"auth_token ...\"",
      1 },
    /* A line that is the token itself (`base64 >> psd.ini`): its key or
     * its first word was echoed, into the log and, after a SIGHUP, into
     * /metrics (a trial). Only a key's length, unless it is short (no
     * token is) or a near miss of a key. */
    { "a_token_line_read_as_a_key_is_not_echoed",
      CLUSTER "[server]\nQmFyZVRva2VuTGluZVNlY3JldFZhbHVlMTIzNA==\n", 0, 4,
      "[server] an unknown key of 38 bytes (not shown: a line that is not "
      "one of psd's settings may be the token)", 1 },
    { "a_token_line_without_equals_is_not_echoed",
      CLUSTER "[server]\n0123456789abcdef0123456789abcdef\n", 0, 4,
      "expected \"key = value\" or \"[section]\", got a line of 32 bytes "
      "(not shown: it may be a secret)", 1 },
    { "a_short_token_cut_at_its_padding_is_not_echoed",
      CLUSTER "[server]\nAbCdEfGhIjKlMnO=\n", 0, 4,
      "[server] an unknown key of 15 bytes (not shown: a line that is not "
      "one of psd's settings may be the token)", 1 },
    { "a_token_before_any_section_is_not_echoed",
      "Zq8sK2mP9xYwLr4vT7nBZq8sK2mP9xYwLr4vT7nBAb8=\n" CLUSTER, 0, 1,
      "a key of 43 bytes outside any section (not shown: it may be a "
      "secret)", 1 },
    { "a_hidden_key_near_a_setting_still_gets_its_hint",
      CLUSTER "[server]\nsnapshot-interval = 5\n", 0, 4,
      "[server] an unknown key of 17 bytes (not shown: a line that is not "
      "one of psd's settings may be the token) (did you mean "
      "snapshot_interval?)", 1 },
    { "a_long_key_mistyped_is_still_named",
      CLUSTER "[server]\nmax_connections_per_adr = 5\n", 0, 4,
      "[server] max_connections_per_adr: unknown key (did you mean "
      "max_connections_per_addr?)", 1 },
    /* A token that a continuation line made too long: its length is
     * said, never the token (the error goes to the log and terminal). */
    { "overlong_auth_token_is_refused_without_echoing_it",
      CLUSTER "[server]\nauth_token = " TOKEN150 "\n  " TOKEN150 "\n", 0, 4,
      "[server] auth_token: expected at most 255 bytes, got 301 bytes "
      "(continued on line 5)", 1 },
    { "section_header_without_bracket_is_refused",
      CLUSTER "[server\n", 0, 3, "expected \"]\"", 0 },
    { "text_after_section_header_is_refused",
      CLUSTER "[server] # comment\n", 0, 3,
      "unexpected text after the section header (9 bytes, not shown: it "
      "may be a secret; a setting goes on a line of its own)", 1 },
    { "nul_byte_is_refused_with_its_line",
      NUL_TEXT, sizeof NUL_TEXT - 1, 4,
      "unexpected NUL byte", 1 },
    /* A binary file given as the ini: its bytes never reach a terminal. */
    { "control_character_is_refused_without_echoing_it",
      CLUSTER "[server]\nlog_level = info\x1b[31m\n", 0, 4,
      "unexpected control character 0x1b (byte 17 of the line)", 1 },
    /* A vertical tab is white space to the reader; quoted back in an
     * error, it is not written to the terminal as it is. */
    { "vertical_tab_in_a_value_is_not_echoed",
      CLUSTER "[server]\nlog_level = wa\vrn\n", 0, 4,
      "[server] log_level: expected debug | info | warn | error, got "
      "\"wa?rn\"", 1 },
    { "carriage_return_inside_a_line_is_refused",
      CLUSTER "[server]\nlog_level = in\rfo\r\n", 0, 4,
      "unexpected control character 0x0d (byte 15 of the line)", 1 },
    /* line length */
    { "overlong_comment_line_is_refused_with_its_line_number",
      CLUSTER "[server]\n; " X250 "\nlog_level = info\n", 0, 4,
      "line too long (max ", 0 },
    { "overlong_line_is_not_split_into_a_second_key",
      EMB "lr = 0.1" X250 "seed=5\n", 0, 5, "line too long (max ", 0 },
    /* comments and continuation lines */
    { "hash_after_a_value_is_not_a_comment",
      CLUSTER "[table.emb]\ndim = 16 # not a comment\n", 0, 4,
      "[table.emb] dim: expected an integer 1..65536, "
      "got \"16 # not a comment\"", 1 },
    /* The ini keeps quotes as part of a value: a refusal says so (a
     * trial's quoted path read as absolute in every message). */
    { "a_quoted_bad_value_says_quotes_are_kept",
      CLUSTER "[table.emb]\ndim = \"16\"\n", 0, 4,
      "[table.emb] dim: expected an integer 1..65536, got \"\"16\"\" "
      "(quotes are kept as part of the value: write it without them)", 1 },
    /* A path that holds what was meant as a comment, or an invisible
     * character pasted at its end, named another folder: psd started
     * with no model, and --check said OK (a trial). */
    { "a_hash_comment_after_a_path_is_refused",
      CLUSTER "[server]\ndata_dir = /srv/psd   # moved, see ticket 12\n", 0,
      4, "[server] data_dir: \"/srv/psd   # moved, see ticket 12\" holds "
      "\" #\", which this file keeps as part of the path (a comment starts "
      "with \" ;\", or with \"#\" at a line's start): put the comment on its "
      "own line", 1 },
    { "a_no_break_space_ending_a_path_is_refused",
      CLUSTER "[server]\nauth_token_file = /etc/psd/token\xc2\xa0\n", 0, 4,
      "[server] auth_token_file: the path ends with an invisible character "
      "(a no-break or zero-width space, pasted from a web page?), which "
      "would be part of it: retype that end of the line", 1 },
    /* A key indented under auth_token joined the token, and kept its
     * default (a trial): refused, the token not quoted. */
    { "a_key_indented_under_the_token_is_refused",
      CLUSTER "[server]\nauth_token = abcdefghijklmnopqrstuvwxyz123456\n"
      "    max_frame = 1M\n", 0, 4, "[server] auth_token: line 5 is "
      "indented, which makes it part of the token, and it reads as the key "
      "\"max_frame\": unindent line 5", 1 },
    { "a_section_indented_under_the_token_is_refused",
      CLUSTER "[server]\nauth_token = abcdefghijklmnopqrstuvwxyz123456\n"
      "    [table.b]\n", 0, 4, "[server] auth_token: line 5 is indented, "
      "which makes it part of the token, and it reads as a section header: "
      "unindent line 5", 1 },
    { "semicolon_without_space_before_it_is_part_of_the_value",
      CLUSTER "[table.emb]\ndim = 16;x\n", 0, 4, "got \"16;x\"", 0 },
    { "continued_scalar_is_refused_naming_both_lines",
      EMB "lr = 0.1\n  0.2\n", 0, 5,
      "[table.emb] lr: line 6 is indented, which makes it part of this "
      "value, and lr takes one line: unindent line 6, or write the "
      "value on one line", 1 },
    /* A long value is quoted in part, with its length (a list of 4,097
     * addresses was echoed whole, 8 KB). */
    { "a_long_bad_value_is_quoted_in_part",
      CLUSTER "[server]\nlog_level = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n  bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbbb bbbbbb\n", 0, 4,
      "[server] log_level: line 5 is indented, which makes it part of this "
      "value, and log_level takes one line: unindent line 5, or write the "
      "value on one line", 1 },
    { "a_long_bad_value_on_one_line_is_quoted_in_part",
      CLUSTER "[server]\nlog_level = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 0, 4,
      "[server] log_level: expected debug | info | warn | error, got \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\" "
      "(171 bytes)", 1 },
    /* A token pasted indented under a key (its base64 read as a key,
     * or a hex one as a word) joins that key's value: the bad value is
     * quoted without it (the error goes to the log and /metrics). */
    { "a_token_continuing_a_bad_value_is_not_echoed",
      CLUSTER "[server]\nhello_timeout = 10 s\n  QmFyYmF6cXV4Zm9vYmFyYmF6cXV4MTIzNDU2Nzg=\n",
      0, 4, "[server] hello_timeout: line 5 is indented, which makes it part of this "
      "value, and hello_timeout takes one line: unindent line 5, or write the "
      "value on one line", 1 },
    /* In a list, which may go on over lines, an item of an indented
     * line that is no address is not quoted, nor is the rest of the
     * value (a review). */
    { "a_token_continuing_a_list_is_not_echoed",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071,\n  Zq9xLm2Vb7Kp4Rt8Yw3N\n",
      0, 2, "got text of an indented line (not shown: it may be a secret) "
      "(entry 3 of \"127.0.0.1:7070, 127.0.0.1:7071, ...\") (continued on "
      "line 3)", 0 },
    /* With a '.' or a ':' in it, it is no address still (a review). */
    { "a_token_with_a_dot_continuing_a_list_is_not_echoed",
      "[cluster]\nnodes = 127.0.0.1:7070,\n  S3cret.Passw0rdXYZ\n", 0, 2,
      "got text of an indented line (not shown: it may be a secret)", 0 },
    { "a_token_with_a_colon_continuing_a_list_is_not_echoed",
      "[cluster]\nnodes = 127.0.0.1:7070,\n  my:S3cretPassw0rd\n", 0, 2,
      "got text of an indented line (not shown: it may be a secret)", 0 },
    { "a_token_as_a_name_under_metrics_listen_is_not_echoed",
      "[cluster]\nnodes = 127.0.0.1:7070\n[server]\nmetrics_listen =\n"
      "  S3cretTokenabcdefgh:16009\n", 0, 4,
      "got a name from an indented line (not shown: it may be a secret) "
      "(entry 1 of \"...\")", 0 },
    /* An init goes on one line too: a word under it was quoted as "not a
     * finite number" (a review). */
    { "a_token_continuing_an_init_is_not_echoed",
      EMB "init = normal 0\n  QmFyYmF6cXV4S3cret\n", 0, 5,
      "[table.emb] init: line 6 is indented, which makes it part of this "
      "value, and init takes one line", 0 },
    /* Two addresses without a comma between lines: both quoted, and the
     * comma named. */
    { "a_comma_missing_at_a_line_end_is_named",
      "[cluster]\nnodes = 127.0.0.1:7070\n  127.0.0.1:7071\n", 0, 2,
      "got \"127.0.0.1:7070 127.0.0.1:7071\" (entry 1 of \"127.0.0.1:7070 "
      "...\") (continued on line 3); a ',' missing between them?", 0 },
    { "a_token_joining_a_list_item_is_not_echoed",
      "[cluster]\nnodes = 127.0.0.1:7070\n  Zq9xLm2Vb7Kp4Rt8Yw3N\n",
      0, 2, "got text of an indented line (not shown: it may be a secret) "
      "(entry 1 of \"127.0.0.1:7070 ...\") (continued on line 3)", 0 },
    { "indented_key_continues_the_value_above_and_is_refused",
      EMB "  lr = 0.1\n", 0, 4,
      "[table.emb] dim: line 5 is indented, which makes it part of this "
      "value, and dim takes one line: unindent line 5, or write the "
      "value on one line", 1 },
    /* [cluster] */
    { "missing_nodes_is_reported_at_the_cluster_header",
      "[server]\nlog_level = info\n[cluster]\nshards = 4\n", 0, 3,
      "[cluster] nodes: required key missing", 1 },
    { "missing_cluster_section_is_reported_without_a_line",
      "[server]\nlog_level = info\n", 0, 0,
      "[cluster] nodes: required key missing", 0 },
    { "empty_file_is_refused_for_missing_nodes",
      "", 0, 0, "[cluster] nodes: required key missing", 0 },
    { "duplicate_node_is_refused",
      "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071, 127.0.0.1:7070\n",
      0, 2, "[cluster] nodes: duplicate node \"127.0.0.1:7070\" "
      "(entries 1 and 3)", 1 },
    { "duplicate_ipv6_node_spelled_differently_is_refused",
      "[cluster]\nnodes = [::1]:7070, [0:0::1]:7070\n", 0, 2,
      "duplicate node \"[0:0::1]:7070\" (entries 1 and 2)", 0 },
    { "ipv4_mapped_node_beside_its_ipv4_address_is_a_duplicate",
      "[cluster]\nnodes = [::ffff:127.0.0.1]:7070, 127.0.0.1:7070\n", 0, 2,
      "duplicate node \"127.0.0.1:7070\" (entries 1 and 2)", 0 },
    { "host_name_with_a_bad_character_is_refused",
      "[cluster]\nnodes = ps-0!:7070\n", 0, 2,
      "[cluster] nodes: expected a host name", 0 },
    { "host_name_ending_in_a_hyphen_is_refused",
      "[cluster]\nnodes = ps-:7070\n", 0, 2,
      "[cluster] nodes: expected a host name", 0 },
    { "digits_and_dots_must_be_a_whole_ipv4_address",
      "[cluster]\nnodes = 127.1:7070\n", 0, 2,
      "[cluster] nodes: expected a numeric IPv4 address, got \"127.1:7070\"",
      0 },
    { "same_host_name_in_another_case_is_a_duplicate",
      "[cluster]\nnodes = ps-0.example:7070, PS-0.Example:7070\n", 0, 2,
      "[cluster] nodes: duplicate node \"PS-0.Example:7070\" (entries 1 "
      "and 2)", 1 },
    { "short_auth_token_is_refused",
      CLUSTER "[server]\nauth_token = s3cret\n", 0, 4,
      "[server] auth_token: a token must be 16..255 bytes, got 6", 0 },
    { "auth_token_and_auth_token_file_together_are_refused",
      CLUSTER "[server]\nauth_token = 0123456789abcdef\n"
      "auth_token_file = /etc/psd/token\n", 0, 5,
      "[server] auth_token_file: set either auth_token or auth_token_file, "
      "not both (auth_token is on line 4)", 1 },
    { "node_port_zero_is_refused",
      "[cluster]\nnodes = 127.0.0.1:0\n", 0, 2,
      "expected a port 1..65535, got \"127.0.0.1:0\"", 0 },
    { "node_port_above_65535_is_refused",
      "[cluster]\nnodes = 127.0.0.1:65536\n", 0, 2,
      "expected a port 1..65535", 0 },
    { "node_without_port_is_refused",
      "[cluster]\nnodes = 127.0.0.1\n", 0, 2,
      "expected host:port, IPv4:port or [IPv6]:port", 0 },
    { "bare_ipv6_node_needs_brackets",
      "[cluster]\nnodes = ::1:7070\n", 0, 2,
      "expected host:port, IPv4:port or [IPv6]:port, got \"::1:7070\"", 0 },
    { "bad_ipv6_address_is_refused",
      "[cluster]\nnodes = [::g]:7070\n", 0, 2,
      "expected a numeric IPv6 address", 0 },
    { "empty_node_entry_is_refused",
      "[cluster]\nnodes = 127.0.0.1:7070,\n", 0, 2,
      "[cluster] nodes: entry 2 is empty, in \"127.0.0.1:7070,\"", 1 },
    { "missing_key_before_equals_is_refused",
      EMB "= 5\n", 0, 5, "missing key before \"=\"", 1 },
    { "indented_section_header_continues_the_value_above",
      CLUSTER "  [table.t]\n", 0, 2,
      "(continued on line 3)", 0 },
    { "empty_nodes_is_refused",
      "[cluster]\nnodes =\n", 0, 2,
      "[cluster] nodes: expected a comma-separated list", 0 },
    { "zero_shards_is_refused",
      CLUSTER "shards = 0\n", 0, 3,
      "[cluster] shards: expected an integer 1..65535, got \"0\"", 1 },
    { "shards_above_65535_is_refused",
      CLUSTER "shards = 65536\n", 0, 3, "expected an integer 1..65535", 0 },
    { "zero_workers_is_refused",
      CLUSTER "workers = 0\n", 0, 3, "[cluster] workers: expected", 0 },
    /* [server] */
    { "max_frame_below_1K_is_refused",
      CLUSTER "[server]\nmax_frame = 1023\n", 0, 4,
      "[server] max_frame: expected a size 1K..1G (bytes, or with a K, M "
      "or G suffix), got \"1023\"", 1 },
    { "max_frame_above_1G_is_refused",
      CLUSTER "[server]\nmax_frame = 1025M\n", 0, 4,
      "expected a size 1K..1G", 0 },
    /* A row no message can carry: every request on the table would be
     * refused by the client, first seen at its first use. */
    { "a_row_wider_than_max_frame_is_refused",
      CLUSTER "[server]\nmax_frame = 1K\n[table.t]\ndim = 300\n", 0, 6,
      "[table.t] dim: a row of 300 floats (1200 bytes) and its key do not "
      "fit a message under [server] max_frame = 1024 (a request carries up "
      "to 955 bytes of keys and rows); raise max_frame to at least 1277, or "
      "lower dim", 1 },
    /* A dense table's row travels with its key too (a keyed push or pull;
     * a range carries none): 947 bytes of row fit, 948 do not. dim 238
     * was accepted, and every keyed request on it refused. */
    { "a_dense_row_wider_than_max_frame_is_refused",
      CLUSTER "[server]\nmax_frame = 1K\n[table.t]\nkind = dense\n"
      "rows = 4\ndim = 237\n", 0, 8,
      "[table.t] dim: a row of 237 floats (948 bytes) and its key do not "
      "fit a message under [server] max_frame = 1024 (a request carries up "
      "to 955 bytes of keys and rows); raise max_frame to at least 1025", 0 },
    { "max_frame_of_2G_is_refused",
      CLUSTER "[server]\nmax_frame = 2G\n", 0, 4, "got \"2G\"", 0 },
    { "size_with_lowercase_suffix_is_refused",
      CLUSTER "[server]\nmax_frame = 64m\n", 0, 4, "got \"64m\"", 0 },
    { "size_with_two_letter_suffix_is_refused",
      CLUSTER "[server]\nmax_frame = 64MB\n", 0, 4, "got \"64MB\"", 0 },
    { "size_overflowing_64_bits_is_refused",
      CLUSTER "[server]\nmax_output = 18014398509481984K\n", 0, 4,
      "[server] max_output: expected a size", 0 },
    { "max_output_below_1K_is_refused",
      CLUSTER "[server]\nmax_output = 512\n", 0, 4,
      "[server] max_output: expected a size 1K..1T", 0 },
    { "negative_snapshot_interval_is_refused",
      CLUSTER "[server]\nsnapshot_interval = -1\n", 0, 4,
      "[server] snapshot_interval: expected an integer 0..31536000, "
      "got \"-1\"", 1 },
    { "negative_snapshot_journal_mb_is_refused",
      CLUSTER "[server]\nsnapshot_journal_mb = -1\n", 0, 4,
      "[server] snapshot_journal_mb: expected an integer 0..16777216, "
      "got \"-1\"", 1 },
    { "zero_max_connections_is_refused",
      CLUSTER "[server]\nmax_connections = 0\n", 0, 4,
      "[server] max_connections: expected an integer 1..", 0 },
    { "zero_max_connections_per_addr_is_refused",
      CLUSTER "[server]\nmax_connections_per_addr = 0\n", 0, 4,
      "[server] max_connections_per_addr: expected an integer 1..1048576, "
      "got \"0\"", 1 },
    { "max_client_memory_below_1M_is_refused",
      CLUSTER "[server]\nmax_client_memory = 1023K\n", 0, 4,
      "[server] max_client_memory: expected a size 1M..1T (bytes, or with a "
      "K, M, G or T suffix), got \"1023K\"", 1 },
    { "max_client_memory_needs_a_number",
      CLUSTER "[server]\nmax_client_memory = lots\n", 0, 4,
      "[server] max_client_memory: expected a size 1M..1T", 0 },
    { "zero_frame_timeout_is_refused",
      CLUSTER "[server]\nframe_timeout = 0\n", 0, 4,
      "[server] frame_timeout: expected an integer 1..3600, got \"0\"", 1 },
    { "frame_timeout_above_an_hour_is_refused",
      CLUSTER "[server]\nframe_timeout = 3601\n", 0, 4,
      "[server] frame_timeout: expected an integer 1..3600, got \"3601\"",
      1 },
    { "negative_idle_timeout_is_refused",
      CLUSTER "[server]\nidle_timeout = -1\n", 0, 4,
      "[server] idle_timeout: expected an integer 1..86400, got \"-1\"", 1 },
    { "zero_max_unacked_pushes_is_refused",
      CLUSTER "[server]\nmax_unacked_pushes = 0\n", 0, 4,
      "[server] max_unacked_pushes: expected an integer 1..1073741824, "
      "got \"0\"", 1 },
    { "max_remembered_pushes_takes_no_suffix",
      CLUSTER "[server]\nmax_remembered_pushes = 4M\n", 0, 4,
      "[server] max_remembered_pushes: expected an integer "
      "1..17179869184, got \"4M\"", 1 },
    { "nonfinite_takes_only_reject_or_allow",
      EMB "nonfinite = ignore\n", 0, 5,
      "[table.emb] nonfinite: expected reject | allow, got \"ignore\"", 1 },
    { "max_rows_must_be_a_number",
      EMB "max_rows = 1e6\n", 0, 5,
      "[table.emb] max_rows: expected an integer 0..18446744073709551615, "
      "got \"1e6\"", 1 },
    { "max_rows_on_a_dense_table_is_refused_at_its_line",
      CLUSTER "[table.d]\nkind = dense\nrows = 10\ndim = 1\n"
      "max_rows = 5\n", 0, 7,
      "[table.d] max_rows: only a sparse table grows (kind = dense has its "
      "rows fixed by rows), got \"5\"", 1 },
    { "unknown_durability_is_refused",
      CLUSTER "[server]\ndurability = wal\n", 0, 4,
      "[server] durability: expected snapshot | log, got \"wal\"", 1 },
    { "unknown_fsync_is_refused",
      CLUSTER "[server]\nfsync = yes\n", 0, 4,
      "expected always | everysec | no", 0 },
    { "uppercase_log_level_is_refused",
      CLUSTER "[server]\nlog_level = INFO\n", 0, 4,
      "expected debug | info | warn | error, got \"INFO\"", 0 },
    { "empty_data_dir_is_refused",
      CLUSTER "[server]\ndata_dir =\n", 0, 4,
      "[server] data_dir: expected 1..255 bytes, got \"\"", 1 },
    /* Longer than a line may be, it could only be continued, which a
     * path does not take. */
    { "data_dir_over_255_bytes_is_refused",
      CLUSTER "[server]\ndata_dir = /" A130 "\n  " A130 "\n", 0, 4,
      "[server] data_dir: line 5 is indented", 0 },
    /* tables: names, required keys, cross-checks */
    { "empty_table_name_is_refused",
      CLUSTER "[table.]\ndim = 4\n", 0, 3, "invalid table name \"\"", 0 },
    { "table_name_with_space_is_refused",
      CLUSTER "[table.a b]\ndim = 4\n", 0, 3, "invalid table name \"a b\"",
      0 },
    { "table_name_with_dot_is_refused",
      CLUSTER "[table.a.b]\ndim = 4\n", 0, 3, "invalid table name \"a.b\"",
      0 },
    { "table_name_of_64_characters_is_refused",
      CLUSTER "[table." NAME64 "]\ndim = 4\n", 0, 3,
      "invalid table name \"" NAME64 "\" (allowed: A-Z a-z 0-9 _ -, "
      "1..63 characters)", 1 },
    { "missing_dim_is_reported_at_the_table_header",
      CLUSTER "[table.emb]\nlr = 0.1\n", 0, 3,
      "[table.emb] dim: required key missing", 1 },
    { "table_without_keys_still_needs_dim",
      CLUSTER "[table.emb]\n[server]\n", 0, 3,
      "[table.emb] dim: required key missing", 1 },
    { "dense_table_without_rows_is_reported_at_its_header",
      CLUSTER "[table.w]\nkind = dense\ndim = 4\n", 0, 3,
      "[table.w] rows: required key missing (kind = dense)", 1 },
    { "rows_on_a_sparse_table_is_refused",
      EMB "rows = 10\n", 0, 5,
      "[table.emb] rows: only a dense table has rows", 0 },
    { "zero_rows_is_refused",
      CLUSTER "[table.w]\nkind = dense\ndim = 4\nrows = 0\n", 0, 6,
      "[table.w] rows: expected an integer 1..", 0 },
    { "rows_times_shards_overflowing_64_bits_is_refused",
      CLUSTER "[table.w]\nkind = dense\ndim = 1\n"
      "rows = 1152921504606846976\n", 0, 6,
      "[table.w] rows: rows * shards (16) overflows 64 bits", 0 },
    { "rows_times_shards_is_checked_when_cluster_comes_last",
      "[table.w]\nkind = dense\ndim = 1\nrows = 2305843009213693952\n"
      "[cluster]\nnodes = 127.0.0.1:7070\nshards = 8\n", 0, 4,
      "rows * shards (8) overflows 64 bits", 0 },
    { "rows_times_dim_bytes_overflowing_64_bits_is_refused",
      CLUSTER "[table.w]\nkind = dense\ndim = 65536\n"
      "rows = 281474976710656\n", 0, 6,
      "rows * dim * 4 bytes overflows 64 bits", 0 },
    /* tables: integers and enums */
    { "negative_dim_gives_the_documented_message",
      CLUSTER "[table.emb]\ndim = -5\n", 0, 4,
      "[table.emb] dim: expected an integer 1..65536, got \"-5\"", 1 },
    { "zero_dim_is_refused",
      CLUSTER "[table.emb]\ndim = 0\n", 0, 4, "got \"0\"", 0 },
    { "dim_above_65536_is_refused",
      CLUSTER "[table.emb]\ndim = 65537\n", 0, 4, "got \"65537\"", 0 },
    { "dim_with_trailing_text_is_refused",
      CLUSTER "[table.emb]\ndim = 16x\n", 0, 4, "got \"16x\"", 0 },
    { "dim_in_hex_is_refused",
      CLUSTER "[table.emb]\ndim = 0x10\n", 0, 4, "got \"0x10\"", 0 },
    { "dim_with_plus_sign_is_refused",
      CLUSTER "[table.emb]\ndim = +16\n", 0, 4, "got \"+16\"", 0 },
    { "empty_dim_is_refused",
      CLUSTER "[table.emb]\ndim =\n", 0, 4, "got \"\"", 0 },
    { "seed_above_2_to_the_64_is_refused",
      EMB "seed = 18446744073709551616\n", 0, 5,
      "[table.emb] seed: expected an integer 0..18446744073709551615", 0 },
    { "staleness_above_65535_is_refused",
      EMB "consistency = ssp\nstaleness = 65536\n", 0, 6,
      "[table.emb] staleness: expected an integer 0..65535", 0 },
    { "capitalised_updater_is_refused_listing_the_choices",
      EMB "updater = Adam\n", 0, 5,
      "[table.emb] updater: expected sum | assign | sgd | adagrad | adam | "
      "ftrl, got \"Adam\"", 1 },
    { "unknown_kind_is_refused",
      EMB "kind = Dense\n", 0, 5, "expected sparse | dense", 0 },
    { "unknown_consistency_is_refused",
      EMB "consistency = ssp2\n", 0, 5, "expected async | bsp | ssp", 0 },
    { "unknown_aggregate_is_refused",
      EMB "aggregate = avg\n", 0, 5, "expected sum | mean", 0 },
    /* tables: hyper-parameters */
    /* Past a float: the range is said, its top too. */
    { "an_lr_past_a_float_is_refused_with_the_range",
      EMB "lr = 1e39\n", 0, 5,
      "[table.emb] lr: expected a number > 0 (1.2e-38..3.4e38), got "
      "\"1e39\"", 1 },
    { "zero_lr_is_refused",
      EMB "lr = 0\n", 0, 5,
      "[table.emb] lr: expected a number > 0 (1.2e-38..3.4e38), got \"0\"",
      1 },
    /* ftrl divides by lr: 1 / 1e-39 is an infinity as a float, and every
     * row the table pushed to became NaN. */
    { "lr_below_the_normal_floats_is_refused",
      EMB "lr = 1e-39\n", 0, 5, "got \"1e-39\"", 0 },
    { "negative_lr_is_refused",
      EMB "lr = -0.1\n", 0, 5, "got \"-0.1\"", 0 },
    { "nan_lr_is_refused",
      EMB "lr = nan\n", 0, 5, "got \"nan\"", 0 },
    { "infinite_lr_is_refused",
      EMB "lr = inf\n", 0, 5, "got \"inf\"", 0 },
    { "lr_beyond_float_range_is_refused",
      EMB "lr = 1e39\n", 0, 5, "got \"1e39\"", 0 },
    { "lr_with_two_points_is_refused",
      EMB "lr = 0.1.2\n", 0, 5, "got \"0.1.2\"", 0 },
    { "beta1_of_1_is_refused",
      EMB "beta1 = 1\n", 0, 5,
      "[table.emb] beta1: expected a number in [0, 1), got \"1\"", 1 },
    { "negative_beta2_is_refused",
      EMB "beta2 = -0.1\n", 0, 5, "[table.emb] beta2: expected", 0 },
    { "beta2_of_1_is_refused",
      EMB "beta2 = 1.0\n", 0, 5, "got \"1.0\"", 0 },
    { "zero_epsilon_is_refused",
      EMB "epsilon = 0\n", 0, 5, "[table.emb] epsilon: expected a number > 0",
      0 },
    { "epsilon_that_rounds_to_zero_as_a_float_is_refused",
      EMB "epsilon = 1e-50\n", 0, 5, "got \"1e-50\"", 0 },
    { "negative_l1_is_refused",
      EMB "l1 = -1\n", 0, 5, "[table.emb] l1: expected a number >= 0", 0 },
    { "negative_l2_is_refused",
      EMB "l2 = -0.5\n", 0, 5, "[table.emb] l2: expected a number >= 0", 0 },
    { "negative_ftrl_beta_is_refused",
      EMB "updater = ftrl\nbeta = -1\n", 0, 6,
      "[table.emb] beta: expected a number >= 0", 0 },
    { "out_of_range_hyper_parameter_is_refused_for_any_updater",
      EMB "updater = sum\nbeta1 = 2\n", 0, 6, "[table.emb] beta1:", 0 },
    /* tables: init */
    { "uniform_with_lo_above_hi_is_refused",
      EMB "init = uniform 1 0\n", 0, 5,
      "[table.emb] init: uniform needs LO < HI, got \"uniform 1 0\"", 1 },
    { "uniform_with_lo_equal_hi_is_refused",
      EMB "init = uniform 1 1\n", 0, 5, "uniform needs LO < HI", 0 },
    { "normal_with_negative_std_is_refused",
      EMB "init = normal 0 -1\n", 0, 5,
      "[table.emb] init: normal needs STD >= 0, got \"normal 0 -1\"", 1 },
    { "normal_that_can_draw_past_the_largest_float_is_refused",
      EMB "init = normal 0 1e38\n", 0, 5,
      "[table.emb] init: normal MEAN STD must keep |MEAN| + 5.77 STD within "
      "the largest float (3.4e38), got \"normal 0 1e38\"", 1 },
    { "normal_with_a_mean_near_the_largest_float_is_refused",
      EMB "init = normal -3e38 1e37\n", 0, 5,
      "[table.emb] init: normal MEAN STD must keep", 0 },
    { "constant_without_value_is_refused",
      EMB "init = constant\n", 0, 5,
      "[table.emb] init: expected zeros | constant V | uniform LO HI | "
      "normal MEAN STD, got \"constant\"", 1 },
    { "constant_with_two_values_is_refused",
      EMB "init = constant 1 2\n", 0, 5, "got \"constant 1 2\"", 0 },
    { "zeros_with_a_value_is_refused",
      EMB "init = zeros 0\n", 0, 5, "got \"zeros 0\"", 0 },
    { "unknown_init_is_refused",
      EMB "init = gaussian 0 1\n", 0, 5, "got \"gaussian 0 1\"", 0 },
    { "uniform_with_nan_bound_is_refused",
      EMB "init = uniform 0 nan\n", 0, 5, "got \"uniform 0 nan\"", 0 },
    { "constant_nan_says_the_number_must_be_finite",
      EMB "init = constant nan\n", 0, 5,
      "[table.emb] init: constant: \"nan\" is not a finite number (within "
      "+-3.4e38), got \"constant nan\"", 1 },
};

#define NERROR_CASES (sizeof error_cases / sizeof error_cases[0])

/* ---- valid files -------------------------------------------------------- */

/* The docs/design.md example with `consistency = ssp`. */
static void test_design_example_with_ssp_parses_with_its_values(void **state)
{
    (void)state;
    psd_config c;
    load_ok(DESIGN_HEAD "consistency = ssp\n" DESIGN_STALENESS, &c);
    assert_int_equal(c.nnodes, 2);
    assert_string_equal(c.nodes[0].host, "127.0.0.1");
    assert_int_equal(c.nodes[0].port, 7070);
    assert_string_equal(c.nodes[1].host, "127.0.0.1");
    assert_int_equal(c.nodes[1].port, 7071);
    assert_int_equal(c.shards, 16);
    assert_int_equal(c.workers, 4);
    assert_string_equal(c.data_dir, "/var/lib/psd");
    assert_int_equal(c.snapshot_interval, 300);
    assert_int_equal(c.durability, PSD_DUR_SNAPSHOT);
    assert_int_equal(c.fsync, PSD_FSYNC_EVERYSEC);
    assert_string_equal(c.auth_token, "");
    assert_int_equal(c.max_frame, 64 << 20);
    assert_int_equal(c.log_level, PSD_LOG_INFO);
    assert_int_equal(c.ntables, 1);
    const psd_table_conf *t = &c.tables[0];
    assert_string_equal(t->name, "emb");
    assert_int_equal(t->line, 15);
    assert_int_equal(t->dense, 0);
    assert_int_equal(t->dim, 16);
    assert_int_equal(t->rows, 0);
    assert_int_equal(t->upd.kind, PSD_UPD_ADAGRAD);
    assert_float_eq(t->upd.lr, 0.05f, "lr");
    assert_int_equal(t->init.kind, PSD_INIT_UNIFORM);
    assert_float_eq(t->init.a, -0.01f, "init LO");
    assert_float_eq(t->init.b, 0.01f, "init HI");
    assert_int_equal(t->init.seed, 7);
    assert_int_equal(t->consistency, PSD_CONS_SSP);
    assert_int_equal(t->staleness, 2);
    psd_config_destroy(&c);
}

/* Checks that c holds every default of config.h (nodes aside). */
static void assert_server_defaults(const psd_config *c)
{
    assert_int_equal(c->shards, 16);
    assert_int_equal(c->workers, 1);
    assert_string_equal(c->data_dir, "/var/lib/psd");
    assert_int_equal(c->snapshot_interval, 300);
    assert_int_equal(c->snapshot_journal_mb, 2048);
    assert_int_equal(c->durability, PSD_DUR_SNAPSHOT);
    assert_int_equal(c->fsync, PSD_FSYNC_EVERYSEC);
    assert_string_equal(c->auth_token, "");
    assert_int_equal(c->max_frame, 64ULL << 20);
    assert_int_equal(c->log_level, PSD_LOG_INFO);
    assert_int_equal(c->max_output, 16ULL << 20);
    assert_int_equal(c->max_connections, 1024);
    assert_int_equal(c->max_connections_per_addr, 256);
    assert_int_equal(c->max_client_memory, 1ULL << 30);
    assert_int_equal(c->hello_timeout, 10);
    assert_int_equal(c->frame_timeout, 30);
    assert_int_equal(c->idle_timeout, 60);
    assert_int_equal(c->heartbeat_ms, 1000);
    assert_int_equal(c->peer_timeout_ms, 4000);
    assert_int_equal(c->client_ttl, 600);
    assert_int_equal(c->max_unacked_pushes, 1048576);
    assert_int_equal(c->max_remembered_pushes, 2097152);
}

/* Checks that t holds every table default (dim aside). */
static void assert_table_defaults(const psd_table_conf *t)
{
    assert_int_equal(t->dense, 0);
    assert_int_equal(t->rows, 0);
    assert_int_equal(t->upd.kind, PSD_UPD_SUM);
    assert_float_eq(t->upd.lr, 0.01f, "lr");
    assert_float_eq(t->upd.beta1, 0.9f, "beta1");
    assert_float_eq(t->upd.beta2, 0.999f, "beta2");
    assert_float_eq(t->upd.epsilon, 1e-8f, "epsilon");
    assert_float_eq(t->upd.l1, 0, "l1");
    assert_float_eq(t->upd.l2, 0, "l2");
    assert_float_eq(t->upd.beta, 1, "beta");
    assert_int_equal(t->init.kind, PSD_INIT_ZEROS);
    assert_float_eq(t->init.a, 0, "init a");
    assert_float_eq(t->init.b, 0, "init b");
    assert_int_equal(t->init.seed, 0);
    assert_int_equal(t->consistency, PSD_CONS_ASYNC);
    assert_int_equal(t->staleness, 0);
    assert_int_equal(t->aggregate_mean, 0);
    assert_int_equal(t->allow_nonfinite, 0);
    assert_int_equal(t->max_rows, 0);
}

static void test_defaults_fill_every_absent_key(void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER "[table.t]\ndim = 4\n", &c);
    assert_int_equal(c.nnodes, 1);
    assert_server_defaults(&c);
    assert_int_equal(c.ntables, 1);
    assert_string_equal(c.tables[0].name, "t");
    assert_int_equal(c.tables[0].line, 3);
    assert_int_equal(c.tables[0].dim, 4);
    assert_table_defaults(&c.tables[0]);
    psd_config_destroy(&c);
}

static void test_file_without_tables_is_valid(void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER, &c);
    assert_int_equal(c.ntables, 0);
    assert_null(c.tables);
    psd_config_destroy(&c);
}

/* Checks every field of two table configs. */
static void assert_tables_equal(const psd_table_conf *a,
                                const psd_table_conf *b)
{
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->dense, b->dense);
    assert_int_equal(a->dim, b->dim);
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->upd.kind, b->upd.kind);
    assert_float_eq(a->upd.lr, b->upd.lr, "lr");
    assert_float_eq(a->upd.beta1, b->upd.beta1, "beta1");
    assert_float_eq(a->upd.beta2, b->upd.beta2, "beta2");
    assert_float_eq(a->upd.epsilon, b->upd.epsilon, "epsilon");
    assert_float_eq(a->upd.l1, b->upd.l1, "l1");
    assert_float_eq(a->upd.l2, b->upd.l2, "l2");
    assert_float_eq(a->upd.beta, b->upd.beta, "beta");
    assert_int_equal(a->init.kind, b->init.kind);
    assert_float_eq(a->init.a, b->init.a, "init a");
    assert_float_eq(a->init.b, b->init.b, "init b");
    assert_int_equal(a->init.seed, b->init.seed);
    assert_int_equal(a->consistency, b->consistency);
    assert_int_equal(a->staleness, b->staleness);
    assert_int_equal(a->aggregate_mean, b->aggregate_mean);
}

/* The same settings in two orders, with [cluster] last in the second and
 * every key that others depend on (kind, updater, consistency) last. */
static void test_key_and_section_order_does_not_matter(void **state)
{
    (void)state;
    psd_config a, b;
    load_ok("[cluster]\nnodes = 127.0.0.1:7070\nshards = 4\n"
            "[table.w]\nkind = dense\nrows = 100\ndim = 8\nupdater = adam\n"
            "lr = 0.5\nbeta1 = 0.8\nconsistency = ssp\nstaleness = 3\n"
            "init = normal 0 0.1\nseed = 9\naggregate = mean\n", &a);
    load_ok("[table.w]\nstaleness = 3\naggregate = mean\nseed = 9\n"
            "init = normal 0 0.1\nbeta1 = 0.8\nlr = 0.5\nrows = 100\n"
            "dim = 8\nconsistency = ssp\nupdater = adam\nkind = dense\n"
            "[cluster]\nshards = 4\nnodes = 127.0.0.1:7070\n", &b);
    assert_int_equal(a.shards, 4);
    assert_int_equal(b.shards, 4);
    assert_int_equal(a.ntables, 1);
    assert_int_equal(b.ntables, 1);
    assert_int_equal(a.tables[0].dense, 1);
    assert_int_equal(a.tables[0].upd.kind, PSD_UPD_ADAM);
    assert_int_equal(a.tables[0].aggregate_mean, 1);
    assert_tables_equal(&a.tables[0], &b.tables[0]);
    psd_config_destroy(&a);
    psd_config_destroy(&b);
}

static void test_sizes_take_1024_based_suffixes(void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER "[server]\nmax_frame = 1K\nmax_output = 3G\n", &c);
    assert_int_equal(c.max_frame, 1024);
    assert_int_equal(c.max_output, 3ULL << 30);
    psd_config_destroy(&c);
    load_ok(CLUSTER "[server]\nmax_frame = 1G\nmax_output = 4096\n", &c);
    assert_int_equal(c.max_frame, 1ULL << 30);
    assert_int_equal(c.max_output, 4096);
    psd_config_destroy(&c);
    load_ok(CLUSTER "[server]\nmax_frame = 2M\n", &c);
    assert_int_equal(c.max_frame, 2ULL << 20);
    psd_config_destroy(&c);
    /* The widest dense row 1K carries: 944 bytes, and its key. */
    load_ok(CLUSTER "[server]\nmax_frame = 1K\n[table.t]\nkind = dense\n"
            "rows = 4\ndim = 236\n", &c);
    psd_config_destroy(&c);
    /* The ranges of max_output and max_client_memory end at 1T, and the
     * error says so: 1T itself is taken. */
    load_ok(CLUSTER "[server]\nmax_output = 1T\nmax_client_memory = 1T\n",
            &c);
    assert_int_equal(c.max_output, 1ULL << 40);
    assert_int_equal(c.max_client_memory, 1ULL << 40);
    psd_config_destroy(&c);
}

static void test_range_boundaries_are_accepted(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = 127.0.0.1:1, 127.0.0.1:65535\n"
            "shards = 65535\nworkers = 65535\n"
            "[server]\nsnapshot_interval = 0\nmax_connections = 1\n"
            "max_connections_per_addr = 1048576\nmax_client_memory = 1M\n"
            "frame_timeout = 3600\nidle_timeout = 1\n"
            "[table.t]\ndim = 65536\nbeta1 = 0\nbeta2 = 0.999999\nl1 = 0\n"
            "beta = 0\nseed = 18446744073709551615\nnonfinite = allow\n"
            "max_rows = 18446744073709551615\n"
            "[table.u]\ndim = 1\nkind = dense\nrows = 1\n", &c);
    assert_int_equal(c.nodes[1].port, 65535);
    assert_int_equal(c.shards, 65535);
    assert_int_equal(c.snapshot_interval, 0);
    assert_int_equal(c.tables[0].dim, 65536);
    assert_int_equal(c.tables[0].init.seed, UINT64_MAX);
    assert_float_eq(c.tables[0].upd.beta1, 0, "beta1");
    assert_int_equal(c.tables[1].rows, 1);
    assert_int_equal(c.max_connections_per_addr, 1048576);
    assert_int_equal(c.max_client_memory, 1ULL << 20);
    assert_int_equal(c.frame_timeout, 3600);
    assert_int_equal(c.idle_timeout, 1);
    assert_int_equal(c.tables[0].allow_nonfinite, 1);
    assert_int_equal(c.tables[0].max_rows, UINT64_MAX);
    psd_config_destroy(&c);
}

static void test_init_forms_parse(void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER "[table.a]\ndim = 1\ninit = constant 0.5\n"
            "[table.b]\ndim = 1\ninit = normal 0 0.01\n"
            "[table.c]\ndim = 1\ninit = normal 1 0\n"
            "[table.d]\ndim = 1\ninit = uniform  -1\t1\n", &c);
    assert_int_equal(c.tables[0].init.kind, PSD_INIT_CONSTANT);
    assert_float_eq(c.tables[0].init.a, 0.5f, "constant");
    assert_int_equal(c.tables[1].init.kind, PSD_INIT_NORMAL);
    assert_float_eq(c.tables[1].init.b, 0.01f, "normal std");
    assert_float_eq(c.tables[2].init.a, 1, "normal mean");
    assert_int_equal(c.tables[3].init.kind, PSD_INIT_UNIFORM);
    assert_float_eq(c.tables[3].init.a, -1, "uniform lo");
    assert_float_eq(c.tables[3].init.b, 1, "uniform hi");
    psd_config_destroy(&c);
}

static void test_hyper_parameters_of_other_updaters_are_accepted(
    void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER "[table.t]\ndim = 2\nupdater = sgd\nbeta1 = 0.5\n"
            "l1 = 0.25\nbeta = 2\n", &c);
    assert_int_equal(c.tables[0].upd.kind, PSD_UPD_SGD);
    assert_float_eq(c.tables[0].upd.beta1, 0.5f, "beta1");
    assert_float_eq(c.tables[0].upd.l1, 0.25f, "l1");
    psd_config_destroy(&c);
}

/* The docs/design.md example verbatim: staleness on an async table is accepted
 * (it documents itself as "ssp only") and has no effect. */
static void test_design_example_verbatim_parses(void **state)
{
    (void)state;
    psd_config c;
    load_ok(DESIGN_HEAD "consistency = async                        ; async | "
            "bsp | ssp\n" DESIGN_STALENESS, &c);
    assert_int_equal(c.tables[0].consistency, PSD_CONS_ASYNC);
    assert_int_equal(c.tables[0].staleness, 2);
    psd_config_destroy(&c);
}

static void test_staleness_on_an_ssp_table_is_accepted(void **state)
{
    (void)state;
    psd_config c;
    load_ok(EMB "consistency = ssp\nstaleness = 5\n", &c);
    assert_int_equal(c.tables[0].consistency, PSD_CONS_SSP);
    assert_int_equal(c.tables[0].staleness, 5);
    psd_config_destroy(&c);
}

static void test_nodes_continue_on_indented_lines(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\n"
            "nodes = 127.0.0.1:7070,\n"
            "        127.0.0.1:7071,      ; a comment here is dropped\n"
            "\t127.0.0.1:7072\n"
            "shards = 4\n", &c);
    assert_int_equal(c.nnodes, 3);
    assert_int_equal(c.nodes[2].port, 7072);
    assert_int_equal(c.shards, 4);
    psd_config_destroy(&c);
}

static void test_ipv6_nodes_are_parsed_and_normalised(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = [::1]:7070,[2001:DB8:0::0001]:7071 , "
            "10.0.0.1:80\n", &c);
    assert_int_equal(c.nnodes, 3);
    assert_string_equal(c.nodes[0].host, "::1");
    assert_int_equal(c.nodes[0].port, 7070);
    assert_string_equal(c.nodes[1].host, "2001:db8::1");
    assert_int_equal(c.nodes[1].port, 7071);
    assert_string_equal(c.nodes[2].host, "10.0.0.1");
    assert_int_equal(c.nodes[2].port, 80);
    psd_config_destroy(&c);
}

/* inih cuts section names at 49 characters; the config must not. */
static void test_table_name_of_63_characters_is_kept_whole(void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER "[table." NAME63 "]\ndim = 4\n"
            "[table.x-y_1]\ndim = 2\n", &c);
    assert_int_equal(c.ntables, 2);
    assert_string_equal(c.tables[0].name, NAME63);
    assert_string_equal(c.tables[1].name, "x-y_1");
    psd_config_destroy(&c);
}

static void test_comments_crlf_and_bom_are_accepted(void **state)
{
    (void)state;
    psd_config c;
    load_ok("\xEF\xBB\xBF; leading comment\r\n"
            "# hash comment at line start\r\n"
            "[cluster] ; comment after a header\r\n"
            "nodes = 127.0.0.1:7070   ; comment\r\n"
            "shards: 8\r\n"
            "\r\n"
            "[table.emb]\r\n"
            "dim = 16 ; sixteen\r\n", &c);
    assert_int_equal(c.shards, 8);
    assert_int_equal(c.tables[0].dim, 16);
    assert_int_equal(c.tables[0].line, 7);
    psd_config_destroy(&c);
}

/* Finds the line limit from the error of an overlong line, then checks
 * that a line of exactly that length is accepted and one more byte is
 * refused with its line number. */
static void test_line_limit_is_exact(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    assert_int_equal(load_text(CLUSTER "; " X250 "\n", &c, path, err), -1);
    const char *m = strstr(err, "line too long (max ");
    if (!m)
        fail_msg("got \"%s\", want \"line too long (max N bytes)\"", err);
    int max = atoi(m + strlen("line too long (max "));
    assert_true(max > 10 && max < 250);

    char *text = malloc(128 + (size_t)max);
    assert_non_null(text);
    int head = snprintf(text, 64, "%s", CLUSTER "[server]\n");
    memset(text + head, 'x', (size_t)max);
    text[head] = ';';
    strcpy(text + head + max, "\nlog_level = warn\n");
    if (load_text(text, &c, path, err) != 0)
        fail_msg("a line of %d bytes: got \"%s\", want success", max, err);
    assert_int_equal(c.log_level, PSD_LOG_WARN);
    psd_config_destroy(&c);

    memset(text + head, 'x', (size_t)max + 1);
    text[head] = ';';
    strcpy(text + head + max + 1, "\nlog_level = warn\n");
    assert_int_equal(load_text(text, &c, path, err), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:4: line too long (max %d bytes)", path,
             max);
    assert_string_equal(err, want);
    free(text);
}

static void test_missing_file_is_reported_without_a_line(void **state)
{
    (void)state;
    psd_config c;
    char err[ERRLEN];
    const char *path = "/tmp/psd-test-config-does-not-exist.ini";
    assert_int_equal(psd_config_load(&c, path, err, sizeof err), -1);
    const char *want = "/tmp/psd-test-config-does-not-exist.ini: cannot open";
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("got \"%s\", want prefix \"%s\"", err, want);
    /* That error alone: no values of a file never read. */
    if (strchr(err, '\n'))
        fail_msg("more than the one error: %s", err);
    assert_null(c.nodes);
    psd_config_destroy(&c);
}

static void test_short_error_buffer_is_truncated_safely(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[8];
    write_temp(path, "[nope]\n", 7);
    assert_int_equal(psd_config_load(&c, path, err, sizeof err), -1);
    assert_int_equal(strlen(err), sizeof err - 1);
    assert_int_equal(psd_config_load(&c, path, NULL, 0), -1);
    unlink(path);
}

/* A file of one endless line (psd --check -c /dev/zero) is refused at
 * its first overlong line, not read for ever: the load runs in a child
 * that an alarm ends if it does not return. */
static void test_an_endless_line_is_refused_without_reading_on(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(30);
        psd_config c;
        char err[ERRLEN];
        int rc = psd_config_load(&c, "/dev/zero", err, sizeof err);
        _exit(rc && strstr(err, "/dev/zero:1: line too long (max ") ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("loading /dev/zero: %s %d", WIFSIGNALED(st)
                 ? "killed by signal (the alarm: it read on)" : "exit status",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* A file with several bad values says every one, each "PATH:LINE:" on a
 * line of its own in file order, so that it is fixed in one pass (it said
 * the first only: one run of psd --check per mistake); the cross checks
 * that need every value wait for them. Past 20 errors, one line says
 * there are more. */
static void test_every_bad_value_is_reported_at_its_line(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    const char *text = "[cluster]\n"                       /* 1 */
                       "nodes = 127.0.0.1:7070\n"           /* 2 */
                       "shards = x\n"                       /* 3 */
                       "workers = y\n"                      /* 4 */
                       "[server]\n"                         /* 5 */
                       "max_conections = 10\n"              /* 6 */
                       "fsync = q\n"                        /* 7 */
                       "heartbeat_ms = 1000\n"              /* 8 */
                       "peer_timeout_ms = 1000\n"           /* 9: cross */
                       "[table.t]\n"                        /* 10 */
                       "dim = 0\n"                          /* 11 */
                       "updater = z\n";                     /* 12 */
    assert_int_equal(load_text(text, &c, path, err), -1);
    const int lines[] = { 3, 4, 6, 7, 11, 12 };
    const char *at = err;
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
        char want[PATH_LEN + 16];
        snprintf(want, sizeof want, "%s%s:%d: ", k ? "\n" : "", path,
                 lines[k]);
        if (strncmp(at, want, strlen(want)) != 0)
            fail_msg("error %zu should begin \"%s\": %s", k, want, err);
        at = strchr(at + 1, '\n');
        if (!at && k + 1 < sizeof lines / sizeof lines[0])
            fail_msg("%zu errors, want %zu: %s", k + 1,
                     sizeof lines / sizeof lines[0], err);
    }
    if (at)
        fail_msg("more errors than the six bad values: %s", err);
    EXPECT_SUBSTR(err, "max_conections: unknown key (did you mean "
                  "max_connections?)", "the typo's hint");
    assert_null(c.tables);

    /* A dense table's missing rows is said beside a bad value of its
     * section (a newcomer's bad updater hid it until the next run). */
    char both[512];
    snprintf(both, sizeof both, "%s[table.d]\nkind = dense\ndim = 2\n"
             "updater = sgdd\n", CLUSTER);
    assert_int_equal(load_text(both, &c, path, err), -1);
    EXPECT_SUBSTR(err, "updater", "the bad value");
    EXPECT_SUBSTR(err, "[table.d] rows: required key missing (kind = dense)",
                  "the missing key, in the same run");

    /* 25 bad values: 20 said, then one line for the rest. */
    char many[2048];
    size_t n = (size_t)snprintf(many, sizeof many, "%s[table.t]\n", CLUSTER);
    for (int i = 0; i < 25; i++)
        n += (size_t)snprintf(many + n, sizeof many - n, "bogus%d = 1\n", i);
    assert_int_equal(load_text(many, &c, path, err), -1);
    int nl = 0;
    for (const char *q = err; (q = strchr(q, '\n')); q++)
        nl++;
    EXPECT_INT(nl, 20, "lines after the first");
    EXPECT_SUBSTR(err, "more errors than these 20", "the last line");
}

/* A line that does not parse, or a section header psd refuses, no longer
 * ends the read: the errors after it are said in the same run, all in
 * the order of their lines (the read's and the values' are found in two
 * passes). A refused section's keys are not read into the section before
 * it, nor a bad line's indented ones into the key before it. A byte
 * beyond ASCII is shown as \xNN (a zero-width space was invisible). */
static void test_structural_errors_do_not_hide_the_others(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    const char *text = "[cluster]\n"                       /* 1 */
                       "nodes = 127.0.0.1:7070\n"           /* 2 */
                       "[servr]\n"                          /* 3: bad */
                       "max_frame = 12Q\n"                  /* 4: skipped */
                       "[server]\n"                         /* 5 */
                       "log_level\n"                        /* 6: bad */
                       "  continued words\n"                /* 7: skipped */
                       "fsync = q\n"                        /* 8: bad */
                       "[table.bad name]\n"                 /* 9: bad */
                       "dim = 0\n"                          /* 10: skipped */
                       "[table.t]\n"                        /* 11 */
                       "dim = 4\n"                          /* 12 */
                       "learning_rate = 0.1\n"              /* 13: bad */
                       "kind = den\xe2\x80\x8bse\n";        /* 14: bad */
    assert_int_equal(load_text(text, &c, path, err), -1);
    const int lines[] = { 3, 6, 8, 9, 13, 14 };
    const size_t nlines = sizeof lines / sizeof lines[0];
    const char *at = err;
    for (size_t k = 0; k < nlines; k++) {
        char want[PATH_LEN + 16];
        snprintf(want, sizeof want, "%s%s:%d: ", k ? "\n" : "", path,
                 lines[k]);
        if (!at || strncmp(at, want, strlen(want)) != 0)
            fail_msg("error %zu should begin \"%s\": %s", k, want, err);
        at = strchr(at + 1, '\n');
    }
    if (at)
        fail_msg("more errors than the six: %s", err);
    EXPECT_SUBSTR(err, "unknown section [servr]", "the bad header");
    EXPECT_SUBSTR(err, "got \"log_level\"", "the bad line");
    EXPECT_SUBSTR(err, "fsync", "the value after the bad line");
    EXPECT_SUBSTR(err, "invalid table name", "the bad table header");
    EXPECT_SUBSTR(err, "learning_rate: unknown key (did you mean lr?)",
                  "another framework's name");
    EXPECT_SUBSTR(err, "got \"den\\xe2\\x80\\x8bse\"", "the escaped bytes");
    if (strstr(err, "max_frame") || strstr(err, "continued") ||
        strstr(err, "dim"))
        fail_msg("a skipped line was read: %s", err);
    assert_null(c.tables);

    /* Past 20 errors, the 20 shown are the first by line: 10 bad keys
     * (found by the value checks) above 15 bad lines (found by the read,
     * first) showed 5 of the keys and lines 15-29. */
    char many[2048];
    int m = snprintf(many, sizeof many, "%s[table.emb]\n", CLUSTER);
    for (int i = 1; i <= 10; i++)
        m += snprintf(many + m, sizeof many - (size_t)m, "dim%d = 1\n", i);
    m += snprintf(many + m, sizeof many - (size_t)m, "dim = 4\n");
    for (int i = 1; i <= 15; i++)
        m += snprintf(many + m, sizeof many - (size_t)m, "bad line %d\n", i);
    assert_int_equal(load_text(many, &c, path, err), -1);
    const char *q = err;
    for (int k = 0; k < 20; k++) {
        char want[PATH_LEN + 16];
        snprintf(want, sizeof want, "%s:%d: ", path, k < 10 ? 4 + k : 5 + k);
        if (strncmp(q, want, strlen(want)) != 0)
            fail_msg("error %d should begin \"%s\": %s", k, want, err);
        q = strchr(q, '\n') + 1;
    }
    EXPECT_SUBSTR(q, "more errors than these 20", "the last line");

    /* A line too long still ends the read there: nothing after it. */
    char longl[8192];
    int n = snprintf(longl, sizeof longl, "%s[server]\nlog_level = ",
                     CLUSTER);
    memset(longl + n, 'x', 5000);
    snprintf(longl + n + 5000, sizeof longl - (size_t)n - 5000,
             "\nfsync = q\n");
    assert_int_equal(load_text(longl, &c, path, err), -1);
    EXPECT_SUBSTR(err, "line too long", "the long line");
    if (strchr(err, '\n'))
        fail_msg("more than the long line said: %s", err);
}

/* Read on past a bad header, the file said more than was wrong, and
 * some of it secret (a hostile-ini trial): an indented line after a bad
 * header was taken by inih as a continuation of the key before the header
 * ("lr: ... got \"[table.b]\""); a misspelt [cluster] added a false "no
 * [cluster] section", listed first. And, as before today: a setting on a
 * header's line, a token line that reads as a header, or a token appended
 * to a file whose last line had no line break (joined to that value, and
 * in data_dir taken as part of the path: psd ran without authentication)
 * were quoted whole into the log and /metrics. */
static void test_a_read_on_past_errors_says_only_what_is_wrong(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN], text[512];
    static const char tok[] = "Oz1Hk3EG6oZUxO0zmSudiN8Byjva4p8jGhZRYfDrtoM=";
    assert_int_equal(load_text("[cluster]\nnodes = 127.0.0.1:7070\n"
                               "[table.a]\ndim = 4\nlr = 0.1\n[tabel.b]\n"
                               "  [table.b]\n  dim = 8\n", &c, path, err),
                     -1);
    char want[PATH_LEN + 120];
    snprintf(want, sizeof want, "%s:6: unknown section [tabel.b] (expected "
             "[cluster], [server] or [table.NAME])", path);
    EXPECT_STR(err, want, "the bad header alone (its indented header and "
               "key are a section of their own)");
    assert_int_equal(load_text("[clustr]\nnodes = 127.0.0.1:7070\n", &c, path,
                               err), -1);
    snprintf(want, sizeof want, "%s:1: unknown section [clustr] (expected "
             "[cluster], [server] or [table.NAME])", path);
    EXPECT_STR(err, want, "the misspelt header alone");
    static const char *const secret[] = {
        "[cluster]\nnodes = 127.0.0.1:7070\n[server] auth_token = %s\n",
        "[cluster]\nnodes = 127.0.0.1:7070\n[table.%s]\ndim = 1\n",
        "[cluster]\nnodes = 127.0.0.1:7070\n[%s]\n",
        ("[cluster]\nnodes = 127.0.0.1:7070\n[server]\nlog_level = "
         "infoauth_token = %s\n"),
        ("[cluster]\nnodes = 127.0.0.1:7070\n[server]\ndata_dir = "
         "/tmp/psd-test-dauth_token = %s\n"),
        ("[cluster]\nnodes = 127.0.0.1:7070\n[table.t]\ndim = 1\ninit = "
         "zerosauth_token=%s\n"),
    };
    static const char *const said[] = {
        "unexpected text after the section header (57 bytes, not shown",
        "invalid table name of 44 bytes (not shown",
        "unknown section name of 44 bytes (not shown",
        ("log_level: expected debug | info | warn | error, got 61 bytes "
         "holding \"auth_token =\" (a line appended to a file whose last "
         "line had no line break joins it"),
        ("data_dir: the path holds \"auth_token =\": a line appended to a "
         "file whose last line had no line break joins it"),
        "init: expected ",
    };
    for (size_t k = 0; k < sizeof secret / sizeof secret[0]; k++) {
        /* The token where the case has "%s". */
        const char *at = strstr(secret[k], "%s");
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - secret[k]),
                 secret[k], tok, at + 2);
        assert_int_equal(load_text(text, &c, path, err), -1);
        EXPECT_SUBSTR(err, said[k], "case %zu", k);
        if (strstr(err, "Oz1Hk3EG"))
            fail_msg("case %zu: the token quoted: %s", k, err);
    }
    /* The token written where auth_token_file's path goes: neither its
     * problem nor a note quotes it. */
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
             "[server]\nauth_token_file = %s\n", tok);
    load_ok(text, &c);
    psd_preflight pf;
    EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0) > 0, 1, "a problem");
    int unquoted = 0;
    for (int i = 0; i < pf.nproblems; i++) {
        unquoted |= strstr(pf.problems[i], "auth_token_file: a path of 44 bytes "
                       "that cannot be opened") != NULL;
        if (strstr(pf.problems[i], "Oz1Hk3EG"))
            fail_msg("the token quoted: %s", pf.problems[i]);
    }
    for (int i = 0; i < pf.nnotes; i++)
        if (strstr(pf.notes[i], "Oz1Hk3EG"))
            fail_msg("the token quoted: %s", pf.notes[i]);
    EXPECT_INT(unquoted, 1, "the problem, unquoted");
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
}

/* A FIFO as the ini or as the token file is refused at once: opening one
 * waited for a writer, and a SIGHUP read the file on psd's loop, which
 * froze every client (a hostile-input trial). The load runs in a child
 * that an alarm ends should it wait. */
static void test_a_fifo_is_refused_without_waiting(void **state)
{
    (void)state;
    char dir[] = "/tmp/psd-test-fifo-XXXXXX", fifo[64], ini[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/f", dir);
    snprintf(ini, sizeof ini, "%s/c.ini", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    FILE *f = fopen(ini, "w");
    assert_non_null(f);
    fprintf(f, "[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
            "auth_token_file = %s\n", fifo);
    fclose(f);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10);
        psd_config c;
        char err[ERRLEN];
        int ok = psd_config_load(&c, fifo, err, sizeof err) == -1 &&
                 strstr(err, "a FIFO or socket, not a file");
        psd_preflight pf;
        ok = ok && psd_config_load(&c, ini, err, sizeof err) == 0;
        ok = ok && psd_preflight_run(&pf, &c, "F", 0) > 0 &&
             strstr(pf.problems[0], "not a regular file");
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    unlink(fifo);
    unlink(ini);
    rmdir(dir);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("a FIFO: %s", WIFSIGNALED(st) ? "waited (killed by the "
                 "alarm)" : "not refused as it should be");
}

/* At most 8192 sections: each is checked against those before it, and
 * 100,000 of them took seconds. */
static void test_sections_beyond_the_limit_are_refused(void **state)
{
    (void)state;
    size_t cap = 64 + (size_t)(PSD_INI_SECTIONS_MAX + 1) * 24, at = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    at += (size_t)snprintf(text, cap, CLUSTER);
    for (int i = 0; i <= PSD_INI_SECTIONS_MAX; i++)
        at += (size_t)snprintf(text + at, cap - at, "[table.s%d]\n", i);
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    assert_int_equal(load_text(text, &c, path, err), -1);
    EXPECT_SUBSTR(err, "more than 8192 sections", "the reason");
    free(text);
}

/* Every table goes to each client in HELLO_OK, which clients refuse
 * beyond PSW_MAX_TABLES tables: a file with more would start a node that
 * nobody can connect to, so it is refused at the first table too many. */
static void test_tables_beyond_the_protocol_limit_are_refused(void **state)
{
    (void)state;
    size_t cap = 64 + (size_t)(PSW_MAX_TABLES + 1) * 32, at = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    at += (size_t)snprintf(text, cap, CLUSTER);
    for (int i = 0; i < PSW_MAX_TABLES; i++)
        at += (size_t)snprintf(text + at, cap - at, "[table.t%d]\ndim = 1\n",
                               i);
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    if (load_text(text, &c, path, err) != 0)
        fail_msg("%d tables: %s", PSW_MAX_TABLES, err);
    assert_int_equal(c.ntables, PSW_MAX_TABLES);
    psd_config_destroy(&c);
    snprintf(text + at, cap - at, "[table.extra]\ndim = 1\n");
    assert_int_equal(load_text(text, &c, path, err), -1);
    char want[128];
    snprintf(want, sizeof want, "%s:%d: [table.extra]: at most %d tables",
             path, 3 + 2 * PSW_MAX_TABLES, PSW_MAX_TABLES);
    if (!strstr(err, want))
        fail_msg("got \"%s\", want \"%s\"", err, want);
    free(text);
}

/* Form feed (an editor's page break) and vertical tab are white space,
 * not the control characters a binary file brings. */
static void test_page_breaks_and_tabs_are_white_space(void **state)
{
    (void)state;
    psd_config c;
    load_ok(EMB "\f\n[server]\n\tlog_level = warn\v\n", &c);
    EXPECT_INT(c.log_level, PSD_LOG_WARN, "log_level after a page break");
    psd_config_destroy(&c);
}

static void test_destroy_is_safe_on_a_zeroed_config(void **state)
{
    (void)state;
    psd_config c;
    memset(&c, 0, sizeof c);
    psd_config_destroy(&c);
    psd_config_destroy(&c);
    assert_null(c.nodes);
}

static void test_listen_gives_each_node_its_bind_address(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, [::1]:7071\n"
            "listen = 127.0.0.2:8070, [::1]:8071\n", &c);
    EXPECT_INT(c.nlisten, 2, "listen addresses");
    EXPECT_STR(c.listen[0].host, "127.0.0.2", "listen 0 host");
    EXPECT_INT(c.listen[0].port, 8070, "listen 0 port");
    EXPECT_STR(c.listen[1].host, "::1", "listen 1 host");
    EXPECT_STR(c.nodes[1].host, "::1", "node 1 host");
    EXPECT_INT(c.nodes[1].port, 7071, "node 1 port");
    psd_config_destroy(&c);
    load_ok(CLUSTER, &c);
    EXPECT_INT(c.nlisten, 0, "listen addresses when absent");
    psd_config_destroy(&c);
}

/* What bind_clashes must let through: the same port on other hosts, on
 * other addresses, or an IPv4 wildcard beside an IPv6 address. */
static void test_binds_that_do_not_clash_are_accepted(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = 10.0.0.1:7070, 10.0.0.2:7070\n"
            "listen = 0.0.0.0:7070, 0.0.0.0:7070\n[server]\n"
            "auth_token = 0123456789abcdef0123456789abcdef\n"
            "metrics_listen = 127.0.0.1:7071, 0.0.0.0:7071\n", &c);
    EXPECT_INT(c.nmetrics, 2, "metrics addresses");
    psd_config_destroy(&c);
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.2:7070\n[server]\n"
            "metrics_listen = 127.0.0.3:7070, [::1]:7070\n", &c);
    EXPECT_INT(c.nmetrics, 2, "metrics addresses");
    psd_config_destroy(&c);
    load_ok("[cluster]\nnodes = [::1]:7070\nlisten = 0.0.0.0:7070\n"
            "[server]\nauth_token = 0123456789abcdef0123456789abcdef\n"
            "metrics_listen = [::1]:7070\n", &c);
    EXPECT_INT(c.nlisten, 1, "listen addresses");
    psd_config_destroy(&c);
}

/* conf/psd.ini gives both defaults as "empty": written empty, they are
 * the default (as auth_token = is), not an error. */
static void test_empty_listen_and_metrics_listen_are_their_defaults(
    void **state)
{
    (void)state;
    psd_config c;
    load_ok(CLUSTER "listen =\n[server]\nmetrics_listen =\n", &c);
    EXPECT_INT(c.nnodes, 1, "nodes");
    EXPECT_INT(c.nlisten, 0, "listen addresses");
    EXPECT_INT(c.nmetrics, 0, "metrics addresses");
    psd_config_destroy(&c);
}

/* The README's own example: nodes on different hosts may bind the same
 * address (each on its host), for listen and metrics_listen alike. */
static void test_listen_may_repeat_an_address_across_hosts(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = ps-0.example:7070, ps-1.example:7070\n"
            "listen = 0.0.0.0:7070, 0.0.0.0:7070\n"
            "[server]\nmetrics_listen = 0.0.0.0:9470, 0.0.0.0:9470\n", &c);
    EXPECT_INT(c.nlisten, 2, "listen addresses");
    EXPECT_STR(c.listen[1].host, "0.0.0.0", "listen 1 host");
    EXPECT_INT(c.listen[1].port, 7070, "listen 1 port");
    EXPECT_INT(c.nmetrics, 2, "metrics addresses");
    psd_config_destroy(&c);
}

/* fsync = always without a journal: an operator who believes every
 * acknowledged push is on disk hears that it is not. */
static void test_fsync_always_without_a_journal_earns_a_note(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    assert_int_equal(load_text(EMB "[server]\nfsync = always\n", &c, path,
                               err), 0);
    EXPECT_INT(c.nnotes, 1, "notes");
    char want[PATH_LEN + 160];
    snprintf(want, sizeof want, "%s:6: [server] fsync = always has no "
             "effect unless durability = log (it is snapshot: pushes "
             "acknowledged since the last snapshot are lost in a crash)",
             path);
    EXPECT_SUBSTR(c.notes[0], want, "the note");
    psd_config_destroy(&c);
    load_ok(EMB "[server]\nfsync = always\ndurability = log\n", &c);
    EXPECT_INT(c.nnotes, 0, "notes with durability = log");
    psd_config_destroy(&c);
    load_ok(EMB "[server]\nfsync = everysec\n", &c);
    EXPECT_INT(c.nnotes, 0, "notes with the default fsync");
    psd_config_destroy(&c);
}

/* Fewer shards than nodes: the note names the nodes left without rows,
 * one or a range. */
static void test_fewer_shards_than_nodes_names_the_idle_nodes(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    static const char *const want[] = {
        "[cluster] shards: 1 shard for 2 nodes: node 1 holds no row of any "
        "table",
        "[cluster] shards: 2 shards for 4 nodes: nodes 2..3 hold no row of "
        "any table",
    };
    static const char *const text[] = {
        "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\nshards = 1\n"
        "[table.emb]\ndim = 4\n",
        "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071, 127.0.0.1:7072, "
        "127.0.0.1:7073\nshards = 2\n[table.emb]\ndim = 4\n",
    };
    for (int i = 0; i < 2; i++) {
        assert_int_equal(load_text(text[i], &c, path, err), 0);
        EXPECT_INT(c.nnotes, 1, "notes");
        char w[PATH_LEN + 160];
        snprintf(w, sizeof w, "%s:3: %s", path, want[i]);
        EXPECT_SUBSTR(c.notes[0], w, "the note");
        psd_config_destroy(&c);
    }
}

static void test_staleness_off_ssp_earns_a_note_with_its_line(void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    assert_int_equal(load_text(EMB "[server]\nlog_level = warn\n"
                               "[table.w]\nkind = dense\nrows = 4\n"
                               "dim = 2\nstaleness = 3\n", &c, path, err),
                     0);
    EXPECT_INT(c.nnotes, 1, "notes");
    char want[PATH_LEN + 128];
    snprintf(want, sizeof want, "%s:11: [table.w] staleness has no effect "
             "unless consistency = ssp (it is async)", path);
    EXPECT_SUBSTR(c.notes[0], want, "the note");
    psd_config_destroy(&c);
    load_ok(EMB "[table.w]\nkind = dense\nrows = 4\ndim = 2\n"
            "consistency = ssp\nstaleness = 3\n", &c);
    EXPECT_INT(c.nnotes, 0, "notes when consistency = ssp");
    psd_config_destroy(&c);
    load_ok(EMB, &c);
    EXPECT_INT(c.nnotes, 0, "notes when only defaults apply");
    psd_config_destroy(&c);
}

/* aggregate = mean averages only the sums of a bsp table: on an async or
 * ssp table pushes apply one by one, so it has no effect, and a user who
 * set it on an ssp table would silently get steps `workers` times larger
 * than meant. Like staleness off ssp, a note says so; aggregate = sum
 * (what such tables do anyway, and what conf/psd.ini spells out on its
 * async table) earns none. */
static void test_aggregate_mean_off_bsp_earns_a_note_with_its_line(
    void **state)
{
    (void)state;
    psd_config c;
    char path[PATH_LEN], err[ERRLEN];
    static const char *const modes[] = { "async", "ssp" };
    for (int i = 0; i < 2; i++) {
        char text[512];
        snprintf(text, sizeof text, EMB "[server]\nlog_level = warn\n"
                 "[table.w]\nkind = dense\nrows = 4\ndim = 2\n"
                 "consistency = %s\naggregate = mean\n", modes[i]);
        assert_int_equal(load_text(text, &c, path, err), 0);
        EXPECT_INT(c.nnotes, 1, "notes (%s)", modes[i]);
        char want[PATH_LEN + 128];
        snprintf(want, sizeof want, "%s:12: [table.w] aggregate = mean has "
                 "no effect unless consistency = bsp (it is %s)", path,
                 modes[i]);
        if (c.nnotes > 0)
            EXPECT_SUBSTR(c.notes[0], want, "the note");
        psd_config_destroy(&c);
    }
    load_ok(EMB "[table.w]\nkind = dense\nrows = 4\ndim = 2\n"
            "consistency = bsp\naggregate = mean\n", &c);
    EXPECT_INT(c.nnotes, 0, "notes when consistency = bsp");
    psd_config_destroy(&c);
    load_ok(EMB "[table.w]\nkind = dense\nrows = 4\ndim = 2\n"
            "aggregate = sum\n", &c);
    EXPECT_INT(c.nnotes, 0, "notes for aggregate = sum on an async table");
    psd_config_destroy(&c);
}

/* ---- the files in conf/ ------------------------------------------------- */

static void load_repo_file(const char *rel, psd_config *c)
{
    char path[512], err[ERRLEN];
    src_path(path, sizeof path, rel);
    if (psd_config_load(c, path, err, sizeof err) != 0)
        fail_msg("got \"%s\", want %s to parse (set PSD_SRC_DIR to the "
                 "source tree)", err, path);
}

static void test_repo_psd_ini_sets_every_setting_to_its_default(
    void **state)
{
    (void)state;
    psd_config c;
    load_repo_file("conf/psd.ini", &c);
    assert_int_equal(c.nnodes, 1);
    assert_string_equal(c.nodes[0].host, "127.0.0.1");
    assert_server_defaults(&c);
    assert_int_equal(c.ntables, 1);
    assert_string_equal(c.tables[0].name, "emb");
    assert_int_equal(c.tables[0].dim, 16);
    assert_table_defaults(&c.tables[0]);
    psd_config_destroy(&c);
}

/* Every setting of the schema (config.c's table) must appear at the start
 * of a line of psd.ini, set or commented out (listen, rows, staleness and
 * the token's file are not set in the example). */
static void test_repo_psd_ini_mentions_every_setting(void **state)
{
    (void)state;
    char path[512], line[512];
    int found[128] = { 0 }, n = 0;
    const char *key;
    while (psd_config_setting(n, NULL))
        n++;
    assert_true(n > 30 && n <= 128);
    src_path(path, sizeof path, "conf/psd.ini");
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s (set PSD_SRC_DIR)", path);
    while (fgets(line, sizeof line, f)) {
        const char *p = line[0] == ';' ? line + 1 : line;
        size_t len = strcspn(p, " =");
        for (int i = 0; (key = psd_config_setting(i, NULL)); i++)
            if (strlen(key) == len && strncmp(p, key, len) == 0 &&
                strchr(p, '='))
                found[i] = 1;
    }
    fclose(f);
    for (int i = 0; (key = psd_config_setting(i, NULL)); i++) {
        const char *sect;
        psd_config_setting(i, &sect);
        if (!found[i])
            fail_msg("conf/psd.ini: got no line for [%s] %s, want one", sect,
                     key);
    }
}

/* ---- what psd checks before it starts (preflight.c) ---------------------- */

/* Loads text (valid) and runs the preflight for node; returns the number
 * of problems, the first of them (or "") in first. The config is
 * destroyed; the token in force is copied to token. */
static int preflight_text(const char *text, int node, char *first,
                          size_t cap, char *token)
{
    psd_config c;
    load_ok(text, &c);
    psd_preflight pf;
    int n = psd_preflight_run(&pf, &c, "F", node);
    snprintf(first, cap, "%s", n ? pf.problems[0] : "");
    if (token)
        snprintf(token, 256, "%s", pf.token);
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
    return n;
}

/* A token file with the given mode and contents; its path goes to path. */
static void token_file(char *path, int mode, const char *contents)
{
    write_temp(path, contents, strlen(contents));
    assert_int_equal(chmod(path, (mode_t)mode), 0);
}

static void expect_problem(int n, const char *first, const char *phrase)
{
    if (n < 1 || !strstr(first, phrase))
        fail_msg("got %d problems (\"%s\"), want one with \"%s\"", n, first,
                 phrase);
}

static void test_private_token_file_is_read_without_its_newline(void **state)
{
    (void)state;
    char path[PATH_LEN], text[512], first[512], token[256];
    token_file(path, 0600, "0123456789abcdefXYZ\n");
    /* Every node (-1): node 0 alone would be bound, and 10.1.2.3 is not
     * this host's. */
    snprintf(text, sizeof text, "[cluster]\nnodes = 10.1.2.3:7070\n"
             "[server]\nauth_token_file = %s\n", path);
    int n = preflight_text(text, -1, first, sizeof first, token);
    unlink(path);
    if (n)
        fail_msg("got \"%s\", want no problem", first);
    assert_string_equal(token, "0123456789abcdefXYZ");
}

static void test_token_file_others_can_read_is_refused(void **state)
{
    (void)state;
    char path[PATH_LEN], text[512], first[512];
    token_file(path, 0644, "0123456789abcdefXYZ\n");
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
             "[server]\nauth_token_file = %s\n", path);
    int n = preflight_text(text, 0, first, sizeof first, NULL);
    expect_problem(n, first, "F:4: [server] auth_token_file: ");
    expect_problem(n, first, "group or others may access it (mode 0644)");
    expect_problem(n, first, "chmod 600");
    chmod(path, 0640);
    n = preflight_text(text, 0, first, sizeof first, NULL);
    unlink(path);
    expect_problem(n, first, "(mode 0640)");
}

/* A file of systemd's credentials folder for this service may show group
 * read: systemd grants the service's user access with an ACL where the
 * file system holds ACLs, and the ACL's mask shows as the group's bits.
 * Such a token was refused (0440). Group write, others' bits, a file in a
 * folder below it, a folder others may write (such as /tmp), and group
 * bits anywhere else still refuse it. */
static void test_token_file_of_systemd_credentials_may_show_group_read(
    void **state)
{
    (void)state;
    char dir[] = "/tmp/psd-test-creds-XXXXXX", path[PATH_LEN], sub[PATH_LEN],
         text[512], first[512], token[256], said2[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/token", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("0123456789abcdefXYZ\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0440), 0);
    snprintf(text, sizeof text, "[cluster]\nnodes = 10.1.2.3:7070\n"
             "[server]\nauth_token_file = %s\n", path);
    setenv("CREDENTIALS_DIRECTORY", dir, 1);
    int n = preflight_text(text, -1, first, sizeof first, token);
    static const struct {
        int mode, dir_mode;
        const char *says;
    } refused[] = {
        { 0460, 0700, "(mode 0460)" },       /* group write */
        { 0450, 0700, "(mode 0450)" },       /* group execute */
        { 0444, 0700, "(mode 0444)" },       /* others */
        { 0440, 0777, "(mode 0440)" },       /* a folder anyone may write */
        { 0440, 0755, "(mode 0440)" },       /* a folder others may read */
    };
    enum { NREFUSED = sizeof refused / sizeof refused[0] };
    int bad[NREFUSED];
    char said[NREFUSED][512];
    for (int k = 0; k < NREFUSED; k++) {
        chmod(path, (mode_t)refused[k].mode);
        chmod(dir, (mode_t)refused[k].dir_mode);
        bad[k] = preflight_text(text, -1, said[k], sizeof said[k], NULL);
    }
    chmod(path, 0440);
    chmod(dir, 0550);                        /* an ACL's mask on the folder */
    int masked = preflight_text(text, -1, said2, sizeof said2, NULL);
    chmod(dir, 0700);
    /* The folder systemd names is flat: not a file below it. */
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    char deeper[PATH_LEN + 8], text2[600];
    snprintf(deeper, sizeof deeper, "%s/token", sub);
    assert_int_equal(rename(path, deeper), 0);
    snprintf(text2, sizeof text2, "[cluster]\nnodes = 10.1.2.3:7070\n"
             "[server]\nauth_token_file = %s\n", deeper);
    int below = preflight_text(text2, -1, said2, sizeof said2, NULL);
    assert_int_equal(rename(deeper, path), 0);
    rmdir(sub);
    unsetenv("CREDENTIALS_DIRECTORY");
    char said3[512];
    int elsewhere = preflight_text(text, -1, said3, sizeof said3, NULL);
    unlink(path);
    rmdir(dir);
    if (n)
        fail_msg("got \"%s\", want no problem", first);
    assert_string_equal(token, "0123456789abcdefXYZ");
    EXPECT_INT(masked, 0, "a folder of mode 0550");
    for (int k = 0; k < NREFUSED; k++)
        expect_problem(bad[k], said[k], refused[k].says);
    /* A credential cannot be chmod'ed: what would be taken is said. */
    expect_problem(bad[NREFUSED - 1], said[NREFUSED - 1],
                   "(in $CREDENTIALS_DIRECTORY, group read alone is taken, "
                   "when that folder belongs to root or to this user");
    expect_problem(below, said2, "(mode 0440)");
    expect_problem(elsewhere, said3, "(mode 0440)");
}

static void test_token_file_missing_or_short_is_refused(void **state)
{
    (void)state;
    char path[PATH_LEN], text[512], first[512];
    token_file(path, 0600, "short\n");
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
             "[server]\nauth_token_file = %s\n", path);
    int n = preflight_text(text, 0, first, sizeof first, NULL);
    expect_problem(n, first, "a token must be 16..255 bytes, got 5");
    unlink(path);
    n = preflight_text(text, 0, first, sizeof first, NULL);
    expect_problem(n, first, "cannot open: No such file or directory");
}

/* psd --check reports everything that would stop psd from starting: a
 * data_dir that goes through a file can never be created (psd stopped
 * with "cannot create ...: Not a directory" after --check said OK). A
 * folder that is only missing, or that this user may not write, is not
 * a problem here: psd creates it, maybe as another user. */
static void test_data_dir_through_a_file_is_refused(void **state)
{
    (void)state;
    char path[PATH_LEN], text[512], first[512];
    write_temp(path, "x", 1);
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
             "[server]\ndata_dir = %s/sub\n", path);
    int n = preflight_text(text, 0, first, sizeof first, NULL);
    char want[160];
    snprintf(want, sizeof want, "F:4: [server] data_dir: %s is not a "
             "folder", path);
    expect_problem(n, first, want);
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
             "[server]\ndata_dir = %s\n", path);
    n = preflight_text(text, 0, first, sizeof first, NULL);
    unlink(path);
    expect_problem(n, first, want);
    n = preflight_text("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
                       "data_dir = /tmp/psd-test-no-such-dir/a/b\n", 0, first,
                       sizeof first, NULL);
    if (n)
        fail_msg("got \"%s\", want no problem: psd creates the folder",
                 first);
}

/* pf holds one note, which begins with want. */
static void expect_one_note(const psd_preflight *pf, const char *want)
{
    EXPECT_INT(pf->nnotes, 1, "notes");
    if (pf->nnotes < 1 || strncmp(pf->notes[0], want, strlen(want)) != 0)
        fail_msg("want the note \"%s...\", got \"%s\"", want,
                 pf->nnotes ? pf->notes[0] : "");
}

/* A relative data_dir is taken from the folder psd starts in, which the
 * ini does not say: the same file started elsewhere (systemd starts psd
 * in /) served an empty model without a word. A note, with the folder it
 * resolves to now; an absolute one earns none. */
static void test_relative_data_dir_earns_a_note(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
            "data_dir = psd-test-rel\n", &c);
    psd_preflight pf;
    EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
    char cwd[4096], want[4400];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "F:4: [server] data_dir: psd-test-rel is "
             "relative: psd takes it from the folder it starts in (here %s)",
             cwd);
    expect_one_note(&pf, want);
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
    load_ok("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
            "data_dir = /tmp/psd-test-abs\n", &c);
    psd_preflight_run(&pf, &c, "F", 0);
    EXPECT_INT(pf.nnotes, 0, "notes for an absolute data_dir");
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
    /* A quoted absolute path is relative: the quotes are part of it. */
    load_ok("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
            "data_dir = \"/tmp/psd-test-abs\"\n", &c);
    EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
    snprintf(want, sizeof want, "F:4: [server] data_dir: \"/tmp/psd-test-abs\" "
             "is relative (quotes are kept as part of the value: write it "
             "without them): psd takes it from the folder it starts in "
             "(here %s)", cwd);
    expect_one_note(&pf, want);
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
    /* So is a relative auth_token_file, which --check passed silently. */
    char tok[64];
    snprintf(tok, sizeof tok, "psd-test-token-%d", (int)getpid());
    FILE *f = fopen(tok, "w");
    assert_non_null(f);
    fputs("0123456789abcdef0123\n", f);
    fclose(f);
    assert_int_equal(chmod(tok, 0600), 0);
    char text[300];
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
             "[server]\ndata_dir = /tmp/psd-test-abs\n"
             "auth_token_file = %s\n", tok);
    load_ok(text, &c);
    EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
    snprintf(want, sizeof want, "F:5: [server] auth_token_file: %s is "
             "relative: psd and clients take it from the folder they start "
             "in (here %s)", tok, cwd);
    expect_one_note(&pf, want);
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
    unlink(tok);
}

/* A node port in the kernel's ephemeral range may be held by some
 * outgoing connection when psd starts (an operator's psd could not start
 * for one): a note at the line, for the nodes psd would bind; none for a
 * port below the range. */
/* Whether one of pf's problems holds text. */
static int has_problem(const psd_preflight *pf, const char *text)
{
    for (int k = 0; k < pf->nproblems; k++)
        if (strstr(pf->problems[k], text))
            return 1;
    return 0;
}

/* Every table keeps a record of each shard of the cluster before any row:
 * 65,535 shards of 4,096 tables are 44 GiB a node, which --check passed
 * and psd died of as it started (a trial: 100 such tables took 1.1 GB).
 * Eight nodes on loopback need eight times that here: a problem on any
 * host of today. 16 shards of the same tables are nothing to say. */
static void test_shards_of_many_tables_beyond_this_hosts_memory_are_a_problem(
    void **state)
{
    (void)state;
    size_t cap = 4096 * 48 + 512, at = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int shards = 65535; shards >= 16; shards = shards == 65535 ? 16 : 0) {
        at = (size_t)snprintf(text, cap, "[cluster]\nnodes = 127.0.0.1:7070");
        for (int i = 1; i < 8; i++)
            at += (size_t)snprintf(text + at, cap - at, ", 127.0.0.1:%d",
                                   7070 + i);
        at += (size_t)snprintf(text + at, cap - at, "\nshards = %d\n"
                               "[server]\ndata_dir = /tmp/psd-test-mem\n",
                               shards);
        for (int i = 0; i < 4096; i++)
            at += (size_t)snprintf(text + at, cap - at,
                                   "[table.t%d]\nkind = sparse\ndim = 4\n", i);
        assert_true(at < cap);
        psd_config c;
        load_ok(text, &c);
        psd_preflight pf;
        psd_preflight_run(&pf, &c, "F", -1);
        int said = has_problem(&pf, shards == 65535
                               ? "F:3: [cluster] shards: 65535 shards of "
                                 "4096 tables take 44.00 GiB on every node "
                                 "before any row (176 bytes a shard a table, "
                                 "its node's or not) (352.0 GiB for the 8 "
                                 "nodes on this host), more than the "
                               : "before any row");
        for (int i = 0; shards != 65535 && i < pf.nnotes; i++)
            said |= strstr(pf.notes[i], "before any row") != NULL;
        EXPECT_INT(said, shards == 65535, "the problem, with %d shards",
                   shards);
        psd_preflight_destroy(&pf);
        /* -n past the nodes (main.c says so): nothing read past them
         * (make sanitize saw a heap-buffer-overflow in here()). */
        psd_preflight_run(&pf, &c, "F", 8);
        psd_preflight_destroy(&pf);
        psd_config_destroy(&c);
    }
    free(text);
}

/* A sparse table's max_rows that this host's memory cannot hold is a
 * note: the node is killed before the table reaches it, where a push past
 * it would have been refused (PS_EFULL) with the node up. 2^50 rows of
 * dim 8 with adam, 124 bytes each with its key and slot: 124 PiB. A
 * max_rows that fits, or none (the default), says nothing. */
static void test_a_sparse_max_rows_beyond_this_hosts_memory_is_noted(
    void **state)
{
    (void)state;
    static const char *const rows[] = { "1125899906842624", "1000", "0" };
    for (int k = 0; k < 3; k++) {
        char text[512];
        snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:7070\n"
                 "[server]\ndata_dir = /tmp/psd-test-mem\n"
                 "[table.s]\nkind = sparse\ndim = 8\nupdater = adam\n"
                 "max_rows = %s\n", rows[k]);
        psd_config c;
        load_ok(text, &c);
        psd_preflight pf;
        EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
        int said = 0;
        for (int i = 0; i < pf.nnotes; i++)
            if (strstr(pf.notes[i], "max_rows lets")) {
                said = 1;
                if (!strstr(pf.notes[i], "F:5: [table.s]: max_rows lets the "
                            "sparse tables of node 0 grow to about "
                            "130023424.0 GiB with their optimizer state and "
                            "index (this one 130023424.0 GiB), beside 0.0 GiB "
                            "of dense rows: more than the "))
                    fail_msg("the note: %s", pf.notes[i]);
            }
        EXPECT_INT(said, k == 0, "the note, with max_rows = %s", rows[k]);
        psd_preflight_destroy(&pf);
        psd_config_destroy(&c);
    }
}

/* A dense table whose rows (all made at start, with their init) do not
 * fit this host's memory is a problem for the node that holds them: the
 * kernel killed psd while it filled them, without a word. 1.5 PiB
 * of adam rows over 2 nodes (and step counts): each node's share is
 * named. */
static void test_dense_rows_beyond_this_hosts_memory_are_a_problem(
    void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
            "[server]\ndata_dir = /tmp/psd-test-mem\n"
            "[table.small]\nkind = dense\nrows = 10\ndim = 1\n"
            "[table.huge]\nkind = dense\nrows = 4398046511104\ndim = 32\n"
            "updater = adam\n", &c);
    psd_preflight pf;
    EXPECT_INT(psd_preflight_run(&pf, &c, "F", 1), 1, "problems");
    /* Node 1 is on a loopback address, as node 0: both run here, and
     * -n 1 counts both (checked node by node, each passed alone). */
    const char *want = "F:9: [table.huge]: the 2 nodes on this host "
                       "(loopback): their rows of dense tables need "
                       "1589248.0 GiB with their optimizer state (this one "
                       "1589248.0 GiB), more than the ";
    if (pf.nproblems < 1 || strncmp(pf.problems[0], want, strlen(want)))
        fail_msg("want \"%s...\", got: %s", want,
                 pf.nproblems ? pf.problems[0] : "");
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
    /* A node on another host (a name that does not resolve here) is
     * counted alone, for -n, and without -n only node 0 is here. */
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, ps-b.invalid:7071\n"
            "[server]\ndata_dir = /tmp/psd-test-mem\n"
            "[table.small]\nkind = dense\nrows = 10\ndim = 1\n"
            "[table.huge]\nkind = dense\nrows = 4398046511104\ndim = 32\n"
            "updater = adam\n", &c);
    want = "F:9: [table.huge]: node 0's rows of dense tables need 794624.0 "
           "GiB with their optimizer state (this one 794624.0 GiB), more "
           "than the ";
    for (int node = 0; node >= -1; node--) {
        psd_preflight_run(&pf, &c, "F", node);
        if (!has_problem(&pf, want))
            fail_msg("-n %d: want \"%s...\" among %d problems", node, want,
                     pf.nproblems);
        psd_preflight_destroy(&pf);
    }
    psd_config_destroy(&c);
    /* listen = 0.0.0.0 says nothing of the host; the nodes line does. */
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
            "listen = 0.0.0.0:7070, 0.0.0.0:7071\n"
            "[server]\ndata_dir = /tmp/psd-test-mem\n"
            "auth_token = 0123456789abcdef0123456789abcdef\n"
            "[table.small]\nkind = dense\nrows = 10\ndim = 1\n"
            "[table.huge]\nkind = dense\nrows = 4398046511104\ndim = 32\n"
            "updater = adam\n", &c);
    psd_preflight_run(&pf, &c, "F", -1);
    if (!has_problem(&pf, "F:11: [table.huge]: the 2 nodes on this host"))
        fail_msg("listen = 0.0.0.0: the two nodes not counted: %s",
                 pf.nproblems ? pf.problems[0] : "");
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
}

/* Each node is its own process under its own address-space limit
 * (ulimit -v, a unit's LimitAS=): a node whose dense rows need more was
 * passed by --check and then stopped at start with "table 'huge': out of
 * memory". The check runs in a child under a 1 GiB limit (a sanitizer's
 * shadow memory cannot live under one: skipped there). */
#if !defined(__SANITIZE_ADDRESS__)
/* The address space problem psd_preflight_run finds for config c in a
 * child under a 1 GiB limit, into got ("(no problem)" when none). */
static void problem_under_1_gib(const psd_config *c, char *got, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct rlimit as = { 1ull << 30, 1ull << 30 };
        psd_preflight pf;
        int rc = setrlimit(RLIMIT_AS, &as) ? -1
                 : psd_preflight_run(&pf, c, "F", 0);
        char out[1024] = "setrlimit failed";
        /* The problem among any others (a small host's memory). */
        for (int k = 0; rc >= 0 && k < pf.nproblems; k++)
            if (strstr(pf.problems[k], "address space") || k == 0)
                snprintf(out, sizeof out, "%s", pf.problems[k]);
        if (rc == 0)
            snprintf(out, sizeof out, "(no problem)");
        (void)!write(fds[1], out, strlen(out));
        _exit(0);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], got, cap - 1);
    got[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
}
#endif

static void test_dense_rows_beyond_the_address_space_limit_are_a_problem(
    void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    skip();
#else
    psd_config c;
    /* 2 GiB of rows on node 0, with its sum state (none). */
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
            "[server]\ndata_dir = /tmp/psd-test-as\n"
            "[table.small]\nkind = dense\nrows = 10\ndim = 1\n"
            "[table.huge]\nkind = dense\nrows = 2097152\ndim = 512\n", &c);
    char got[1024] = "";
    problem_under_1_gib(&c, got, sizeof got);
    const char *want = "F:9: [table.huge]: node 0's rows of dense tables "
                       "need 2.00 GiB with their optimizer state, more than "
                       "the 1.00 GiB of address space a process may have "
                       "here (ulimit -v; LimitAS= in a unit)";
    if (strncmp(got, want, strlen(want)))
        fail_msg("want \"%s...\", got: %s", want, got);
    /* Without the limit (main lifted this runner's soft one), the same
     * file has no such problem. */
    struct rlimit mine;
    if (getrlimit(RLIMIT_AS, &mine) == 0 && mine.rlim_cur == RLIM_INFINITY) {
        psd_preflight pf;
        psd_preflight_run(&pf, &c, "F", 0);
        if (has_problem(&pf, "address space"))
            fail_msg("no limit, yet: %s", pf.problems[0]);
        psd_preflight_destroy(&pf);
    }
    psd_config_destroy(&c);
    /* 0.98 GiB on node 0 fit the limit alone, passed, and the start
     * failed (the memory trial): psd's own 64 MiB count too. */
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
            "[server]\ndata_dir = /tmp/psd-test-as\n"
            "[table.small]\nkind = dense\nrows = 10\ndim = 1\n"
            "[table.huge]\nkind = dense\nrows = 1024000\ndim = 512\n", &c);
    problem_under_1_gib(&c, got, sizeof got);
    if (!strstr(got, "[table.huge]: node 0's rows of dense tables need "
                     "0.98 GiB") || !strstr(got, "less psd's own 64 MiB"))
        fail_msg("0.98 GiB under 1 GiB: %s", got);
    psd_config_destroy(&c);
#endif
}

static void test_a_port_in_the_ephemeral_range_earns_a_note(void **state)
{
    (void)state;
    unsigned lo = 0, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (!f || fscanf(f, "%u %u", &lo, &hi) != 2 || lo < 1025 || hi < lo) {
        if (f)
            fclose(f);
        skip();
    }
    fclose(f);
    char text[256];
    snprintf(text, sizeof text, "[cluster]\nnodes = 127.0.0.1:%u, "
             "127.0.0.1:%u\n[server]\ndata_dir = /tmp/psd-test-eph\n", hi,
             lo - 1);
    psd_config c;
    load_ok(text, &c);
    psd_preflight pf;
    EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
    char want[128];
    snprintf(want, sizeof want, "F:2: [cluster] nodes: node 0's port %u is "
             "in this host's ephemeral range (%u-%u", hi, lo, hi);
    if (pf.nnotes < 1 || strncmp(pf.notes[0], want, strlen(want)) != 0)
        fail_msg("want the note \"%s...\", got %d notes: \"%s\"", want,
                 pf.nnotes, pf.nnotes ? pf.notes[0] : "");
    EXPECT_INT(pf.nnotes, 1, "notes (node 0 only: -n 0)");
    psd_preflight_destroy(&pf);
    psd_preflight_run(&pf, &c, "F", 1);
    EXPECT_INT(pf.nnotes, 0, "notes for node 1, below the range");
    psd_preflight_destroy(&pf);
    /* Without -n, the nodes on a loopback address run here: node 0's
     * port is noted too (plain --check said nothing). */
    psd_preflight_run(&pf, &c, "F", -1);
    EXPECT_INT(pf.nnotes, 1, "notes without -n");
    if (pf.nnotes < 1 || strncmp(pf.notes[0], want, strlen(want)) != 0)
        fail_msg("without -n, want the note \"%s...\", got \"%s\"", want,
                 pf.nnotes ? pf.notes[0] : "");
    psd_preflight_destroy(&pf);
    psd_config_destroy(&c);
}

/* Fewer shards than nodes leaves nodes that hold nothing, yet clients
 * need them all to open the cluster: a note at the shards line. */
static void test_fewer_shards_than_nodes_earns_a_note(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071, "
            "127.0.0.1:7072\nshards = 1\n", &c);
    EXPECT_INT(c.nnotes, 1, "notes");
    if (c.nnotes < 1 || !strstr(c.notes[0], ":3: [cluster] shards: 1 shard "
                                "for 3 nodes: nodes 1..2 hold no row"))
        fail_msg("got \"%s\"", c.nnotes ? c.notes[0] : "");
    psd_config_destroy(&c);
    load_ok("[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
            "shards = 2\n", &c);
    EXPECT_INT(c.nnotes, 0, "notes with as many shards as nodes");
    psd_config_destroy(&c);
}

/* A worker_grace shorter than a node's restart and its workers'
 * reconnection lets the first worker back end a bsp clock alone (with
 * aggregate = mean, its push counted W times on that node, for good: a
 * trial with grace 0 and 8 workers). Noted with bsp tables and several
 * workers only. */
static void test_a_short_worker_grace_with_bsp_earns_a_note(void **state)
{
    (void)state;
    static const char *const files[4] = {
        "[cluster]\nnodes = 127.0.0.1:7070\nworkers = 8\n"
        "worker_grace = 0\n[table.t]\ndim = 1\nconsistency = bsp\n"
        "aggregate = mean\n",
        "[cluster]\nnodes = 127.0.0.1:7070\nworkers = 8\n"
        "worker_grace = 5\n[table.t]\ndim = 1\nconsistency = bsp\n",
        "[cluster]\nnodes = 127.0.0.1:7070\nworkers = 8\n"
        "worker_grace = 0\n[table.t]\ndim = 1\n",
        "[cluster]\nnodes = 127.0.0.1:7070\nworkers = 1\n"
        "worker_grace = 0\n[table.t]\ndim = 1\nconsistency = bsp\n" };
    for (int k = 0; k < 4; k++) {
        psd_config c;
        load_ok(files[k], &c);
        int said = 0;
        for (int i = 0; i < c.nnotes; i++)
            said |= strstr(c.notes[i], k ? "worker_grace = "
                                         : ":4: [cluster] worker_grace = 0 "
                                           "with bsp tables and 8 workers: "
                                           "a node restarted") != NULL;
        EXPECT_INT(said, k == 0, "the note, file %d", k);
        psd_config_destroy(&c);
    }
}

static void test_network_address_without_token_is_refused_with_a_fix(
    void **state)
{
    (void)state;
    char first[512];
    int n = preflight_text("[cluster]\nnodes = 127.0.0.1:7070, "
                           "10.1.2.3:7071\n", -1, first, sizeof first, NULL);
    expect_problem(n, first, "F:2: [cluster] nodes: node 1 would listen on "
                   "10.1.2.3:7071, which is not a loopback address");
    expect_problem(n, first, "Set auth_token_file (or auth_token)");
    /* listen is what is bound. */
    n = preflight_text("[cluster]\nnodes = 10.1.2.3:7070\n"
                       "listen = 0.0.0.0:7070\n", 0, first, sizeof first,
                       NULL);
    expect_problem(n, first, "F:3: [cluster] listen: node 0 would listen on "
                   "0.0.0.0:7070");
    n = preflight_text("[cluster]\nnodes = 10.1.2.3:7070\n"
                       "listen = 127.0.0.1:7070\n", 0, first, sizeof first,
                       NULL);
    if (n)
        fail_msg("got \"%s\", want no problem: only loopback is bound", first);
    n = preflight_text("[cluster]\nnodes = 10.1.2.3:7070\n[server]\n"
                       "auth_token = 0123456789abcdef\n", -1, first,
                       sizeof first, NULL);
    if (n)
        fail_msg("got \"%s\", want no problem: there is a token", first);
    /* Node 0 is started here: it must bind 10.1.2.3, which this host
     * does not have (psd failed at start, --check -n said OK). */
    n = preflight_text("[cluster]\nnodes = 10.1.2.3:7070\n[server]\n"
                       "auth_token = 0123456789abcdef\n", 0, first,
                       sizeof first, NULL);
    expect_problem(n, first, "F:2: [cluster] nodes: node 0 cannot listen on "
                   "10.1.2.3:7070: it is not an address of this host");
    /* /metrics answers without a token: off loopback without one, it was
     * served to the network, data folder, tables and all. */
    n = preflight_text("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
                       "metrics_listen = 0.0.0.0:9470\n", 0, first,
                       sizeof first, NULL);
    expect_problem(n, first, "F:4: [server] metrics_listen: node 0 would "
                   "serve /metrics on 0.0.0.0:9470, which is not a loopback "
                   "address, and [server] has no auth_token");
    n = preflight_text("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
                       "metrics_listen = 127.0.0.1:9470\n", 0, first,
                       sizeof first, NULL);
    if (n)
        fail_msg("got \"%s\", want no problem: /metrics on loopback", first);
    psd_config c;
    load_ok("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
            "metrics_listen = 0.0.0.0:9470\n"
            "auth_token = 0123456789abcdef\n", &c);
    psd_preflight pf;
    /* Of node 0 (psd's start, --check -n 0), and of every node (plain
     * --check, which said nothing of it). */
    for (int node = 0; node >= -1; node--) {
        EXPECT_INT(psd_preflight_run(&pf, &c, "F", node), 0,
                   "problems with a token (node %d)", node);
        int said = 0;
        for (int i = 0; i < pf.nnotes; i++)
            said |= strstr(pf.notes[i], "serves /metrics on 0.0.0.0:9470 "
                           "without authentication") != NULL;
        EXPECT_INT(said, 1, "a note that /metrics is open to the network "
                   "(node %d)", node);
        psd_preflight_destroy(&pf);
    }
    psd_config_destroy(&c);
    n = preflight_text("[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
                       "metrics_listen = 0.0.0.0:9470\n", -1, first,
                       sizeof first, NULL);
    expect_problem(n, first, "F:4: [server] metrics_listen: node 0 would "
                   "serve /metrics on 0.0.0.0:9470, which is not a loopback "
                   "address, and [server] has no auth_token");
}

/* max_remembered_pushes beyond what this host could hold is noted (17
 * billion pushes, up to 4.5 TiB, passed with no word); the default is
 * not. */
static void test_remembered_pushes_beyond_this_host_are_noted(void **state)
{
    (void)state;
    static const char *const files[2] = {
        "[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
        "max_remembered_pushes = 17179869184\n",
        "[cluster]\nnodes = 127.0.0.1:7070\n" };
    for (int k = 0; k < 2; k++) {
        psd_config c;
        load_ok(files[k], &c);
        psd_preflight pf;
        EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
        int said = 0;
        for (int i = 0; i < pf.nnotes; i++)
            said |= strstr(pf.notes[i], "max_remembered_pushes = "
                           "17179869184: remembering that many pushes could "
                           "take up to 4608.0 GiB") != NULL;
        EXPECT_INT(said, k == 0, "a note of max_remembered_pushes (%s)",
                   k ? "default" : "17179869184");
        psd_preflight_destroy(&pf);
        psd_config_destroy(&c);
    }
    /* Fewer than max_connections: clients idle after a push could hold
     * them all (a trial: at 1, two of three clients were refused every
     * round). As many as max_connections is not noted. */
    for (int k = 0; k < 2; k++) {
        psd_config c;
        load_ok(k ? "[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
                    "max_remembered_pushes = 64\nmax_connections = 64\n"
                  : "[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
                    "max_remembered_pushes = 63\nmax_connections = 64\n",
                &c);
        psd_preflight pf;
        EXPECT_INT(psd_preflight_run(&pf, &c, "F", 0), 0, "problems");
        int said = 0;
        for (int i = 0; i < pf.nnotes; i++)
            said |= strstr(pf.notes[i], k ? "is below max_connections"
                                          : "max_remembered_pushes = 63 is "
                                            "below max_connections (64): "
                                            "each client's pushes stay "
                                            "remembered until its next "
                                            "frame") != NULL;
        EXPECT_INT(said, k == 0, "the note of max_remembered_pushes %d",
                   63 + k);
        psd_preflight_destroy(&pf);
        psd_config_destroy(&c);
    }
}

static void test_host_names_resolve_or_are_reported(void **state)
{
    (void)state;
    char first[512];
    /* localhost resolves to a loopback address. */
    int n = preflight_text("[cluster]\nnodes = localhost:7070\n", 0, first,
                           sizeof first, NULL);
    if (n)
        fail_msg("got \"%s\", want localhost to pass", first);
    /* .invalid never resolves (RFC 6761). */
    n = preflight_text("[cluster]\nnodes = localhost:7070, "
                       "ps-1.invalid:7071\n", 1, first, sizeof first, NULL);
    expect_problem(n, first, "F:2: [cluster] nodes: node 1's address "
                   "ps-1.invalid:7071 does not resolve");
    /* Node 0 only binds its own address: another node's name that does
     * not resolve here is a note, not a reason to refuse. */
    n = preflight_text("[cluster]\nnodes = localhost:7070, "
                       "ps-1.invalid:7071\n", 0, first, sizeof first, NULL);
    if (n)
        fail_msg("got \"%s\", want node 0 to start", first);
}

static void test_host_names_are_kept_as_written(void **state)
{
    (void)state;
    psd_config c;
    load_ok("[cluster]\nnodes = ps-0.Example:7070, [::1]:7071, "
            "10.0.0.2:7072\n[server]\nauth_token = 0123456789abcdef\n", &c);
    assert_int_equal(c.nnodes, 3);
    assert_string_equal(c.nodes[0].host, "ps-0.Example");
    EXPECT_INT(c.nodes[0].kind, PSW_HOST_NAME, "kind of a name");
    EXPECT_INT(c.nodes[1].kind, PSW_HOST_IPV6, "kind of [::1]");
    EXPECT_INT(c.nodes[2].kind, PSW_HOST_IPV4, "kind of 10.0.0.2");
    EXPECT_INT(c.nodes_line, 2, "line of nodes");
    EXPECT_INT(c.auth_token_line, 4, "line of auth_token");
    assert_string_equal(c.auth_token, "0123456789abcdef");
    psd_config_destroy(&c);
}

static void test_repo_cluster_2_ini_parses_with_its_tables(void **state)
{
    (void)state;
    psd_config c;
    load_repo_file("conf/cluster-2.ini", &c);
    assert_int_equal(c.nnodes, 2);
    assert_int_equal(c.nodes[0].port, 7070);
    assert_int_equal(c.nodes[1].port, 7071);
    assert_int_equal(c.shards, 16);
    assert_int_equal(c.workers, 2);
    assert_string_equal(c.data_dir, "/tmp/psd-demo");
    /* Tables keep the file's order: fashion, then emb. */
    assert_int_equal(c.ntables, 2);
    assert_string_equal(c.tables[0].name, "fashion");
    assert_string_equal(c.tables[1].name, "emb");
    const psd_table_conf *t = &c.tables[0];
    assert_int_equal(t->dense, 1);
    assert_int_equal(t->rows, 785);
    assert_int_equal(t->dim, 10);
    assert_int_equal(t->upd.kind, PSD_UPD_SGD);
    assert_float_eq(t->upd.lr, 0.1f, "fashion lr");
    assert_int_equal(t->init.kind, PSD_INIT_ZEROS);
    t = &c.tables[1];
    assert_int_equal(t->dense, 0);
    assert_int_equal(t->dim, 16);
    assert_int_equal(t->upd.kind, PSD_UPD_ADAGRAD);
    assert_float_eq(t->upd.lr, 0.05f, "emb lr");
    assert_int_equal(t->init.kind, PSD_INIT_UNIFORM);
    assert_float_eq(t->init.a, -0.01f, "emb LO");
    assert_float_eq(t->init.b, 0.01f, "emb HI");
    assert_int_equal(t->init.seed, 7);
    psd_config_destroy(&c);
}

int main(void)
{
    /* The memory checks hold a node's rows to this process's address
     * space limit: a runner under `ulimit -v` (soft) would add that
     * problem to every test of them. Lifted as far as the hard limit. */
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != as.rlim_max) {
        as.rlim_cur = as.rlim_max;
        (void)setrlimit(RLIMIT_AS, &as);
    }
    const struct CMUnitTest valid[] = {
        cmocka_unit_test(test_design_example_with_ssp_parses_with_its_values),
        cmocka_unit_test(test_defaults_fill_every_absent_key),
        cmocka_unit_test(test_file_without_tables_is_valid),
        cmocka_unit_test(test_key_and_section_order_does_not_matter),
        cmocka_unit_test(test_sizes_take_1024_based_suffixes),
        cmocka_unit_test(test_range_boundaries_are_accepted),
        cmocka_unit_test(test_init_forms_parse),
        cmocka_unit_test(test_hyper_parameters_of_other_updaters_are_accepted),
        cmocka_unit_test(test_design_example_verbatim_parses),
        cmocka_unit_test(test_staleness_on_an_ssp_table_is_accepted),
        cmocka_unit_test(test_nodes_continue_on_indented_lines),
        cmocka_unit_test(test_ipv6_nodes_are_parsed_and_normalised),
        cmocka_unit_test(test_table_name_of_63_characters_is_kept_whole),
        cmocka_unit_test(test_comments_crlf_and_bom_are_accepted),
        cmocka_unit_test(test_line_limit_is_exact),
        cmocka_unit_test(test_missing_file_is_reported_without_a_line),
        cmocka_unit_test(test_short_error_buffer_is_truncated_safely),
        cmocka_unit_test(test_structural_errors_do_not_hide_the_others),
        cmocka_unit_test(test_a_read_on_past_errors_says_only_what_is_wrong),
        cmocka_unit_test(test_destroy_is_safe_on_a_zeroed_config),
        cmocka_unit_test(test_page_breaks_and_tabs_are_white_space),
        cmocka_unit_test(test_tables_beyond_the_protocol_limit_are_refused),
        cmocka_unit_test(test_every_bad_value_is_reported_at_its_line),
        cmocka_unit_test(test_a_fifo_is_refused_without_waiting),
        cmocka_unit_test(test_sections_beyond_the_limit_are_refused),
        cmocka_unit_test(test_an_endless_line_is_refused_without_reading_on),
        cmocka_unit_test(
            test_staleness_off_ssp_earns_a_note_with_its_line),
        cmocka_unit_test(test_fewer_shards_than_nodes_names_the_idle_nodes),
        cmocka_unit_test(test_fsync_always_without_a_journal_earns_a_note),
        cmocka_unit_test(
            test_aggregate_mean_off_bsp_earns_a_note_with_its_line),
        cmocka_unit_test(test_listen_gives_each_node_its_bind_address),
        cmocka_unit_test(test_binds_that_do_not_clash_are_accepted),
        cmocka_unit_test(test_listen_may_repeat_an_address_across_hosts),
        cmocka_unit_test(
            test_empty_listen_and_metrics_listen_are_their_defaults),
        cmocka_unit_test(test_repo_psd_ini_sets_every_setting_to_its_default),
        cmocka_unit_test(test_repo_psd_ini_mentions_every_setting),
        cmocka_unit_test(test_repo_cluster_2_ini_parses_with_its_tables),
        cmocka_unit_test(test_host_names_are_kept_as_written),
        cmocka_unit_test(test_private_token_file_is_read_without_its_newline),
        cmocka_unit_test(test_token_file_others_can_read_is_refused),
        cmocka_unit_test(
            test_token_file_of_systemd_credentials_may_show_group_read),
        cmocka_unit_test(test_token_file_missing_or_short_is_refused),
        cmocka_unit_test(test_data_dir_through_a_file_is_refused),
        cmocka_unit_test(test_relative_data_dir_earns_a_note),
        cmocka_unit_test(test_fewer_shards_than_nodes_earns_a_note),
        cmocka_unit_test(test_a_short_worker_grace_with_bsp_earns_a_note),
        cmocka_unit_test(test_a_port_in_the_ephemeral_range_earns_a_note),
        cmocka_unit_test(
            test_dense_rows_beyond_this_hosts_memory_are_a_problem),
        cmocka_unit_test(
            test_a_sparse_max_rows_beyond_this_hosts_memory_is_noted),
        cmocka_unit_test(
            test_shards_of_many_tables_beyond_this_hosts_memory_are_a_problem),
        cmocka_unit_test(
            test_dense_rows_beyond_the_address_space_limit_are_a_problem),
        cmocka_unit_test(
            test_network_address_without_token_is_refused_with_a_fix),
        cmocka_unit_test(test_host_names_resolve_or_are_reported),
        cmocka_unit_test(test_remembered_pushes_beyond_this_host_are_noted),
    };
    struct CMUnitTest errors[NERROR_CASES];
    for (size_t i = 0; i < NERROR_CASES; i++) {
        memset(&errors[i], 0, sizeof errors[i]);
        errors[i].name = error_cases[i].name;
        errors[i].test_func = run_error_case;
        errors[i].initial_state = (void *)&error_cases[i];
    }
    int failed = cmocka_run_group_tests_name("config: valid files", valid,
                                             NULL, NULL);
    failed += cmocka_run_group_tests_name("config: errors", errors, NULL,
                                          NULL);
    int total = (int)(sizeof valid / sizeof valid[0] + NERROR_CASES);
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed;
}
