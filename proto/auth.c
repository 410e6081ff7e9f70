/* The handshake's shared computations and token files; see auth.h. */
#define _XOPEN_SOURCE 700        /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "auth.h"

/* Both labels have the same length, so the transcript layout is fixed. */
static const char label_client[] = "psd v3 client proof";
static const char label_server[] = "psd v3 server proof";
_Static_assert(sizeof label_client == sizeof label_server, "labels");

int psw_auth_init(void)
{
    return sodium_init() < 0 ? -1 : 0;
}

void psw_auth_nonce(uint8_t out[PSW_NONCE_LEN])
{
    randombytes_buf(out, PSW_NONCE_LEN);
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

void psw_auth_proof(const char *token, size_t len, int role,
                    const psw_transcript *t, uint8_t out[PSW_PROOF_LEN])
{
    /* label, version u32, client_id u64, incarnation u64, worker i32,
     * node_index i32, cnonce, snonce: all integers big-endian. */
    uint8_t m[sizeof label_client - 1 + 4 + 8 + 8 + 4 + 4 +
              2 * PSW_NONCE_LEN];
    size_t at = sizeof label_client - 1;
    memcpy(m, role == PSW_ROLE_SERVER ? label_server : label_client, at);
    put_be(m + at, t->version, 4), at += 4;
    put_be(m + at, t->client_id, 8), at += 8;
    put_be(m + at, t->incarnation, 8), at += 8;
    put_be(m + at, (uint32_t)t->worker, 4), at += 4;
    put_be(m + at, (uint32_t)t->node_index, 4), at += 4;
    memcpy(m + at, t->cnonce, PSW_NONCE_LEN), at += PSW_NONCE_LEN;
    memcpy(m + at, t->snonce, PSW_NONCE_LEN), at += PSW_NONCE_LEN;
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, (const unsigned char *)token, len);
    crypto_auth_hmacsha256_update(&st, m, at);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof st);
}

int psw_auth_verify(const char *token, size_t len, int role,
                    const psw_transcript *t, const void *proof, size_t n)
{
    uint8_t want[PSW_PROOF_LEN];
    if (n != PSW_PROOF_LEN || !proof)
        return -1;
    psw_auth_proof(token, len, role, t, want);
    int rc = sodium_memcmp(want, proof, PSW_PROOF_LEN) == 0 ? 0 : -1;
    sodium_memzero(want, sizeof want);
    return rc;
}

