/* Table storage: dense shards are contiguous arrays; sparse shards are an
 * open-addressing hash from key to row number plus rows kept in fixed-size
 * chunks, so growing never moves existing rows or copies the whole shard.
 *
 * A sparse row costs its key and weights (8 + 4 * dim bytes, side by side
 * in a chunk), its optimizer state, and an 8-byte slot {row, tag} in a hash
 * kept at load factor 3/8..3/4: 10.7 to 21.3 bytes of slots per key. For
 * dim 8 and sum that is 51 to 61 bytes per key, plus the unused rows of
 * each shard's last chunk (the floats alone are 32; a 16-byte slot holding
 * the key, at load factor 1/4..1/2 as before, made it 64 to 96); psd's
 * RSS measures 51.0 to 61.4 bytes per key from 10^6 to 10^8 keys
 * (tests/bench/README.md, section 5b). Tables whose row is one float
 * (dim 1 and sum, assign or sgd) do keep it in such a 16-byte slot with
 * the key, and have no chunks: their pushes and pulls touch one cache
 * line per key.
 *
 * Around a doubling of a shard's slots one more slot array is held: the
 * doubled one, zeroed over the last hcap / 16 rows before (at most 2 * 8
 * bytes of slots per key of dim 8 more), then the old one until its slots
 * have moved over the rows after (hcap / 16 rows; 8 * 4 / 3 bytes per
 * key at the most). See "growing a shard's slots" below. */
#define _DEFAULT_SOURCE          /* madvise's MADV_HUGEPAGE */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "table.h"
#include "updater.h"
#include "../proto/layout.h"
#include "../proto/msg.h"
#include "../proto/status.h"

/* Sparse rows live in chunks of about CHUNK_BYTES of weights (at most
 * 4096 rows): small enough that a shard holding a few wide rows does not
 * reserve much, large enough that allocations are rare. */
#define CHUNK_BYTES (256 * 1024)
#define CHUNK_BITS_MAX 12
#define EMPTY UINT32_MAX

/* Rows in their slots (psd_table's `inl`): the key, the row number (the
 * order rows are saved in) and the float, which takes the otherwise
 * padded last four bytes. A push or pull touches one cache line per key.
 * Such rows move when the slots grow: no pointer to one outlives the next
 * insertion or psd_table_tidy. */
typedef struct hslot {
    uint64_t key;
    uint32_t row1;           /* the row number + 1; 0 marks a free slot */
    float inl;
} hslot;

/* Rows in chunks: the slot holds the row number and the high half of the
 * key's hash, which is also what picks the slot (slot_of, for up to 2^32
 * slots). A probe compares tags, and reads the key next to its row only
 * when the tags match, so a lookup costs the slot's cache line and the
 * row's, as a slot holding the key would; growing reads no keys. */
typedef struct cslot {
    uint32_t row1;           /* the row number + 1; 0 marks a free slot */
    uint32_t tag;            /* psw_mix64(key) >> 32 */
} cslot;

/* A slot's row, EMPTY for a free one. Rows are stored plus one so that
 * zeroed memory is free slots: a doubled slot array is zeroed a slice at
 * a time before it is needed (grow_ready; calloc for small ones), rather
 * than by a pass over gigabytes writing EMPTY when it is. */
#define ROW(x) ((uint32_t)((x).row1 - 1u))

/* Chunk tables grow their slots past 3/4 full (inline ones past 1/2): a
 * probe that finds the key stays about 2.5 slots long, one that misses
 * about 8.5, still mostly within a cache line of 8-byte slots. */
#define CLOAD_NUM 3
#define CLOAD_DEN 4
/* Above this many slots slot_of would take bits that are not in the tag. */
#define CSLOTS_MAX ((uint64_t)1 << 32)

typedef struct shard {
    int owned;
    uint64_t nrows;          /* rows held */
    uint64_t acc_new;        /* bsp, sparse: keys of this clock's sum in
                                this shard with no row here yet */
    /* dense: rows first..first+nrows-1, contiguous */
    uint64_t first;
    float *w, *st;
    uint32_t *steps;
    /* sparse: key -> row number; slots (inline tables) or cslots (the
     * others, whose rows live in chunks: rc holds records of key and
     * weights, stc and stepc the state and step counters) */
    hslot *slots;
    cslot *cslots;
    size_t hcap;             /* power of two */
    /* While the slots double: the old ones (oslots or ocslots, ocap of
     * them), of which [moved, ocap) are still to move (grow_step);
     * NULL otherwise. */
    hslot *oslots;
    cslot *ocslots;
    size_t ocap, moved;
    /* The doubled slots being readied (grow_ready), of which `ready`
     * bytes are zeroed; NULL otherwise. ready_rows: nrows at the last
     * psd_table_tidy, ready_idle: its calls since a row was created. */
    void *next;
    size_t ready;
    uint64_t ready_rows;
    unsigned ready_idle;
    char **rc;
    float **stc;
    uint32_t **stepc;
    size_t nchunks;
} shard;

struct psd_table {
    psd_table_conf conf;
    uint32_t nshards;
    int nnodes, node;
    unsigned nstate;         /* state floats per weight float */
    unsigned chunk_bits;     /* sparse: log2 of rows per chunk */
    size_t rec;              /* sparse, chunks: bytes of a record (key, row) */
    int has_step;
    int inl;                 /* sparse rows live in their slots (hslot) */
    uint32_t shard_mask;     /* nshards - 1 when a power of two, else 0 */
    shard *shards;
    uint64_t rows_held;      /* sum of the shards' nrows */
    uint64_t made;           /* rows its shards ever created */
    uint64_t tidy_made;      /* made at the last psd_table_tidy that left
                                no shard with slots to move or readied
                                memory, or UINT64_MAX: only a row created
                                since gives one either, so the ticks skip
                                the walk over every shard until then */
    uint64_t acc_new;        /* bsp, sparse: keys in acc with no row here */
    uint64_t shard_rows_max; /* sparse: rows one shard can index */
    float *scratch;          /* one row: an initial row being made */
    struct psd_table *acc;   /* bsp: this clock's summed pushes, or NULL */
    int careful;             /* ran out of memory in a push: pushes make
                                their rows before updating any */
};

/* Large arrays (hash slots, dense shards) ask for transparent huge pages,
 * which the kernel gives only on request where THP is "madvise" (Debian's
 * default): doubling a 1 GiB slot array took 8 s here, most of it in 4 KiB
 * page faults (costly in a VM), and random probes miss the TLB less. The
 * whole 2 MiB pages inside [p, p + n) are asked for; nothing happens
 * where THP is off. */
