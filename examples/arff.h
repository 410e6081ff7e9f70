/* Reads two-class text data sets in ARFF (the format of Weka's Reuters-21578
 * files: one quoted string attribute, then a class of 0 or 1) and turns each
 * text into hashed binary word features, for examples/reuters_lr. */
#ifndef ARFF_H
#define ARFF_H

#include <stddef.h>
#include <stdint.h>

/* Words hash into keys 0..ARFF_KEY_SPACE-1; every document also has the
 * bias key, which lies just outside that range. */
#define ARFF_KEY_BITS 20
#define ARFF_KEY_SPACE ((uint64_t)1 << ARFF_KEY_BITS)
#define ARFF_BIAS_KEY ARFF_KEY_SPACE

#define ARFF_MAX_BYTES (256u << 20)     /* refuse larger files */

/* Room arff_text_keys may need for a text of len bytes: a word has at
 * least two letters and words are separated by at least one byte. */
#define ARFF_MAX_WORDS(len) ((len) / 3 + 1)

/* Called by arff_parse for each data line, in file order: the unescaped
 * text (len bytes, not terminated, inside the caller's buffer and valid
 * until arff_parse returns) and its class, 0 or 1. Returns 0 to go on, or
 * -1 to stop arff_parse, which then returns -1 with err left as set. */
typedef int (*arff_record_fn)(const char *text, size_t len, int label,
                              void *arg, char *err, size_t errlen);

/* Parses ARFF text buf[0..len): blank lines and lines starting with '%'
 * are skipped, '@' lines are the header up to "@data", and every line
 * after that must be a single- or double-quoted string, a comma and 0 or
 * 1. Inside the string \n, \r and \t stand for those characters and a
 * backslash before any other character keeps that character (\' \" \\).
 * Unescapes each string in place (buf is modified) and calls fn with it.
 * Returns the number of records, or -1 with "line N: reason" in err
 * (errlen bytes, always terminated). */
long arff_parse(char *buf, size_t len, arff_record_fn fn, void *arg,
                char *err, size_t errlen);

/* FNV-1a, 32 bits (offset basis 2166136261, prime 16777619), of s[0..n). */
uint32_t arff_fnv1a(const char *s, size_t n);

/* The features of a text: its words, runs of two or more ASCII letters
 * ([a-z]{2,} after lower-casing; any other byte ends a word), each hashed
 * with FNV-1a of its lower-case letters and masked to ARFF_KEY_BITS bits.
 * Writes the distinct keys in increasing order into keys, which must have
 * room for ARFF_MAX_WORDS(len) keys, and returns how many there are. The
 * bias key is not included. */
size_t arff_text_keys(const char *text, size_t len, uint64_t *keys);

/* A labelled set of documents, each a sorted list of distinct keys. */
typedef struct arff_set {
    size_t n;               /* documents */
    size_t npos;            /* documents of class 1 */
    uint8_t *labels;        /* n classes, 0 or 1 */
    size_t *start;          /* n + 1 offsets: document i has the keys */
    uint64_t *keys;         /* keys[start[i] .. start[i + 1]), bias excluded */
} arff_set;

/* Builds *out from ARFF text buf[0..len) with arff_parse (buf is modified)
 * and arff_text_keys. Returns 0, or -1 with a reason in err and *out
 * zeroed. On success *out owns its arrays until arff_destroy(out). */
int arff_set_parse(char *buf, size_t len, arff_set *out, char *err,
                   size_t errlen);

/* Reads the file at path (at most ARFF_MAX_BYTES) and builds *out from it
 * like arff_set_parse; a reason starts with the path. */
int arff_load(const char *path, arff_set *out, char *err, size_t errlen);

/* Frees what arff_set_parse allocated and zeroes *s. Safe on a zeroed set. */
void arff_destroy(arff_set *s);

#endif