int psw_token_check(const char *token, size_t len, char *why, size_t whylen)
{
    if (len < PSW_AUTH_TOKEN_MIN || len > PSW_AUTH_TOKEN_MAX) {
        snprintf(why, whylen, "a token must be %d..%d bytes, got %zu (make "
                 "one with: head -c 32 /dev/urandom | base64)",
                 PSW_AUTH_TOKEN_MIN, PSW_AUTH_TOKEN_MAX, len);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if (token[i] == '\0' || token[i] == '\n' || token[i] == '\r') {
            snprintf(why, whylen, "a token may not hold NUL or line breaks "
                     "(byte %zu)", i);
            return -1;
        }
    return 0;
}

size_t psw_token_trim(const char *token, size_t len)
{
    size_t n = len;
    if (n && token[n - 1] == '\n')
        n--;
    if (n && token[n - 1] == '\r')
        n--;
    return n ? n : len;
}

/* Whether the file opened (st) is one of the credentials folder systemd
 * gave this service (LoadCredential=, $CREDENTIALS_DIRECTORY). systemd
 * gives the service's user access to those files with an ACL where the
 * file system holds ACLs (tmpfs), and the ACL's mask shows in the mode as
 * the group's bits (0440). Such group bits say nothing about who else may
 * read the token when the folder is the service's alone, so that is
 * checked too: the file directly in it (systemd's folder is flat), the
 * folder owned by root or by this user, closed to others and writable
 * only by its owner (group read and search may be an ACL's mask too), and
 * the name resolved to the very file opened. 1: such a file; -1: a file
 * directly in that folder, but one of those checks fails; 0: neither. */
static int in_credentials(const char *path, const struct stat *st)
{
    const char *env = getenv("CREDENTIALS_DIRECTORY");
    if (!env || !env[0])
        return 0;
    char dir[PATH_MAX], file[PATH_MAX];
    if (!realpath(env, dir) || !realpath(path, file))
        return 0;
    size_t n = strlen(dir);
    if (n < 2 || strncmp(file, dir, n) || file[n] != '/' ||
        strchr(file + n + 1, '/'))
        return 0;
    struct stat ds, fs;
    if (stat(dir, &ds) || !S_ISDIR(ds.st_mode) ||
        (ds.st_uid != 0 && ds.st_uid != geteuid()) || (ds.st_mode & 027))
        return -1;
    return stat(file, &fs) == 0 && fs.st_dev == st->st_dev &&
                   fs.st_ino == st->st_ino
               ? 1
               : -1;
}

int psw_path_may_be_token(const char *path)
{
    size_t n = strlen(path);
    if (n < PSW_AUTH_TOKEN_MIN || path[0] == '/' || path[0] == '.')
        return 0;
    return strchr(path, '+') || path[n - 1] == '=' ||
           strcspn(path, "/.-_ ") == n;
}

int psw_token_read_file(const char *path, char *out, size_t cap, size_t *len,
                        char *why, size_t whylen)
{
    char buf[PSW_AUTH_TOKEN_MAX + 3];
    struct stat st;
    *len = 0;
    if (cap)
        out[0] = '\0';
    /* O_NOFOLLOW is not wanted (a symlink to a secret store is fine), but
     * the checks apply to the file opened, not to a name that may change
     * in between. O_NONBLOCK: opening a FIFO would wait for a writer,
     * and in psd on its loop (a reload), for ever; it is refused below as
     * not a regular file, whose reads O_NONBLOCK does not change. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        if (psw_path_may_be_token(path))
            snprintf(why, whylen, "a path of %zu bytes that cannot be "
                     "opened: %s (not shown: it reads as the token itself, "
                     "where auth_token_file takes the path of a file that "
                     "holds it)", strlen(path), strerror(errno));
        else
            snprintf(why, whylen, "%s: cannot open: %s", path,
                     strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    /* In systemd's credentials folder, group read is an ACL's mask
     * (in_credentials); nothing else of the group's is. */
    int cred = in_credentials(path, &st);
    if (st.st_mode & (cred == 1 ? 037 : 077)) {
        /* A systemd credential cannot be chmod'ed: say what would be
         * taken instead. */
        snprintf(why, whylen, "%s: group or others may access it (mode "
                 "%04o); a token file must be private: chmod 600 %s%s", path,
                 (unsigned)(st.st_mode & 07777), path,
                 cred ? " (in $CREDENTIALS_DIRECTORY, group read alone is "
                        "taken, when that folder belongs to root or to this "
                        "user, is closed to others and only its owner may "
                        "write it)" : "");
        close(fd);
        return -1;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(why, whylen, "%s: cannot read: %s", path,
                     strerror(errno));
            close(fd);
            sodium_memzero(buf, sizeof buf);
            return -1;
        }
        if (r == 0 || (n += (size_t)r) == sizeof buf)
            break;
    }
    close(fd);
    n = psw_token_trim(buf, n);
    char reason[160];
    if (n >= sizeof buf - 2 || psw_token_check(buf, n, reason, sizeof reason)) {
        if (n >= sizeof buf - 2)
            snprintf(reason, sizeof reason, "a token must be %d..%d bytes, "
                     "the file holds more", PSW_AUTH_TOKEN_MIN,
                     PSW_AUTH_TOKEN_MAX);
        snprintf(why, whylen, "%s: %s", path, reason);
        sodium_memzero(buf, sizeof buf);
        return -1;
    }
    if (n + 1 > cap) {
        snprintf(why, whylen, "%s: token too long", path);
        sodium_memzero(buf, sizeof buf);
        return -1;
    }
    memcpy(out, buf, n);
    out[n] = '\0';
    *len = n;
    sodium_memzero(buf, sizeof buf);
    return 0;
}

void psw_wipe(void *p, size_t n)
{
    sodium_memzero(p, n);
}

int psw_append_wiped(char **s, size_t *len, size_t *cap, char sep,
                     const char *add, size_t n)
{
    size_t want = *len + (sep != 0) + n + 1;
    if (want > *cap) {
        size_t c = 2 * *cap > want ? 2 * *cap : want;
        char *p = malloc(c);
        if (!p)
            return -1;
        if (*s) {
            memcpy(p, *s, *len);
            psw_wipe(*s, *len);
            free(*s);
        }
        *s = p;
        *cap = c;
    }
    if (sep)
        (*s)[(*len)++] = sep;
    memcpy(*s + *len, add, n);
    *len += n;
    (*s)[*len] = '\0';
    return 0;
}