static void want_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (!p || n < 2 * huge)
        return;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~(huge - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

static size_t row_bytes(const psd_table *t)
{
    return (size_t)t->conf.dim * sizeof(float);
}

/* ---- shard helpers -------------------------------------------------- */

static int dense_alloc(psd_table *t, shard *s)
{
    size_t n = (size_t)s->nrows * t->conf.dim;
    s->w = malloc(n ? n * sizeof(float) : 1);
    if (!s->w)
        return -1;
    want_huge(s->w, n * sizeof(float));   /* every row is written now */
    if (t->nstate) {
        s->st = calloc(n ? n * t->nstate : 1, sizeof(float));
        if (!s->st)
            return -1;
    }
    if (t->has_step) {
        s->steps = calloc(s->nrows ? s->nrows : 1, sizeof(uint32_t));
        if (!s->steps)
            return -1;
    }
    for (uint64_t r = 0; r < s->nrows; r++)
        psd_init_row(&t->conf.init, s->first + r,
                     s->w + (size_t)r * t->conf.dim, t->conf.dim);
    return 0;
}

static void shard_free(shard *s)
{
    free(s->w);
    free(s->st);
    free(s->steps);
    free(s->slots);
    free(s->cslots);
    free(s->oslots);
    free(s->ocslots);
    free(s->next);
    for (size_t i = 0; i < s->nchunks; i++) {
        free(s->rc[i]);
        if (s->stc)
            free(s->stc[i]);
        if (s->stepc)
            free(s->stepc[i]);
    }
    free(s->rc);
    free(s->stc);
    free(s->stepc);
}

/* A sparse key is hashed once per request: its hash h = psw_mix64(key)
 * picks the shard (psw_sparse_shard_of: h mod shards) and the slot. */
static uint32_t shard_of_hash(const psd_table *t, uint64_t h)
{
    return t->shard_mask || t->nshards == 1 ? (uint32_t)(h & t->shard_mask)
                                            : (uint32_t)(h % t->nshards);
}

/* The slot must not come from the bits that picked the shard (the low
 * ones), or every key of a shard would land in the same few slots: rotate
 * the high half down. Up to 2^32 slots that is the cslot's tag. */
static size_t slot_of(uint64_t h, size_t cap)
{
    return (size_t)((h >> 32) | (h << 32)) & (cap - 1);
}

/* The first free slot on the probe that starts at slot j: where a new
 * slot goes. */
static size_t hslot_free(const hslot *slots, size_t cap, size_t j)
{
    while (slots[j].row1)
        j = (j + 1) & (cap - 1);
    return j;
}

static size_t cslot_free(const cslot *slots, size_t cap, uint32_t tag)
{
    size_t j = tag & (cap - 1);
    while (slots[j].row1)
        j = (j + 1) & (cap - 1);
    return j;
}

/* ---- growing a shard's slots, a few at a time ------------------------
 *
 * Doubling a sparse shard's slots in one go stopped the node: 3.2 s at
 * 33.5 M rows of one float (8 s before huge pages), every client waiting
 * and timing out. So, as redis's dict does, a shard's slots grow
 * incrementally: the doubled array is allocated, the old one kept, and
 * its slots moved over in order, GROW_STEP of them for each row created
 * and more at each of the node's ticks (psd_table_tidy). While both
 * exist a lookup probes the new slots, then the old ones; rows are only
 * created in the new ones. A moved slot stays in the old array as it was,
 * so that a probe of the old array through it still reaches the slots
 * after it; a slot not moved yet is its key's only one (an inline row's
 * float is updated there). */

/* Old slots moved per row created. The doubled slots take another
 * doubling's worth of rows (inline: ocap / 2 at load 1/2; chunk tables
 * 3/4 * ocap) before they need to grow again; at 16 a row the move ends
 * after ocap / 16 rows, a twelfth (chunk tables) or an eighth (inline) of
 * the rows held when it began. Until then the old slots are held too: a
 * chunk table of dim 8 costs up to 11 bytes a key more, an inline one
 * half as much again as its slots. */
#define GROW_STEP 16

/* Moves up to `budget` old slots of s; frees the old array when every
 * slot has moved. Returns how many slots it looked at. */
static size_t grow_step(shard *s, size_t budget)
{
    size_t did = s->ocap - s->moved < budget ? s->ocap - s->moved : budget;
    size_t end = s->moved + did, m = s->hcap - 1;
    if (s->oslots) {
        for (size_t i = s->moved; i < end; i++) {
            hslot x = s->oslots[i];
            if (x.row1)
                s->slots[hslot_free(s->slots, s->hcap,
                                    slot_of(psw_mix64(x.key), s->hcap))] = x;
        }
    } else if (s->ocslots) {
        for (size_t i = s->moved; i < end; i++) {
            cslot x = s->ocslots[i];
            if (x.row1) {
                size_t j = x.tag & m;
                while (s->cslots[j].row1)
                    j = (j + 1) & m;
                s->cslots[j] = x;
            }
        }
    }
    s->moved = end;
    if (end == s->ocap) {
        free(s->oslots);
        free(s->ocslots);
        s->oslots = NULL;
        s->ocslots = NULL;
        s->ocap = s->moved = 0;
    }
    return did;
}

/* The rows a shard holds when its next row makes the slots double. */
static uint64_t grow_at(const psd_table *t, const shard *s)
{
    return t->inl ? s->hcap / 2 : s->hcap / CLOAD_DEN * CLOAD_NUM;
}

/* Moving slots is half of a doubling's cost; the other half is the
 * kernel zeroing the new array's pages as they are first touched, and
 * random probes touch them all at once: 0.5 s for 512 MiB here, on the
 * push that began the doubling. So the doubled array is allocated when
 * the shard is hcap / 16 rows short of doubling, and zeroed a slice for
 * each row created after that (READY_SLOTS slots' worth: done with a
 * third of those rows to spare). The memory is in use that much earlier
 * (a shard that stops growing there lets it go after READY_IDLE_TICKS);
 * arrays under 1024 slots are just allocated when needed. Called after a
 * row is created. */
#define READY_SLOTS 48

static void grow_ready(const psd_table *t, shard *s)
{
    size_t size = t->inl ? sizeof(hslot) : sizeof(cslot);
    size_t bytes = 2 * s->hcap * size;
    if (s->hcap < 1024 || s->nrows + s->hcap / 16 < grow_at(t, s) ||
        (!t->inl && (uint64_t)2 * s->hcap > CSLOTS_MAX))
        return;
    if (!s->next) {
        if (!(s->next = malloc(bytes)))
            return;              /* grow_start tries again, or says so */
        want_huge(s->next, bytes);
        s->ready = 0;
    }
    size_t k = READY_SLOTS * size;
    if (k > bytes - s->ready)
        k = bytes - s->ready;
    memset((char *)s->next + s->ready, 0, k);
    s->ready += k;
}

/* Starts doubling s's slots (moving the rest of a doubling still under
 * way first). 0, or -1 when memory runs out (s unchanged but for the
 * earlier doubling finished) or the shard is at its limit of slots. */
static int grow_start(const psd_table *t, shard *s)
{
    if (s->ocap)
        (void)grow_step(s, s->ocap);
    size_t cap = s->hcap ? 2 * s->hcap : 64;
    size_t size = t->inl ? sizeof(hslot) : sizeof(cslot);
    if (!t->inl && (uint64_t)cap > CSLOTS_MAX)
        return -1;
    void *n = s->next;
    if (n) {                     /* readied: zero what is left */
        memset((char *)n + s->ready, 0, cap * size - s->ready);
        s->next = NULL;
        s->ready = 0;
    } else {
        if (!(n = calloc(cap, size)))
            return -1;
        want_huge(n, cap * size);
    }
    if (t->inl) {
        s->oslots = s->slots;
        s->slots = n;
    } else {
        s->ocslots = s->cslots;
        s->cslots = n;
    }
    s->ocap = s->hcap;
    s->moved = 0;
    s->hcap = cap;
    if (!s->ocap) {              /* the first slots: nothing to move */
        free(s->oslots);
        free(s->ocslots);
        s->oslots = NULL;
        s->ocslots = NULL;
    }
    return 0;
}

/* Inline shards: calls fn(ctx, slot) for every slot holding a row, in
 * s->slots and, while they grow, in the old slots not moved yet (each row
 * once), until fn returns non-zero, which it returns. */
static int each_hslot(const shard *s, int (*fn)(void *ctx, hslot *x),
                      void *ctx)
{
    int rc = 0;
    for (size_t j = 0; s->slots && j < s->hcap && !rc; j++)
        if (s->slots[j].row1)
            rc = fn(ctx, &s->slots[j]);
    for (size_t j = s->moved; s->oslots && j < s->ocap && !rc; j++)
        if (s->oslots[j].row1)
            rc = fn(ctx, &s->oslots[j]);
    return rc;
}

/* each_hslot's fns for saving and loading inline rows: a key or a weight
 * to or from its place, by row number, in the array ctx. */
static int slot_key_out(void *ctx, hslot *x)
{
    ((uint64_t *)ctx)[ROW(*x)] = x->key;
    return 0;
}

static int slot_w_out(void *ctx, hslot *x)
{
    ((float *)ctx)[ROW(*x)] = x->inl;
    return 0;
}

static int slot_w_in(void *ctx, hslot *x)
{
    x->inl = ((const float *)ctx)[ROW(*x)];
    return 0;
}

static int chunk_add(psd_table *t, shard *s)
{
    size_t crows = (size_t)1 << t->chunk_bits;
    size_t n = s->nchunks + 1, rows = crows * t->conf.dim;
    char *r = malloc(crows * t->rec);
    float *st = t->nstate ? calloc(rows * t->nstate, sizeof(float)) : NULL;
    uint32_t *sp = t->has_step ? calloc(crows, sizeof(uint32_t)) : NULL;
    if (!r || (t->nstate && !st) || (t->has_step && !sp))
        goto fail;
    /* A pointer array that grew stays valid even if a later one fails. */
    char **rc = realloc(s->rc, n * sizeof *rc);
    if (!rc)
        goto fail;
    s->rc = rc;
    if (t->nstate) {
        float **stc = realloc(s->stc, n * sizeof *stc);
        if (!stc)
            goto fail;
        s->stc = stc;
        stc[s->nchunks] = st;
    }
    if (t->has_step) {
        uint32_t **sc = realloc(s->stepc, n * sizeof *sc);
        if (!sc)
            goto fail;
        s->stepc = sc;
        sc[s->nchunks] = sp;
    }
    rc[s->nchunks] = r;
    s->nchunks = n;
    return 0;
fail:
    free(r);
    free(st);
    free(sp);
    return -1;
}

/* The initial value of an inline row (one float), without a call to
 * psd_init_row for the common all-zero initialiser (the same +0.0f). */
static float init_inline(const psd_table *t, uint64_t key)
{
    float v = 0.0f;
    if (t->conf.init.kind != PSD_INIT_ZEROS)
        psd_init_row(&t->conf.init, key, &v, 1);
    return v;
}

/* Inline tables: the slot of `key` (hash h) in slots of capacity cap,
 * or NULL. */
static hslot *hslot_find(hslot *slots, size_t cap, uint64_t key, uint64_t h)
{
    size_t j = slot_of(h, cap);
    while (slots[j].row1) {
        if (slots[j].key == key)
            return &slots[j];
        j = (j + 1) & (cap - 1);
    }
    return NULL;
}

/* Inline tables: the slot of `key` (hash h), or NULL when it has no row:
 * in the slots, or while they grow in the old ones (where a moved key is
 * never looked for: the new slots have it). */
static hslot *slot_find(const shard *s, uint64_t key, uint64_t h)
{
    if (!s->hcap)
        return NULL;
    hslot *x = hslot_find(s->slots, s->hcap, key, h);
    if (!x && s->oslots)
        x = hslot_find(s->oslots, s->ocap, key, h);
    return x;
}

/* Inline tables: the slot of `key` (hash h), creating and initialising
 * its row when absent. Returns NULL when memory runs out. The pointer is
 * valid until the next row is created in s or the next psd_table_tidy
 * (the slots may move). */
static hslot *slot_get(psd_table *t, shard *s, uint64_t key, uint64_t h)
{
    hslot *x = slot_find(s, key, h);
    if (x)
        return x;
    if (s->nrows >= t->shard_rows_max)
        return NULL;
    /* Keep the load factor at or below 1/2: probes stay short. */
    if ((s->nrows + 1) * 2 > s->hcap && grow_start(t, s))
        return NULL;
    uint32_t row = (uint32_t)s->nrows++;
    t->rows_held++;
    t->made++;
    x = &s->slots[hslot_free(s->slots, s->hcap, slot_of(h, s->hcap))];
    x->key = key;
    x->row1 = row + 1;
    x->inl = init_inline(t, key);
    if (s->oslots)               /* x is in the new slots: it stays put */
        (void)grow_step(s, GROW_STEP);
    grow_ready(t, s);
    return x;
}

/* Chunk tables: row `row`'s record, its key (8 bytes, 4-aligned when dim
 * is odd) then its dim weights. Records never move. */
static char *rec_at(const psd_table *t, const shard *s, uint32_t row)
{
    return s->rc[row >> t->chunk_bits] +
           (size_t)(row & ((1u << t->chunk_bits) - 1)) * t->rec;
}

static uint64_t rec_key(const char *r)
{
    uint64_t k;
    memcpy(&k, r, sizeof k);
    return k;
}

static float *rec_w(char *r)
{
    return (float *)(void *)(r + sizeof(uint64_t));
}

/* Chunk tables: the index of the slot holding `key` (hash h) in slots of
 * capacity cap, or of the free slot where its probe ends. */
static size_t cslot_probe(const psd_table *t, const shard *s,
                          const cslot *slots, size_t cap, uint64_t key,
                          uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32);
    size_t m = cap - 1, j = tag & m;
    for (;; j = (j + 1) & m) {
        cslot x = slots[j];
        if (!x.row1 ||
            (x.tag == tag && rec_key(rec_at(t, s, ROW(x))) == key))
            return j;
    }
}

