/* Token authentication, the part both sides must compute bit for bit:
 * the handshake's proofs (HMAC-SHA-256 keyed with the token over a
 * transcript binding both nonces, the role, the client's identity and
 * the node), fresh nonces, and reading a token from a file with the
 * permission rule ssh applies to keys. All cryptography is libsodium's;
 * PROTOCOL.md section 4 specifies the bytes. No sockets here. */
#ifndef PSW_AUTH_H
#define PSW_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PSW_NONCE_LEN 32
#define PSW_PROOF_LEN 32         /* HMAC-SHA-256 */
#define PSW_AUTH_TOKEN_MIN 16    /* bytes; a guessable token is no token */
#define PSW_AUTH_TOKEN_MAX 255

/* Who computes a proof: the two are domain-separated, so one side's
 * proof is never valid as the other's (no reflection). */
enum { PSW_ROLE_CLIENT = 0, PSW_ROLE_SERVER = 1 };

/* Everything a proof covers. */
typedef struct psw_transcript {
    uint32_t version;            /* the protocol version of HELLO */
    uint64_t client_id, incarnation;
    int32_t worker;
    int32_t node_index;          /* the node that sent the CHALLENGE */
    uint8_t cnonce[PSW_NONCE_LEN];   /* the client's, from HELLO */
    uint8_t snonce[PSW_NONCE_LEN];   /* the server's, from CHALLENGE */
} psw_transcript;

/* Initialises libsodium (idempotent, thread-safe). 0, or -1 when the
 * library cannot start (no randomness source). */
int psw_auth_init(void);

/* Fills out with PSW_NONCE_LEN random bytes. */
void psw_auth_nonce(uint8_t out[PSW_NONCE_LEN]);

/* The proof of `role` over t, keyed with the token (len bytes). */
void psw_auth_proof(const char *token, size_t len, int role,
                    const psw_transcript *t, uint8_t out[PSW_PROOF_LEN]);

/* Whether proof (n bytes) is role's proof over t: 0 when it is, -1
 * otherwise. Constant time in the proof's contents. */
int psw_auth_verify(const char *token, size_t len, int role,
                    const psw_transcript *t, const void *proof, size_t n);

/* Checks a token's length and bytes. 0, or -1 with the reason in why. */
int psw_token_check(const char *token, size_t len, char *why, size_t whylen);

/* The length of token less one final line break (LF, CR or CRLF), as a
 * token file's is read; len itself when that would leave nothing (a
 * token of a line break alone is refused by psw_token_check, not taken
 * for none). */
size_t psw_token_trim(const char *token, size_t len);

/* Whether a path given for auth_token_file may be the token itself (the
 * token written where its file's path goes): relative, of a token's
 * length at least, and with base64's '+' or final '=', or none of the
 * separators a file name has ('/', '.', '-', '_', ' '). Such a path is
 * not quoted in errors, which go to logs. */
int psw_path_may_be_token(const char *path);

/* Reads a token from path: the whole file less one final newline (LF or
 * CRLF). Refuses a file that is not a regular file, that its group or
 * others may access (mode & 077, as ssh does with keys; the reason says
 * to chmod 600), or whose token fails psw_token_check. Writes at most
 * cap - 1 bytes and a NUL to out; 0 with *len set, or -1 with the reason
 * in why (which names path). */
int psw_token_read_file(const char *path, char *out, size_t cap, size_t *len,
                        char *why, size_t whylen);

/* Zeroes n bytes in a way the compiler may not remove. */
void psw_wipe(void *p, size_t n);

/* Appends sep (unless 0) and the n bytes at add to the string *s of
 * *len bytes in *cap, NUL-terminated: an ini value joined from its
 * lines, which may be a token. The buffer grows by doubling (a value over
 * 80,000 lines took 15 s copied whole at each), and never by realloc,
 * which would free the old block unwiped. 0, or -1 out of memory (*s as
 * it was). */
int psw_append_wiped(char **s, size_t *len, size_t *cap, char sep,
                     const char *add, size_t n);

#endif