/* Chunk tables: the row of `key` (hash h) in the old slots of a shard
 * whose slots grow, or EMPTY. */
static uint32_t crow_find_old(const psd_table *t, const shard *s,
                              uint64_t key, uint64_t h)
{
    if (!s->ocslots)
        return EMPTY;
    return ROW(s->ocslots[cslot_probe(t, s, s->ocslots, s->ocap, key, h)]);
}

/* Chunk tables: the row of `key` (hash h), or EMPTY when it has none. */
static uint32_t crow_find(const psd_table *t, const shard *s, uint64_t key,
                          uint64_t h)
{
    if (!s->hcap)
        return EMPTY;
    uint32_t row =
        ROW(s->cslots[cslot_probe(t, s, s->cslots, s->hcap, key, h)]);
    return row != EMPTY ? row : crow_find_old(t, s, key, h);
}

/* Chunk tables: the row of `key` (hash h), creating and initialising it
 * when absent. Returns EMPTY when memory runs out (or the shard is at its
 * limit of 3/4 * 2^32 rows). */
static uint32_t crow_get(psd_table *t, shard *s, uint64_t key, uint64_t h)
{
    size_t j = 0;
    if (s->hcap) {
        j = cslot_probe(t, s, s->cslots, s->hcap, key, h);
        if (s->cslots[j].row1)
            return ROW(s->cslots[j]);
        uint32_t row = crow_find_old(t, s, key, h);
        if (row != EMPTY)
            return row;
    }
    if (s->nrows >= t->shard_rows_max)
        return EMPTY;
    if ((s->nrows + 1) * CLOAD_DEN > (uint64_t)s->hcap * CLOAD_NUM) {
        if (grow_start(t, s))
            return EMPTY;
        /* Old slots to move, also if the row is not made after all (a
         * chunk that memory refuses): the ticks must walk this shard. */
        t->tidy_made = UINT64_MAX;
        j = cslot_free(s->cslots, s->hcap, (uint32_t)(h >> 32));
    }
    if (s->nrows == (uint64_t)s->nchunks << t->chunk_bits && chunk_add(t, s))
        return EMPTY;
    uint32_t row = (uint32_t)s->nrows++;
    t->rows_held++;
    t->made++;
    s->cslots[j].row1 = row + 1;
    s->cslots[j].tag = (uint32_t)(h >> 32);
    char *r = rec_at(t, s, row);
    memcpy(r, &key, sizeof key);
    psd_init_row(&t->conf.init, key, rec_w(r), t->conf.dim);
    if (s->ocslots)
        (void)grow_step(s, GROW_STEP);
    grow_ready(t, s);
    return row;
}

/* Pointers to a row's weights, state and step counter. */
typedef struct rowref {
    float *w, *st;
    uint32_t *step;
} rowref;

static rowref dense_ref(const psd_table *t, const shard *s, uint64_t r)
{
    size_t i = (size_t)(r - s->first), d = t->conf.dim;
    rowref x = { s->w + i * d, NULL, NULL };
    if (s->st)
        x.st = s->st + i * d * t->nstate;
    if (s->steps)
        x.step = s->steps + i;
    return x;
}

/* Chunk tables: row `row`, whose record rec is (its weights live in it,
 * its state and step counter by row number). */
static rowref rec_ref(const psd_table *t, const shard *s, uint32_t row,
                      char *rec)
{
    size_t c = row >> t->chunk_bits, i = row & ((1u << t->chunk_bits) - 1);
    rowref x = { rec_w(rec), NULL, NULL };
    if (s->stc)
        x.st = s->stc[c] + i * t->conf.dim * t->nstate;
    if (s->stepc)
        x.step = s->stepc[c] + i;
    return x;
}

static rowref sparse_ref(const psd_table *t, const shard *s, uint32_t row)
{
    return rec_ref(t, s, row, rec_at(t, s, row));
}

/* Finds or creates the row of `key` (hash h) in sparse shard s, wherever
 * rows live. Returns 0, or -1 when memory runs out. The pointers are valid
 * until the next row is created in s. */
static int sparse_get(psd_table *t, shard *s, uint64_t key, uint64_t h,
                      rowref *r)
{
    if (t->inl) {
        hslot *x = slot_get(t, s, key, h);
        if (!x)
            return -1;
        rowref y = { &x->inl, NULL, NULL };
        *r = y;
        return 0;
    }
    uint32_t row = crow_get(t, s, key, h);
    if (row == EMPTY)
        return -1;
    *r = sparse_ref(t, s, row);
    return 0;
}

/* Whether sparse shard s holds `key` (hash h). */
static int sparse_has(const psd_table *t, const shard *s, uint64_t key,
                      uint64_t h)
{
    return t->inl ? slot_find(s, key, h) != NULL
                  : crow_find(t, s, key, h) != EMPTY;
}

/* Applies one pushed row, read in place from the request (unaligned). */
static void apply(psd_table *t, rowref r, const char *v)
{
    psd_update_row(&t->conf.upd, r.w, r.st, r.step, (const psd_ufloat *)v,
                   t->conf.dim);
}

/* ---- public --------------------------------------------------------- */

_Static_assert(sizeof(shard) <= PSD_TABLE_SHARD_BYTES,
               "table.h's PSD_TABLE_SHARD_BYTES, which psd --check counts");

psd_table *psd_table_new(const psd_table_conf *conf, uint32_t shards,
                         int nnodes, int node, char *err, size_t errlen)
{
    psd_table *t = calloc(1, sizeof *t);
    if (!t)
        goto oom;
    t->conf = *conf;
    t->nshards = shards;
    t->tidy_made = UINT64_MAX;
    t->nnodes = nnodes;
    t->node = node;
    t->nstate = psd_updater_state_per_float(conf->upd.kind);
    t->has_step = psd_updater_has_step(conf->upd.kind);
    t->inl = !conf->dense && conf->dim == 1 && t->nstate == 0 &&
             !t->has_step;
    t->shard_mask = (shards & (shards - 1)) == 0 ? shards - 1 : 0;
    /* Rows are numbered in 32 bits (EMPTY is none); chunked shards' slots
     * also stop doubling at CSLOTS_MAX, 3/4 full. */
    t->shard_rows_max = t->inl ? EMPTY - 1
                               : CSLOTS_MAX / CLOAD_DEN * CLOAD_NUM;
    t->chunk_bits = CHUNK_BITS_MAX;
    while (t->chunk_bits > 0 &&
           ((size_t)1 << t->chunk_bits) * row_bytes(t) > CHUNK_BYTES)
        t->chunk_bits--;
    t->rec = sizeof(uint64_t) + row_bytes(t);
    t->shards = calloc(shards, sizeof *t->shards);
    t->scratch = malloc(row_bytes(t));
    if (!t->shards || !t->scratch)
        goto oom;
    for (uint32_t i = 0; i < shards; i++) {
        shard *s = &t->shards[i];
        s->owned = psw_node_of_shard(i, nnodes) == node;
        if (!s->owned || !conf->dense)
            continue;
        s->first = psw_dense_shard_start(conf->rows, shards, i);
        s->nrows = psw_dense_shard_start(conf->rows, shards, i + 1) - s->first;
        t->rows_held += s->nrows;
        if (dense_alloc(t, s))
            goto oom;
    }
    return t;
oom:
    if (t && t->shards && conf->dense) {
        /* What the rows needed, for the operator to size the node by (a
         * bare "out of memory" left them to work it out). */
        double rows = (double)psw_dense_rows_on_node(conf->rows, shards,
                                                     nnodes, node);
        double b = rows *
                   (double)psd_updater_row_bytes(conf->upd.kind, conf->dim);
        snprintf(err, errlen, "table '%s': out of memory making its %.0f "
                 "rows here (%.2f GiB with their optimizer state)",
                 conf->name, rows, b / (1024.0 * 1024 * 1024));
    } else
        snprintf(err, errlen, "table '%s': out of memory", conf->name);
    psd_table_free(t);
    return NULL;
}

void psd_table_free(psd_table *t)
{
    if (!t)
        return;
    if (t->shards)
        for (uint32_t i = 0; i < t->nshards; i++)
            shard_free(&t->shards[i]);
    free(t->shards);
    free(t->scratch);
    psd_table_free(t->acc);
    free(t);
}

const psd_table_conf *psd_table_conf_get(const psd_table *t)
{
    return &t->conf;
}

void psd_table_set_params(psd_table *t, const psd_updater_params *p)
{
    if (p->kind == t->conf.upd.kind)
        t->conf.upd = *p;
}

void psd_table_set_limits(psd_table *t, uint64_t max_rows,
                          int allow_nonfinite)
{
    t->conf.max_rows = max_rows;
    t->conf.allow_nonfinite = allow_nonfinite;
}

uint64_t psd_table_shard_rows_max(const psd_table *t)
{
    return t->conf.dense ? 0 : t->shard_rows_max;
}

void psd_table_lower_shard_rows_max(psd_table *t, uint64_t rows)
{
    if (!t->conf.dense && rows < t->shard_rows_max)
        t->shard_rows_max = rows;
}

static uint32_t shard_of(const psd_table *t, uint64_t key)
{
    return t->conf.dense ? psw_dense_shard_of(t->conf.rows, t->nshards, key)
                         : psw_sparse_shard_of(t->nshards, key);
}

static int not_owned(const psd_table *t, uint32_t s, int *owner, char *err,
                     size_t errlen)
{
    *owner = psw_node_of_shard(s, t->nnodes);
    snprintf(err, errlen, "shard %u of table '%s' is owned by node %d", s,
             t->conf.name, *owner);
    return PSW_ENOTOWNER;
}

int psd_table_check_keys(const psd_table *t, const char *keys, size_t n,
                         int *owner, char *err, size_t errlen)
{
    if (t->nnodes == 1 && !t->conf.dense)
        return 0;                /* every key is valid and ours */
    for (size_t i = 0; i < n; i++) {
        uint64_t k = psw_key_at(keys, i);
        if (t->conf.dense && k >= t->conf.rows) {
            snprintf(err, errlen, "table '%s' has no row %llu (rows = %llu)",
                     t->conf.name, (unsigned long long)k,
                     (unsigned long long)t->conf.rows);
            return PSW_EKEY;
        }
        uint32_t s = t->conf.dense ? shard_of(t, k)
                                   : shard_of_hash(t, psw_mix64(k));
        if (!t->shards[s].owned)
            return not_owned(t, s, owner, err, errlen);
    }
    return 0;
}

int psd_table_check_range(const psd_table *t, uint64_t first, uint64_t count,
                          int *owner, char *err, size_t errlen)
{
    if (!t->conf.dense) {
        snprintf(err, errlen, "table '%s' is sparse: range requests need a "
                 "dense table", t->conf.name);
        return PSW_EINVAL;
    }
    if (count == 0 || first >= t->conf.rows || count > t->conf.rows - first) {
        psw_range_error(err, errlen, t->conf.name, first, count,
                        t->conf.rows);
        return PSW_EKEY;
    }
    /* Walk the shards that hold rows of the range; when a table has
     * fewer rows than shards, the empty shards between them hold none. */
    for (uint64_t r = first; r < first + count;) {
        uint32_t s = shard_of(t, r);
        if (!t->shards[s].owned)
            return not_owned(t, s, owner, err, errlen);
        r = psw_dense_shard_start(t->conf.rows, t->nshards, s + 1);
    }
    return 0;
}

/* Finds (or, for sparse tables, creates) the row of an owned key. The
 * row's pointers are valid until the next sparse row is created. */
static int locate(psd_table *t, uint64_t k, rowref *r)
{
    if (t->conf.dense) {
        *r = dense_ref(t, &t->shards[shard_of(t, k)], k);
        return 0;
    }
    uint64_t h = psw_mix64(k);
    return sparse_get(t, &t->shards[shard_of_hash(t, h)], k, h, r)
               ? PSW_ENOMEM
               : 0;
}

/* Batched sparse lookups. A lookup's cost is a cache miss on its slot
 * (and, in chunk tables, one on its record); a walk over a request's keys
 * hashes key i + AHEAD (once: the hash picks both the shard and the slot)
 * and prefetches its slot while key i is probed, so about AHEAD misses are
 * in flight at a time. In chunk tables the slots of key i + AHEAD / 2 have
 * arrived by then: the row its tag points at is noted and its record
 * prefetched, so that key i usually needs one key comparison, in cache.
 * The hash is kept rather than the slot index, because creating rows may
 * grow a shard's slot array between the prefetch and the probe. AHEAD is
 * a power of two. */
#define AHEAD 16

/* Chunk tables: a row that probably holds a key, and its record (NULL
 * when there is none). */
typedef struct cand {
    uint32_t row;
    char *rec;
} cand;

typedef struct walk {
    const char *keys;
    size_t n;
    uint64_t h[AHEAD];
    cand c[AHEAD];           /* chunk tables: record_ahead's */
} walk;

static uint64_t hash_ahead(const psd_table *t, const char *keys, size_t i)
{
    uint64_t h = psw_mix64(psw_key_at(keys, i));
    const shard *s = &t->shards[shard_of_hash(t, h)];
    if (s->hcap) {
        size_t j = slot_of(h, s->hcap);
        if (t->inl)
            __builtin_prefetch(&s->slots[j]);
        else {
            /* At load 3/4 a probe for a missing key is 8.5 slots long
             * on average: often into the next cache line. */
            __builtin_prefetch(&s->cslots[j]);
            __builtin_prefetch(&s->cslots[(j + 7) & (s->hcap - 1)]);
        }
        /* Growing: a key not moved yet is in the old slots. */
        if (s->oslots)
            __builtin_prefetch(&s->oslots[slot_of(h, s->ocap)]);
        else if (s->ocslots)
            __builtin_prefetch(&s->ocslots[slot_of(h, s->ocap)]);
    }
    return h;
}

/* Chunk tables: the row of the first slot on the probe of tag in slots
 * of capacity cap whose tag matches, or EMPTY. */
static uint32_t tag_row(const cslot *slots, size_t cap, uint32_t tag)
{
    size_t m = cap - 1;
    for (size_t j = tag & m;; j = (j + 1) & m) {
        cslot x = slots[j];
        if (!x.row1 || x.tag == tag)
            return ROW(x);
    }
}

/* Chunk tables: the row of the first slot on h's probe whose tag
 * matches, almost always the key's own if it has a row (else EMPTY), with
 * its record prefetched. Rows never move, so the answer stays a candidate
 * worth one key comparison even after rows were created since. */
static cand record_ahead(const psd_table *t, uint64_t h)
{
    const shard *s = &t->shards[shard_of_hash(t, h)];
    cand c = { EMPTY, NULL };
    if (!s->hcap)
        return c;
    uint32_t tag = (uint32_t)(h >> 32);
    c.row = tag_row(s->cslots, s->hcap, tag);
    if (c.row == EMPTY && s->ocslots)
        c.row = tag_row(s->ocslots, s->ocap, tag);
    if (c.row != EMPTY) {
        c.rec = rec_at(t, s, c.row);
        __builtin_prefetch(c.rec);
        __builtin_prefetch(c.rec + t->rec - 1);
    }
    return c;
}

static void walk_start(const psd_table *t, walk *w, const char *keys,
                       size_t n)
{
    w->keys = keys;
    w->n = n;
    for (size_t i = 0; i < n && i < AHEAD; i++)
        w->h[i] = hash_ahead(t, keys, i);
    if (!t->inl && !t->conf.dense)
        for (size_t i = 0; i < n && i < AHEAD / 2; i++)
            w->c[i] = record_ahead(t, w->h[i]);
}

/* Key i's hash (keys are visited in order, each once), and starts on key
 * i + AHEAD. */
static uint64_t walk_hash(const psd_table *t, walk *w, size_t i)
{
    uint64_t h = w->h[i % AHEAD];
    if (i + AHEAD < w->n)
        w->h[i % AHEAD] = hash_ahead(t, w->keys, i + AHEAD);
    return h;
}

/* walk_hash for chunk tables, which also look up key i + AHEAD / 2's
 * candidate row and prefetch its record; *cand is key i's. */
static uint64_t walk_hash_rec(const psd_table *t, walk *w, size_t i,
                              cand *c)
{
    size_t a = (i + AHEAD / 2) % AHEAD;
    if (i + AHEAD / 2 < w->n)
        w->c[a] = record_ahead(t, w->h[a]);
    *c = w->c[i % AHEAD];
    return walk_hash(t, w, i);
}

/* A request of n keys to a table whose slots are doubling moves up to n
 * old slots first (one a key, spread over the shards that are doubling):
 * while they double, a key not moved yet costs its lookup a second probe,
 * and a table that creates no more rows would otherwise pay it until the
 * ticks had moved everything (seconds for a large table, a benchmark's
 * whole measurement). Small requests leave it to the others. */
static void grow_help(psd_table *t, size_t n)
{
    if (n < 256)
        return;
    for (uint32_t i = 0; i < t->nshards; i++)
        if (t->shards[i].ocap)
            (void)grow_step(&t->shards[i], n / t->nshards + 1);
}

int psd_table_careful(const psd_table *t)
{
    return t->careful;
}

/* A careful table's first pass (psd_table_push_some): the rows of all n
 * keys exist after it, or it returns PSW_ENOMEM having updated none. */
static int make_rows(psd_table *t, const char *keys, size_t n)
{
    walk w;
    walk_start(t, &w, keys, n);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = walk_hash(t, &w, i);
        rowref unused;
        if (sparse_get(t, &t->shards[shard_of_hash(t, h)],
                       psw_key_at(keys, i), h, &unused))
            return PSW_ENOMEM;
    }
    return 0;
}

int psd_table_push(psd_table *t, const char *keys, size_t n, const char *vals)
{
    size_t applied;
    return psd_table_push_some(t, keys, n, vals, &applied);
}

int psd_table_push_some(psd_table *t, const char *keys, size_t n,
                        const char *vals, size_t *applied)
{
    size_t rb = row_bytes(t);
    *applied = n;
    if (t->conf.dense) {
        for (size_t i = 0; i < n; i++) {
            uint64_t k = psw_key_at(keys, i);
            apply(t, dense_ref(t, &t->shards[shard_of(t, k)], k),
                  vals + i * rb);
        }
        return 0;
    }
    /* Keys repeated within the request are applied in order, each time,
     * exactly as one push per key would. */
    grow_help(t, n);
    /* A second walk for a table that ran out of memory once: the first
     * pass, a lookup per key, is paid only there. */
    if (t->careful && make_rows(t, keys, n)) {
        *applied = 0;
        return PSW_ENOMEM;
    }
    walk w;
    walk_start(t, &w, keys, n);
    if (!t->inl) {
        for (size_t i = 0; i < n; i++) {
            cand c;
            uint64_t h = walk_hash_rec(t, &w, i, &c);
            uint64_t k = psw_key_at(keys, i);
            shard *s = &t->shards[shard_of_hash(t, h)];
            if (!c.rec || rec_key(c.rec) != k) {
                if ((c.row = crow_get(t, s, k, h)) == EMPTY) {
                    t->careful = 1;
                    *applied = i;
                    return PSW_ENOMEM;
                }
                c.rec = rec_at(t, s, c.row);
            }
            apply(t, rec_ref(t, s, c.row, c.rec), vals + i * rb);
        }
        return 0;
    }
    int sum1 = t->conf.upd.kind == PSD_UPD_SUM;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = walk_hash(t, &w, i);
        shard *s = &t->shards[shard_of_hash(t, h)];
        hslot *x = slot_get(t, s, psw_key_at(keys, i), h);
        if (!x) {
            t->careful = 1;
            *applied = i;
            return PSW_ENOMEM;
        }
        if (sum1) {
            /* psd_update_row's sum for one float, without the call. */
            float g;
            memcpy(&g, vals + i * sizeof g, sizeof g);
            x->inl += g;
        } else {
            rowref r = { &x->inl, NULL, NULL };
            apply(t, r, vals + i * rb);
        }
    }
    return 0;
}

int psd_table_pull(psd_table *t, const char *keys, size_t n, char *out)
{
    size_t rb = row_bytes(t);
    if (t->conf.dense) {
        for (size_t i = 0; i < n; i++) {
            uint64_t k = psw_key_at(keys, i);
            memcpy(out + i * rb,
                   dense_ref(t, &t->shards[shard_of(t, k)], k).w, rb);
        }
        return 0;
    }
    grow_help(t, n);
    walk w;
    walk_start(t, &w, keys, n);
    if (t->inl) {
        /* One float a key: copies of a known size, not memcpy calls. */
        for (size_t i = 0; i < n; i++) {
            uint64_t h = walk_hash(t, &w, i), k = psw_key_at(keys, i);
            const hslot *x = slot_find(&t->shards[shard_of_hash(t, h)], k, h);
            float v = x ? x->inl : init_inline(t, k);
            memcpy(out + i * sizeof v, &v, sizeof v);
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        cand c;
        uint64_t h = walk_hash_rec(t, &w, i, &c);
        uint64_t k = psw_key_at(keys, i);
        const float *src;
        /* A pull creates no rows, so no candidate means no row; a wrong
         * one (tags of two keys equal) means probing on. */
        if (c.rec && rec_key(c.rec) != k) {
            shard *s = &t->shards[shard_of_hash(t, h)];
            uint32_t row = crow_find(t, s, k, h);
            c.rec = row == EMPTY ? NULL : rec_at(t, s, row);
        }
        if (!c.rec) {
            /* Never pushed: its initial row, made afresh (the
             * initialiser is a function of the key), not stored. */
            psd_init_row(&t->conf.init, k, t->scratch, t->conf.dim);
            src = t->scratch;
        } else
            src = rec_w(c.rec);
        memcpy(out + i * rb, src, rb);
    }
    return 0;
}

/* Whether the sparse table holds key k (hash h) or, bsp, has it in this
 * clock's sum, where it becomes a row at the end of the clock. */
static int has_key(const psd_table *t, uint64_t k, uint64_t h)
{
    if (sparse_has(t, &t->shards[shard_of_hash(t, h)], k, h))
        return 1;
    const psd_table *a = t->acc;
    return a && sparse_has(a, &a->shards[shard_of_hash(a, h)], k, h);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A shard that the distinct new keys nk[0..m) would take past
 * shard_rows_max (counting the keys of a bsp clock's sum), with how many
 * of them it would take (*adds); -1 when none would, -2 when memory runs
 * out. */
static int64_t shard_overfull(const psd_table *t, const uint64_t *nk,
                              size_t m, uint64_t *adds)
{
    uint64_t *per = calloc(t->nshards, sizeof *per);
    if (!per)
        return -2;
    for (size_t i = 0; i < m; i++)
        per[shard_of_hash(t, psw_mix64(nk[i]))]++;
    int64_t full = -1;
    for (uint32_t j = 0; j < t->nshards && full < 0; j++)
        if (per[j] && t->shards[j].nrows + t->shards[j].acc_new + per[j] >
                          t->shard_rows_max)
            full = j;
    if (full >= 0)
        *adds = per[full];
    free(per);
    return full;
}

int psd_table_check_growth(const psd_table *t, const char *keys, size_t n,
                           char *err, size_t errlen)
{
    if (t->conf.dense)
        return 0;
    /* A shard's own limit matters only to a push that could reach it
     * (never while the node's rows of the table stay under it). */
    int near_cap = 0;
    if (t->rows_held + t->acc_new + n > t->shard_rows_max)
        for (uint32_t i = 0; i < t->nshards && !near_cap; i++)
            near_cap = t->shards[i].nrows + t->shards[i].acc_new + n >
                       t->shard_rows_max;
    if (t->conf.max_rows == 0 && !near_cap)
        return 0;
    uint64_t held = t->rows_held + t->acc_new, fresh = 0;
    walk w;
    walk_start(t, &w, keys, n);
    for (size_t i = 0; i < n; i++)
        fresh += !has_key(t, psw_key_at(keys, i), walk_hash(t, &w, i));
    /* A push that creates no row always goes on, even when a reload
     * lowered max_rows below the rows held (or a snapshot brought more). */
    if (fresh == 0 ||
        (!near_cap && held + fresh <= t->conf.max_rows))
        return 0;
    /* Over a limit counting repeats: count each new key once. */
    uint64_t *nk = malloc((size_t)fresh * sizeof *nk);
    if (!nk) {
        snprintf(err, errlen, "out of memory counting the new keys");
        return PSW_ENOMEM;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = psw_key_at(keys, i);
        if (!has_key(t, k, psw_mix64(k)))
            nk[m++] = k;
    }
    qsort(nk, m, sizeof *nk, cmp_u64);
    size_t distinct = 0;
    for (size_t i = 0; i < m; i++)
        if (i == 0 || nk[i] != nk[i - 1])
            nk[distinct++] = nk[i];
    uint64_t adds = 0;
    int64_t full = near_cap ? shard_overfull(t, nk, distinct, &adds) : -1;
    free(nk);
    if (full == -2) {
        snprintf(err, errlen, "out of memory counting the new keys");
        return PSW_ENOMEM;
    }
    /* The shard's limit is structural (32-bit row numbers): no reload
     * lifts it, more shards do (psd --export, then --import under an ini
     * with more: --reshard moves whole shards, it cannot split them). */
    if (full >= 0) {
        const shard *s = &t->shards[full];
        char sums[80] = "";
        if (s->acc_new)
            snprintf(sums, sizeof sums, " (%llu of them keys of the current "
                     "clock's sum)", (unsigned long long)s->acc_new);
        snprintf(err, errlen, "table '%s': shard %lld holds %llu rows%s of "
                 "the %llu one shard can hold: this push would add %llu more "
                 "(more shards spread the rows: psd --export, then psd "
                 "--import under an ini with more shards)",
                 t->conf.name, (long long)full,
                 (unsigned long long)(s->nrows + s->acc_new), sums,
                 (unsigned long long)t->shard_rows_max,
                 (unsigned long long)adds);
        return PSW_EFULL;
    }
    if (t->conf.max_rows == 0 || held + distinct <= t->conf.max_rows)
        return 0;
    snprintf(err, errlen, "table '%s' holds %llu rows on this node "
             "(max_rows = %llu): this push would add %zu more",
             t->conf.name, (unsigned long long)held,
             (unsigned long long)t->conf.max_rows, distinct);
    return PSW_EFULL;
}

void psd_table_push_range(psd_table *t, uint64_t first, uint64_t count,
                          const char *vals)
{
    size_t rb = row_bytes(t);
    for (uint64_t i = 0; i < count;) {
        shard *s = &t->shards[shard_of(t, first + i)];
        uint64_t end = s->first + s->nrows;
        for (; i < count && first + i < end; i++)
            apply(t, dense_ref(t, s, first + i), vals + i * rb);
    }
}

void psd_table_pull_range(const psd_table *t, uint64_t first, uint64_t count,
                          char *out)
{
    size_t rb = row_bytes(t);
    for (uint64_t i = 0; i < count;) {
        const shard *s = &t->shards[shard_of(t, first + i)];
        uint64_t end = s->first + s->nrows, m = end - (first + i);
        if (m > count - i)
            m = count - i;
        /* Rows of one shard are contiguous: one copy per shard. */
        memcpy(out + i * rb, dense_ref(t, s, first + i).w, (size_t)m * rb);
        i += m;
    }
}

/* The side table of a bsp table: sparse (only touched keys take room),
 * summing, zero-initialised, every shard local. */
static psd_table *acc_get(psd_table *t)
{
    if (!t->acc) {
        psd_table_conf c = t->conf;
        char err[64];
        c.dense = 0;
        c.rows = 0;
        c.upd.kind = PSD_UPD_SUM;
        c.init.kind = PSD_INIT_ZEROS;
        t->acc = psd_table_new(&c, t->nshards, 1, 0, err, sizeof err);
    }
    return t->acc;
}

int psd_table_accumulate(psd_table *t, const char *keys, size_t n,
                         const char *vals)
{
    size_t applied;
    return psd_table_accumulate_some(t, keys, n, vals, &applied);
}

int psd_table_accumulate_some(psd_table *t, const char *keys, size_t n,
                              const char *vals, size_t *applied)
{
    *applied = 0;
    psd_table *a = acc_get(t);
    if (!a)
        return PSW_ENOMEM;
    if (t->conf.dense)           /* its side table has every row */
        return psd_table_push_some(a, keys, n, vals, applied);
    /* Count the keys that will become rows when the sum is applied, so
     * that max_rows holds for pushes of the current clock too. */
    size_t rb = row_bytes(t);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = psw_key_at(keys, i);
        uint64_t h = psw_mix64(k);
        int fresh = !has_key(t, k, h);
        if (psd_table_push(a, keys + 8 * i, 1, vals + i * rb))
            return PSW_ENOMEM;
        t->acc_new += fresh;
        t->shards[shard_of_hash(t, h)].acc_new += fresh;
        *applied = i + 1;
    }
    return 0;
}

int psd_table_accumulate_range(psd_table *t, uint64_t first, uint64_t count,
                               const char *vals)
{
    psd_table *a = acc_get(t);
    if (!a)
        return PSW_ENOMEM;
    size_t rb = row_bytes(t);
    for (uint64_t i = 0; i < count; i++) {
        char key[8];
        uint64_t k = first + i;
        memcpy(key, &k, 8);
        if (psd_table_push(a, key, 1, vals + i * rb))
            return PSW_ENOMEM;
    }
    return 0;
}

/* Calls fn(ctx, key, weights) for every row of sparse shard s, wherever
 * rows live, until fn returns non-zero, which it returns. */
typedef struct row_fn {
    int (*fn)(void *ctx, uint64_t key, float *w);
    void *ctx;
} row_fn;

/* each_hslot's fn for each_row. */
static int slot_row(void *ctx, hslot *x)
{
    const row_fn *r = ctx;
    return r->fn(r->ctx, x->key, &x->inl);
}

static int each_row(const psd_table *t, shard *s,
                    int (*fn)(void *ctx, uint64_t key, float *w), void *ctx)
{
    if (t->inl) {
        row_fn r = { fn, ctx };
        return each_hslot(s, slot_row, &r);
    }
    int rc = 0;
    for (uint32_t r = 0; r < s->nrows && !rc; r++) {
        char *x = rec_at(t, s, r);
        rc = fn(ctx, rec_key(x), rec_w(x));
    }
    return rc;
}

typedef struct sum_to {
    psd_table *t;
    float scale;
} sum_to;

/* each_row: applies the sum g (dim floats, scaled in place) of `key`. */
static int apply_sum(void *ctx, uint64_t key, float *g)
{
    const sum_to *to = ctx;
    psd_table *t = to->t;
    rowref r;
    uint32_t d = t->conf.dim;
    if (locate(t, key, &r))
        return PSW_ENOMEM;
    if (to->scale != 1.0f)
        for (uint32_t k = 0; k < d; k++)
            g[k] *= to->scale;
    psd_update_row(&t->conf.upd, r.w, r.st, r.step, g, d);
    return 0;
}

int psd_table_apply_accumulated(psd_table *t, float scale)
{
    psd_table *a = t->acc;
    t->acc_new = 0;
    for (uint32_t i = 0; i < t->nshards; i++)
        t->shards[i].acc_new = 0;
    if (!a)
        return 0;
    sum_to to = { t, scale };
    int err = 0;
    for (uint32_t i = 0; i < a->nshards; i++) {
        shard *s = &a->shards[i];
        int rc = each_row(a, s, apply_sum, &to);
        if (rc && !err)
            err = rc;
        /* Emptied even when a row failed part way through, so that no
         * row is applied twice at the next clock; and the shards after it
         * are applied all the same, so that none of this clock's sums is
         * left to join the next clock's (with its divisor). The chunks
         * and the slots stay for the next clock (old ones that were
         * still moving go). */
        if (s->hcap)
            memset(a->inl ? (void *)s->slots : (void *)s->cslots, 0,
                   s->hcap * (a->inl ? sizeof(hslot) : sizeof(cslot)));
        free(s->oslots);
        free(s->ocslots);
        free(s->next);
        s->oslots = NULL;
        s->ocslots = NULL;
        s->next = NULL;
        s->ocap = s->moved = s->ready = 0;
        a->rows_held -= s->nrows;
        s->nrows = 0;
    }
    return err;
}

/* ftrl's z for which a push of a zero gradient (n = 0) gives w back, in
 * the float arithmetic update_ftrl does it in (daemon/updater.c): z from
 * the formula in double, rounded, is an ulp off for most weights, and the
 * first push moved every imported weight by one. So the float z nearest
 * is walked, ulp by ulp, to one that gives w exactly, or the closest one
 * near. Not always exact: with n = 0 one ulp of z moves w by ulp(z) over
 * beta / lr + l2, coarser than a small w's own ulp when |z| is near a large
 * l1 (README gives figures). 0 where no z gives w (w 0, or beta = l2 = 0:
 * the divisor is 0). */
static float ftrl_z_for(const psd_updater_params *u, float w)
{
    const float inv_alpha = 1.0f / u->lr;
    const float den = (u->beta + sqrtf(0.0f)) * inv_alpha + u->l2;
    if (w == 0 || !(den > 0))
        return 0.0f;
    float z = (float)(-(double)w * ((double)u->beta / u->lr + u->l2) -
                      (w > 0 ? u->l1 : -u->l1));
    float best = z, err = INFINITY;
    for (int i = 0; i < 16; i++) {
        float got = fabsf(z) <= u->l1 ? 0.0f
                                      : -(z - copysignf(u->l1, z)) / den;
        if (got == w)
            return z;
        if (fabsf(got - w) < err) {
            err = fabsf(got - w);
            best = z;
        }
        /* w falls as z rises */
        z = nextafterf(z, got > w ? INFINITY : -INFINITY);
    }
    return best;
}

int psd_table_set_row(psd_table *t, uint64_t key, const float *w,
                      int *created)
{
    uint64_t held = t->rows_held;
    rowref r;
    if (locate(t, key, &r))
        return PSW_ENOMEM;
    *created = t->rows_held > held;
    memcpy(r.w, w, row_bytes(t));
    /* ftrl computes each weight from z and n at every push: with z = 0 the
     * first push all but wiped an imported weight (w' = (|g| w - g lr) /
     * (beta + |g|)). z is set so that n = 0 gives w back (or the nearest
     * weight it can), as if the row had been trained to it; with
     * beta = l2 = 0 no z does (the divisor is 0), and z stays 0. */
    const psd_updater_params *u = &t->conf.upd;
    if (u->kind == PSD_UPD_FTRL)
        for (uint32_t k = 0; k < t->conf.dim; k++)
            r.st[k] = ftrl_z_for(u, w[k]);
    return 0;
}

/* Ticks without a row created after which a readied array is let go:
 * a shard that stopped growing a few rows short of doubling would hold
 * it for good. Ten seconds of the node's ticks: a table still growing,
 * however slowly, keeps it (and its doubling stays short). */
#define READY_IDLE_TICKS 100

size_t psd_table_tidy(psd_table *t, size_t budget)
{
    size_t did = 0;
    int busy = 0;
    for (uint32_t i = 0; t->tidy_made != t->made && i < t->nshards; i++) {
        shard *s = &t->shards[i];
        if (s->ocap && did < budget)
            did += grow_step(s, budget - did);
        busy |= s->ocap != 0;
        if (!s->next)
            continue;
        if (s->nrows != s->ready_rows) {
            s->ready_rows = s->nrows;
            s->ready_idle = 0;
        } else if (++s->ready_idle >= READY_IDLE_TICKS) {
            free(s->next);
            s->next = NULL;
            s->ready = 0;
            s->ready_idle = 0;
        }
        busy |= s->next != NULL;
    }
    if (t->tidy_made != t->made)
        t->tidy_made = busy ? UINT64_MAX : t->made;
    if (t->acc)                  /* its idle ticks count too */
        did += psd_table_tidy(t->acc, budget - did);
    return did;
}

uint64_t psd_table_pending(const psd_table *t)
{
    return t->acc ? t->acc->rows_held : 0;
}

int psd_table_move_shard(psd_table *dst, psd_table *src, uint32_t s,
                         char *err, size_t errlen)
{
    const psd_table_conf *a = &dst->conf, *b = &src->conf;
    if (a->dense != b->dense || a->dim != b->dim || a->rows != b->rows ||
        a->upd.kind != b->upd.kind || dst->nshards != src->nshards) {
        snprintf(err, errlen, "table '%s' differs between the two layouts",
                 a->name);
        return -1;
    }
    if (s >= dst->nshards || !dst->shards[s].owned || !src->shards[s].owned) {
        snprintf(err, errlen, "table '%s': shard %u is not owned on both "
                 "sides", a->name, s);
        return -1;
    }
    shard *d = &dst->shards[s], *o = &src->shards[s];
    dst->rows_held -= d->nrows;
    shard_free(d);
    *d = *o;
    dst->rows_held += o->nrows;
    dst->tidy_made = UINT64_MAX;     /* the shard may have slots to move */
    src->rows_held -= o->nrows;
    memset(o, 0, sizeof *o);     /* src owns nothing of it any more */
    return 0;
}

uint64_t psd_table_rows(const psd_table *t)
{
    return t->rows_held;
}

size_t psd_table_bytes(const psd_table *t)
{
    size_t b = sizeof *t + t->nshards * sizeof(shard);
    size_t per_row = (size_t)psd_updater_row_bytes(t->conf.upd.kind,
                                                   t->conf.dim);
    for (uint32_t i = 0; i < t->nshards; i++) {
        const shard *s = &t->shards[i];
        if (t->conf.dense)
            b += (size_t)s->nrows * per_row;
        else if (t->inl)
            b += (s->hcap + s->ocap) * sizeof(hslot) + s->ready;
        else    /* records hold the key too */
            b += (s->nchunks << t->chunk_bits) *
                     (per_row + sizeof(uint64_t)) +
                 (s->hcap + s->ocap) * sizeof(cslot) + s->ready +
                 s->nchunks * 3 * sizeof(void *);
    }
    /* A bsp table's sums of the clock in progress: kept between clocks,
     * as much again as the rows pushed (they went uncounted). */
    if (t->acc)
        b += psd_table_bytes(t->acc);
    return b;
}

/* ---- saving and loading ------------------------------------------------ */

/* A shard on the stream: u32 index, u64 rows, then for a sparse shard the
 * keys in row order, then weights, optimizer state and step counters in
 * row order (dense shards are three arrays; sparse ones chunk by chunk).
 * A table is: u32 shards written, those shards, u8 has sums, and when
 * set, its bsp side table the same way. Little-endian, unpadded. */

#define put psd_put
#define get psd_get

/* Calls io(ctx, bytes, n) on a chunk table's shard in file order: every
 * chunk's weights, then every chunk's state, then every chunk's step
 * counters (a chunk's rows are contiguous, the last one partial). The
 * weights sit between keys in the records, so they pass through a buffer:
 * gathered before io when saving, scattered after it when loading. */
static int each_chunk(const psd_table *t, const shard *s,
                      int (*io)(void *ctx, void *p, size_t n), void *ctx,
                      int saving)
{
    size_t crows = (size_t)1 << t->chunk_bits, d = t->conf.dim;
    size_t rb = row_bytes(t);
    /* A buffer of the shard's rows at most, none for an empty one: a
     * chunk's worth for every shard made a snapshot of many wide, mostly
     * empty shards take minutes in mmap and page faults (4 tables of
     * 65,535 shards of dim 65,536, all empty: 7.9 s). */
    if (!s->nrows)
        return 0;
    char *buf = malloc((s->nrows < crows ? (size_t)s->nrows : crows) * rb);
    if (!buf)
        return -2;               /* out of memory, not the file's end */
    int rc = 0;
    for (int part = 0; part < 3 && !rc; part++)
        for (size_t c = 0; c < s->nchunks && !rc; c++) {
            size_t first = c * crows;
            if (first >= s->nrows)
                break;
            size_t n = s->nrows - first < crows ? s->nrows - first : crows;
            if (part == 0) {
                for (size_t i = 0; i < n && saving; i++)
                    memcpy(buf + i * rb, rec_w(s->rc[c] + i * t->rec), rb);
                rc = io(ctx, buf, n * rb);
                for (size_t i = 0; i < n && !saving && !rc; i++)
                    memcpy(rec_w(s->rc[c] + i * t->rec), buf + i * rb, rb);
            } else if (part == 1 && t->nstate)
                rc = io(ctx, s->stc[c], n * d * t->nstate * sizeof(float));
            else if (part == 2 && t->has_step)
                rc = io(ctx, s->stepc[c], n * sizeof(uint32_t));
        }
    free(buf);
    return rc ? -1 : 0;
}

static int put_chunk(void *ctx, void *p, size_t n)
{
    return put(ctx, p, n);
}

static int get_chunk(void *ctx, void *p, size_t n)
{
    return get(ctx, p, n);
}

/* Writes a sparse shard's keys in row order: gathered from the slots when
 * rows live there, else from the records a chunk at a time. */
static int put_sparse_keys(const psd_table *t, const shard *s, psd_sink *o)
{
    size_t n = (size_t)s->nrows, crows = (size_t)1 << t->chunk_bits;
    /* No more than the shard's rows (each_chunk). */
    size_t cap = t->inl || n < crows ? n : crows;
    uint64_t *keys = malloc((cap ? cap : 1) * sizeof *keys);
    if (!keys)
        return -1;
    int rc = 0;
    if (t->inl) {
        (void)each_hslot(s, slot_key_out, keys);
        rc = put(o, keys, n * sizeof *keys);
    } else
        for (size_t first = 0; first < n && !rc; first += crows) {
            size_t m = n - first < crows ? n - first : crows;
            const char *r = s->rc[first >> t->chunk_bits];
            for (size_t i = 0; i < m; i++)
                keys[i] = rec_key(r + i * t->rec);
            rc = put(o, keys, m * sizeof *keys);
        }
    free(keys);
    return rc;
}

/* Writes a sparse shard's rows: weights, then state, then steps, each in
 * row order; from the chunks a chunk at a time (a chunk's rows are
 * contiguous), or gathered from the slots when rows live there. */
static int put_sparse_rows(const psd_table *t, const shard *s, psd_sink *o)
{
    if (t->inl) {
        float *w = malloc((size_t)(s->nrows ? s->nrows : 1) * sizeof *w);
        if (!w)
            return -1;
        (void)each_hslot(s, slot_w_out, w);
        int rc = put(o, w, (size_t)s->nrows * sizeof *w);
        free(w);
        return rc;
    }
    return each_chunk(t, s, put_chunk, o, 1);
}

static int save_shards(const psd_table *t, psd_sink *o)
{
    uint32_t owned = 0;
    for (uint32_t i = 0; i < t->nshards; i++)
        owned += t->shards[i].owned;
    if (put(o, &owned, sizeof owned))
        return -1;
    size_t d = t->conf.dim;
    for (uint32_t i = 0; i < t->nshards; i++) {
        const shard *s = &t->shards[i];
        if (!s->owned)
            continue;
        uint64_t n = s->nrows;
        if (put(o, &i, sizeof i) || put(o, &n, sizeof n))
            return -1;
        if (t->conf.dense) {
            if (put(o, s->w, (size_t)n * d * sizeof(float)) ||
                (t->nstate &&
                 put(o, s->st, (size_t)n * d * t->nstate * sizeof(float))) ||
                (t->has_step && put(o, s->steps, (size_t)n * sizeof(uint32_t))))
                return -1;
            continue;
        }
        if (put_sparse_keys(t, s, o) || put_sparse_rows(t, s, o))
            return -1;
    }
    return 0;
}

/* A sink into an array of known size (psd_table_keys). */
typedef struct fill {
    char *at;
    size_t left;
} fill;

static int fill_put(void *ctx, const void *p, size_t n)
{
    fill *f = ctx;
    if (n > f->left)
        return -1;
    memcpy(f->at, p, n);
    f->at += n;
    f->left -= n;
    return 0;
}

int psd_table_keys(const psd_table *t, uint64_t *keys)
{
    fill f = { (char *)keys, (size_t)t->rows_held * sizeof *keys };
    psd_sink out = { fill_put, &f };
    for (uint32_t i = 0; i < t->nshards; i++) {
        const shard *s = &t->shards[i];
        if (!s->owned)
            continue;
        if (!t->conf.dense) {
            if (put_sparse_keys(t, s, &out))
                return -1;
            continue;
        }
        for (uint64_t r = s->first; r < s->first + s->nrows; r++)
            if (put(&out, &r, sizeof r))
                return -1;
    }
    return 0;
}

int psd_table_save(const psd_table *t, psd_sink *out)
{
    if (save_shards(t, out))
        return -1;
    uint8_t sums = t->acc != NULL && psd_table_rows(t->acc) > 0;
    if (put(out, &sums, 1))
        return -1;
    return sums ? save_shards(t->acc, out) : 0;
}

#define LOADFAIL(...) do { snprintf(err, errlen, __VA_ARGS__); \
                           return -1; } while (0)

/* Reads what put_sparse_rows wrote into a shard whose keys are loaded
 * (so its rows exist, numbered in the order written). Returns 0, -1 when
 * the file ends, or -2 out of memory. */
static int get_sparse_rows(psd_table *t, shard *s, psd_source *in)
{
    if (t->inl) {
        /* As many floats as keys already read: the file holds them. */
        float *w = malloc((size_t)(s->nrows ? s->nrows : 1) * sizeof *w);
        if (!w)
            return -2;
        if (get(in, w, (size_t)s->nrows * sizeof *w)) {
            free(w);
            return -1;
        }
        (void)each_hslot(s, slot_w_in, w);
        free(w);
        return 0;
    }
    return each_chunk(t, s, get_chunk, in, 0);
}

/* The count of shards saved, which must be the ones node `node` of
 * `nnodes` owns of `shards`. 0, or -1 with err. */
static int get_shard_count(psd_source *in, uint32_t shards, int nnodes,
                           int node, uint32_t *count, char *err,
                           size_t errlen)
{
    uint32_t owned = 0;
    for (uint32_t i = 0; i < shards; i++)
        owned += psw_node_of_shard(i, nnodes) == node;
    if (get(in, count, sizeof *count))
        LOADFAIL("truncated");
    if (*count != owned)
        LOADFAIL("%u shards saved, this node owns %u of %u", *count, owned,
                 shards);
    return 0;
}

/* The next saved shard's index *i and row count *n: one of this node's,
 * after *prev (updated). 0, or -1 with err. */
static int get_shard_head(psd_source *in, uint32_t shards, int nnodes,
                          int node, int64_t *prev, uint32_t *i, uint64_t *n,
                          char *err, size_t errlen)
{
    if (get(in, i, sizeof *i) || get(in, n, sizeof *n))
        LOADFAIL("truncated");
    if (*i >= shards || psw_node_of_shard(*i, nnodes) != node ||
        (int64_t)*i <= *prev)
        LOADFAIL("shard %u is not this node's next shard", *i);
    *prev = *i;
    return 0;
}

static int load_shards(psd_table *t, psd_source *in, char *err,
                       size_t errlen)
{
    uint32_t count;
    if (get_shard_count(in, t->nshards, t->nnodes, t->node, &count, err,
                        errlen))
        return -1;
    size_t d = t->conf.dim;
    int64_t prev = -1;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t i;
        uint64_t n;
        if (get_shard_head(in, t->nshards, t->nnodes, t->node, &prev, &i, &n,
                           err, errlen))
            return -1;
        shard *s = &t->shards[i];
        if (t->conf.dense) {
            if (n != s->nrows)
                LOADFAIL("shard %u holds %llu rows, the table %llu here", i,
                         (unsigned long long)n,
                         (unsigned long long)s->nrows);
            if (get(in, s->w, (size_t)n * d * sizeof(float)) ||
                (t->nstate &&
                 get(in, s->st, (size_t)n * d * t->nstate * sizeof(float))) ||
                (t->has_step && get(in, s->steps, (size_t)n * sizeof(uint32_t))))
                LOADFAIL("truncated in the rows of shard %u", i);
            continue;
        }
        if (s->nrows != 0)
            LOADFAIL("shard %u already has rows", i);
        if (n > t->shard_rows_max)
            LOADFAIL("shard %u claims %llu rows, more than one shard can "
                     "hold (%llu)", i, (unsigned long long)n,
                     (unsigned long long)t->shard_rows_max);
        /* Keys come in a bounded batch at a time, so a hostile count
         * costs only what the file really holds. */
        uint64_t batch[1024];
        for (uint64_t r = 0; r < n;) {
            size_t m = n - r < 1024 ? (size_t)(n - r) : 1024;
            if (get(in, batch, m * sizeof *batch))
                LOADFAIL("truncated in the keys of shard %u", i);
            for (size_t j = 0; j < m; j++, r++) {
                uint64_t h = psw_mix64(batch[j]);
                if (shard_of_hash(t, h) != i)
                    LOADFAIL("key %llu does not belong to shard %u",
                             (unsigned long long)batch[j], i);
                uint64_t before = s->nrows;
                rowref unused;
                if (sparse_get(t, s, batch[j], h, &unused))
                    LOADFAIL("out of memory");
                if (s->nrows == before)
                    LOADFAIL("key %llu appears twice in shard %u",
                             (unsigned long long)batch[j], i);
            }
        }
        /* Out of memory is not a damaged file: that word sent an
         * operator to --skip-snapshot, which starts without the model. */
        int got = get_sparse_rows(t, s, in);
        if (got == -2)
            LOADFAIL("out of memory reading the rows of shard %u", i);
        if (got)
            LOADFAIL("truncated in the rows of shard %u", i);
    }
    return 0;
}

/* One walk over the sums of a clock just loaded into t's side table. */
typedef struct sums_walk {
    psd_table *t;
    uint64_t key;                /* the key looked at last */
    uint64_t fresh;              /* sparse keys t holds no row of yet */
} sums_walk;

/* each_row: non-zero when `key` is no row of this node (a dense row past
 * the end or in another node's shard, a sparse key of another node's
 * shard), which applying the sums at the end of the clock could not
 * reach; else counts a sparse key that applying them will create. */
static int walk_sum(void *ctx, uint64_t key, float *w)
{
    sums_walk *sw = ctx;
    psd_table *t = sw->t;
    (void)w;
    sw->key = key;
    if (t->conf.dense)
        return key >= t->conf.rows || !t->shards[shard_of(t, key)].owned;
    uint64_t h = psw_mix64(key);
    shard *s = &t->shards[shard_of_hash(t, h)];
    if (!s->owned)
        return 1;
    int fresh = !sparse_has(t, s, key, h);
    sw->fresh += fresh;
    s->acc_new += fresh;
    return 0;
}

int psd_table_load(psd_table *t, psd_source *in, char *err, size_t errlen)
{
    if (load_shards(t, in, err, errlen))
        return -1;
    uint8_t sums;
    if (get(in, &sums, 1))
        LOADFAIL("truncated");
    if (sums > 1 || (sums && t->conf.consistency != PSD_CONS_BSP))
        LOADFAIL("sums of a clock saved for a table that is not bsp");
    if (!sums)
        return 0;
    psd_table *a = acc_get(t);
    if (!a)
        LOADFAIL("out of memory");
    char inner[200];
    if (load_shards(a, in, inner, sizeof inner))
        LOADFAIL("in the sums of the current clock: %s", inner);
    sums_walk sw = { t, 0, 0 };
    for (uint32_t i = 0; i < a->nshards; i++)
        if (each_row(a, &a->shards[i], walk_sum, &sw))
            LOADFAIL("in the sums of the current clock: key %llu is not a "
                     "row of this node", (unsigned long long)sw.key);
    t->acc_new += sw.fresh;
    return 0;
}

/* Reads and drops n bytes of in. 0 or -1. */
static int discard(psd_source *in, uint64_t n)
{
    char buf[1 << 16];
    while (n > 0) {
        size_t k = n < sizeof buf ? (size_t)n : sizeof buf;
        if (get(in, buf, k))
            return -1;
        n -= k;
    }
    return 0;
}

/* load_shards without a table: per row, `per` bytes (its key, weights,
 * state and step). */
static int skip_shards(const psd_table_conf *c, uint64_t per, uint32_t shards,
                       int nnodes, int node, psd_source *in, char *err,
                       size_t errlen)
{
    uint32_t count;
    if (get_shard_count(in, shards, nnodes, node, &count, err, errlen))
        return -1;
    int64_t prev = -1;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t i;
        uint64_t n;
        if (get_shard_head(in, shards, nnodes, node, &prev, &i, &n, err,
                           errlen))
            return -1;
        if (c->dense) {
            uint64_t want = psw_dense_shard_start(c->rows, shards, i + 1) -
                            psw_dense_shard_start(c->rows, shards, i);
            if (n != want)
                LOADFAIL("shard %u holds %llu rows, the table %llu here", i,
                         (unsigned long long)n, (unsigned long long)want);
        } else if (n > UINT64_MAX / per)
            LOADFAIL("shard %u claims %llu rows", i, (unsigned long long)n);
        if (discard(in, n * per))
            LOADFAIL("truncated in the rows of shard %u", i);
    }
    return 0;
}

int psd_table_skip(const psd_table_conf *conf, uint32_t shards, int nnodes,
                   int node, psd_source *in, char *err, size_t errlen)
{
    uint64_t per = psd_updater_row_bytes(conf->upd.kind, conf->dim) +
                   (conf->dense ? 0 : sizeof(uint64_t));
    if (skip_shards(conf, per, shards, nnodes, node, in, err, errlen))
        return -1;
    uint8_t sums;
    if (get(in, &sums, 1))
        LOADFAIL("truncated");
    if (sums > 1 || (sums && conf->consistency != PSD_CONS_BSP))
        LOADFAIL("sums of a clock saved for a table that is not bsp");
    if (!sums)
        return 0;
    /* The sums are a sparse table of sum rows on every shard (acc_get). */
    psd_table_conf acc = *conf;
    acc.dense = 0;
    acc.rows = 0;
    char inner[200];
    if (skip_shards(&acc, (uint64_t)conf->dim * sizeof(float) +
                              sizeof(uint64_t), shards, 1, 0, in, inner,
                    sizeof inner))
        LOADFAIL("in the sums of the current clock: %s", inner);
    return 0;
}

const float *psd_table_dense_run(const psd_table *t, uint64_t first,
                                 uint64_t count, uint64_t *run)
{
    if (!t->conf.dense || count == 0)
        return NULL;
    const shard *s = &t->shards[shard_of(t, first)];
    uint64_t m = s->first + s->nrows - first;
    *run = m < count ? m : count;
    return dense_ref(t, s, first).w;
}
