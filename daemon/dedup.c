/* Per-client memory of applied pushes; see dedup.h. Each client keeps an
 * open-addressing table of (ts, part) -> status. Entries below the
 * client's mark are dead: lookups ignore them and the next rebuild drops
 * them, so a table holds at most four times what is live. Beside it, a
 * ring of the recorded timestamps in the order they came counts what is
 * live: an ACK pops the dead ones off its front, so the limits are
 * checked in constant time, where counting the table would walk all of
 * it (a client kept at its limit could make every push pay that walk). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "secret.h"
#include "../proto/layout.h"
#include "../proto/msg.h"
#include "../proto/status.h"

#define MIN_CAP 16
/* Clients forgotten with pushes they had not acknowledged, kept as a
 * tombstone each (its struct, 184 bytes, about 190 with the allocator's,
 * without table or ring: about 3 MB for all): at most this many, the
 * oldest let go first. */
#define MAX_TOMBS 16384

typedef struct entry {
    uint64_t ts;                 /* 0: a free slot (timestamps start at 1) */
    uint32_t part;
    int32_t status;
} entry;

struct psd_dclient {
    uint64_t id, incarnation;
    uint64_t low;                /* requests below it are complete */
    uint64_t top;                /* one above the highest push ts this
                                    node has seen of it: a client's ACK
                                    moves low no higher (psd_dedup_ack) */
    entry *tab;
    size_t cap, n;               /* n counts dead entries too */
    /* The ts of each entry, oldest record first; a record that comes
     * after newer ones (a retransmission) stays counted until those
     * before it are dead, so `live` is exact or a little above. */
    uint64_t *ring;
    size_t rhead, live, rcap;    /* rcap: a power of two, or 0 */
    uint64_t last_ts;            /* of the latest record */
    uint64_t refused_ts;         /* of a push refused at the limits
                                    (psd_dedup_refused) while its parts
                                    come in a row, or 0 */
    /* The 4-byte fields in pairs: a client with nothing live costs its
     * struct, under the 200 bytes conf/psd.ini counts. */
    uint32_t last_parts;         /* records of last_ts in a row */
    int pushed;                  /* it sent this node a push, or a
                                    snapshot holds it */
    int nconns;                  /* connections attached */
    int tomb;                    /* kept only for that, in d's tombs */
    uint64_t journaled;          /* the mark last handed to the journal */
    uint64_t idle_since;         /* when nconns fell to 0 */
    /* Its memory of pushes from low up to here was dropped (client_ttl,
     * or to make room at max_remembered_pushes) while it had not
     * acknowledged them: whether such a push was applied is not known,
     * so a copy of one is refused, not applied again (psd_dedup_seen). */
    uint64_t forgot;
    uint64_t rtop;               /* one above its highest push recorded
                                    (applied): what `forgot` becomes; a
                                    push refused at a check is not one */
    struct psd_dclient *tprev, *tnext;   /* d's tombs, oldest first */
    struct psd_dedup *owner;
    struct psd_dclient *next;    /* hash chain */
};

struct psd_dedup {
    psd_dclient **bucket;
    size_t nbuckets;             /* power of two */
    size_t nclients;             /* tombstones among them */
    size_t live;                 /* every client's `live` */
    psd_dclient *thead, *ttail;  /* tombstones, oldest first */
    size_t ntombs;
};

/* Clients choose ids, incarnations, timestamps and parts: hashed under
 * the process's secret, so that none can crowd one chain or probe run
 * (secret.h). */
static size_t client_hash(uint64_t id, uint64_t incarnation)
{
    return (size_t)(psd_secret_mix(2, id) ^ psd_secret_mix(3, incarnation));
}

static size_t slot_of(uint64_t ts, uint32_t part, size_t cap)
{
    return (size_t)(psd_secret_mix(0, ts) ^ psd_secret_mix(1, part)) &
           (cap - 1);
}

psd_dedup *psd_dedup_new(void)
{
    psd_dedup *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->nbuckets = 64;
    d->bucket = calloc(d->nbuckets, sizeof *d->bucket);
    if (!d->bucket) {
        free(d);
        return NULL;
    }
    return d;
}

static void client_free(psd_dclient *c)
{
    free(c->tab);
    free(c->ring);
    free(c);
}

void psd_dedup_free(psd_dedup *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nbuckets; i++)
        while (d->bucket[i]) {
            psd_dclient *c = d->bucket[i];
            d->bucket[i] = c->next;
            client_free(c);
        }
    free(d->bucket);
    free(d);
}

/* Doubles the bucket array once clients outnumber buckets. */
static void grow_buckets(psd_dedup *d)
{
    size_t nb = d->nbuckets * 2;
    psd_dclient **b = calloc(nb, sizeof *b);
    if (!b)
        return;                  /* longer chains, still correct */
    for (size_t i = 0; i < d->nbuckets; i++)
        while (d->bucket[i]) {
            psd_dclient *c = d->bucket[i];
            d->bucket[i] = c->next;
            size_t j = client_hash(c->id, c->incarnation) & (nb - 1);
            c->next = b[j];
            b[j] = c;
        }
    free(d->bucket);
    d->bucket = b;
    d->nbuckets = nb;
}

/* Takes tombstone c off d's list: forgotten for good, or back (its
 * client reconnected: it ages again as any client). */
static void unbury(psd_dedup *d, psd_dclient *c)
{
    if (!c->tomb)
        return;
    if (c->tprev)
        c->tprev->tnext = c->tnext;
    else
        d->thead = c->tnext;
    if (c->tnext)
        c->tnext->tprev = c->tprev;
    else
        d->ttail = c->tprev;
    c->tprev = c->tnext = NULL;
    c->tomb = 0;
    d->ntombs--;
}

psd_dclient *psd_dedup_attach(psd_dedup *d, uint64_t client_id,
                              uint64_t incarnation, uint64_t now_ms)
{
    size_t i = client_hash(client_id, incarnation) & (d->nbuckets - 1);
    psd_dclient *c = d->bucket[i];
    while (c && (c->id != client_id || c->incarnation != incarnation))
        c = c->next;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->id = client_id;
        c->incarnation = incarnation;
        c->owner = d;
        c->next = d->bucket[i];
        d->bucket[i] = c;
        if (++d->nclients > d->nbuckets)
            grow_buckets(d);
    }
    unbury(d, c);
    c->nconns++;
    c->idle_since = now_ms;
    return c;
}

/* Takes c out of d's chains and counts and frees it. */
static void forget(psd_dedup *d, psd_dclient *c)
{
    unbury(d, c);
    psd_dclient **pp = &d->bucket[client_hash(c->id, c->incarnation) &
                                  (d->nbuckets - 1)];
    while (*pp != c)
        pp = &(*pp)->next;
    *pp = c->next;
    d->live -= c->live;
    d->nclients--;
    client_free(c);
}

/* Lets go of c's table and ring (what it remembers push by push). */
static void drop_table(psd_dclient *c)
{
    free(c->tab);
    free(c->ring);
    c->tab = NULL;
    c->ring = NULL;
    c->cap = c->n = 0;
    c->rcap = c->rhead = 0;
}

/* Drops what c remembers of its pushes, which it had not all
 * acknowledged, keeping it as a tombstone that refuses their copies (the
 * caller then calls trim_tombs: c stays in its hash chain until then). */
static void bury(psd_dedup *d, psd_dclient *c)
{
    d->live -= c->live;
    c->live = 0;
    drop_table(c);
    if (c->rtop > c->forgot)
        c->forgot = c->rtop;
    if (c->tomb)
        return;
    c->tomb = 1;
    c->tprev = d->ttail;
    if (d->ttail)
        d->ttail->tnext = c;
    else
        d->thead = c;
    d->ttail = c;
    d->ntombs++;
}

/* Past MAX_TOMBS, the oldest tombstones are forgotten for good. */
static void trim_tombs(psd_dedup *d)
{
    while (d->ntombs > MAX_TOMBS)
        forget(d, d->thead);
}

void psd_dedup_detach(psd_dedup *d, psd_dclient *c, uint64_t now_ms)
{
    if (c->nconns == 0 || --c->nconns > 0)
        return;
    /* A client that never sent this node a push (a reader, psctl, a
     * HELLO alone; its ACKs move a mark no push is checked against) holds
     * nothing a later push would be checked against: kept for client_ttl
     * it would cost memory for nothing, and any number of them could come
     * and go. Forgotten now. One that pushed is kept with its mark: a
     * copy of a push below it, late on a connection of its own, must
     * still not be applied. */
    if (!c->live && !c->pushed) {
        forget(d, c);
        return;
    }
    /* Kept for client_ttl with nothing live: its mark alone answers a
     * late copy, so the table and ring (384 bytes at their least) go,
     * and a client known costs its struct (a trial counted 533 bytes
     * each for 20,000 clients that pushed once and left). */
    if (!c->live)
        drop_table(c);
    c->idle_since = now_ms;
}

int psd_dedup_seen(const psd_dclient *c, uint64_t ts, uint32_t part,
                   int *status)
{
    if (ts < c->low) {
        *status = PSW_OK;        /* complete at the client: a stale copy */
        return 1;
    }
    if (ts < c->forgot)
        return 2;                /* its record was dropped: not known */
    if (!c->cap)
        return 0;
    for (size_t j = slot_of(ts, part, c->cap); c->tab[j].ts;
         j = (j + 1) & (c->cap - 1))
        if (c->tab[j].ts == ts && c->tab[j].part == part) {
            *status = c->tab[j].status;
            return 1;
        }
    return 0;
}

uint64_t psd_dedup_forgot(const psd_dclient *c)
{
    return c->forgot;
}

static void put(entry *tab, size_t cap, entry e)
{
    size_t j = slot_of(e.ts, e.part, cap);
    while (tab[j].ts)
        j = (j + 1) & (cap - 1);
    tab[j] = e;
}

/* Rebuilds the table with only its live entries, sized so that at least a
 * quarter of it is free for new ones before the next rebuild. */
static int rebuild(psd_dclient *c)
{
    size_t live = 0;
    for (size_t j = 0; j < c->cap; j++)
        live += c->tab[j].ts >= c->low && c->tab[j].ts != 0;
    size_t cap = MIN_CAP;
    while (cap < 4 * (live + 1))
        cap *= 2;
    entry *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return -1;
    for (size_t j = 0; j < c->cap; j++)
        if (c->tab[j].ts >= c->low && c->tab[j].ts != 0)
            put(tab, cap, c->tab[j]);
    free(c->tab);
    c->tab = tab;
    c->cap = cap;
    c->n = live;
    return 0;
}

/* Moves the ring into one of cap entries (a power of two >= live), its
 * entries at the front. */
static int resize_ring(psd_dclient *c, size_t cap)
{
    uint64_t *r = malloc(cap * sizeof *r);
    if (!r)
        return -1;
    for (size_t i = 0; i < c->live; i++)
        r[i] = c->ring[(c->rhead + i) & (c->rcap - 1)];
    free(c->ring);
    c->ring = r;
    c->rcap = cap;
    c->rhead = 0;
    return 0;
}

/* A push of ts reached the node: a later ACK may say it is complete. */
static void saw(psd_dclient *c, uint64_t ts)
{
    if (ts != UINT64_MAX && ts + 1 > c->top)
        c->top = ts + 1;
}

void psd_dedup_pushed(psd_dclient *c, uint64_t ts)
{
    c->pushed = 1;
    saw(c, ts);
    /* A refused request's parts come in a row (the reference client
     * sends them so); a push of another ts ends it, and a client may
     * then send the refused request again under its ts. */
    if (ts != c->refused_ts)
        c->refused_ts = 0;
}

int psd_dedup_record(psd_dclient *c, uint64_t ts, uint32_t part, int status)
{
    c->pushed = 1;
    saw(c, ts);
    if (ts < c->low || ts == 0)
        return 0;
    /* Before anything that may run out of memory: the push was applied,
     * recorded or not, and a tombstone must cover it. */
    if (ts != UINT64_MAX && ts + 1 > c->rtop)
        c->rtop = ts + 1;
    if (c->live == c->rcap &&
        resize_ring(c, c->rcap ? 2 * c->rcap : MIN_CAP))
        return -1;
    if (2 * (c->n + 1) > c->cap && rebuild(c))
        return -1;
    put(c->tab, c->cap, (entry){ ts, part, status });
    c->n++;
    c->ring[(c->rhead + c->live) & (c->rcap - 1)] = ts;
    c->live++;
    c->owner->live++;
    c->last_parts = ts == c->last_ts && c->live > 1 ? c->last_parts + 1 : 1;
    c->last_ts = ts;
    return 0;
}

/* Moves c's mark up to upto: what psd_dedup_ack and psd_dedup_mark
 * share. */
static uint64_t mark(psd_dclient *c, uint64_t upto, uint64_t every)
{
    if (upto <= c->low)
        return 0;
    c->low = upto;
    while (c->live && c->ring[c->rhead] < upto) {
        c->rhead = (c->rhead + 1) & (c->rcap - 1);
        c->live--;
        c->owner->live--;
    }
    /* A client that had many pushes in flight and now has few gives the
     * memory back: the table when at most a sixteenth of it is live (it
     * then at least halves), the ring when at most a quarter is. A table
     * is sized with an eighth or more of it live, so a shrink's walk is
     * paid for by the sixteenth of it ACKed since, and an ACK costs
     * constant time on average. The limits count pushes; this keeps
     * each within 288 bytes (conf/psd.ini). */
    if (c->cap > MIN_CAP && 16 * (c->live + 1) <= c->cap)
        (void)rebuild(c);        /* out of memory: keeps the larger one */
    if (c->rcap > MIN_CAP && 4 * c->live <= c->rcap) {
        size_t cap = MIN_CAP;
        while (cap < 2 * c->live)
            cap *= 2;
        (void)resize_ring(c, cap);
    }
    if (upto - c->journaled < every)
        return 0;
    c->journaled = upto;
    return upto;
}

uint64_t psd_dedup_ack(psd_dclient *c, uint64_t upto, uint64_t every)
{
    /* A mark above every push this node has seen of the client says
     * nothing more about them, and taken as it came it would make every
     * later push look like a stale copy, answered OK and never applied
     * (a client's bug). A client's later requests legitimately carry
     * marks above what this node saw (its pulls, its pushes to other
     * nodes): clamped, they drop the same entries. */
    return mark(c, upto < c->top ? upto : c->top, every);
}

void psd_dedup_mark(psd_dclient *c, uint64_t upto)
{
    if (upto > c->top)
        c->top = upto;
    (void)mark(c, upto, UINT64_MAX);
}

int psd_dedup_room(const psd_dedup *d, const psd_dclient *c, uint64_t ts,
                   size_t per_client, size_t total, char *why, size_t whylen)
{
    /* A request a part of which was refused is refused whole: its later
     * parts were taken once an ACK (another client's) had made room, and
     * the request was applied in part on one node (a trial: 53 of 400
     * requests of 3,000 keys at max_frame = 1K). Until a push of another
     * ts (psd_dedup_pushed): the parts of a request come in a row. */
    if (ts && ts == c->refused_ts) {
        snprintf(why, whylen, "this node refused a part of this push at its "
                 "limits on remembered pushes (max_unacked_pushes = %zu, "
                 "max_remembered_pushes = %zu), and so refuses all of it",
                 per_client, total);
        return -1;
    }
    /* The parts of one request come together: once one is taken, so are
     * the others, and the limits do not cut a request in two. A request
     * has PSW_MAX_PARTS parts at most, and so many are waived over the
     * node's limit in all: a client that sent a million parts of one ts
     * grew this memory without bound and kept every other client's
     * pushes refused (a trial). */
    if (ts == c->last_ts && c->live && c->last_parts < PSW_MAX_PARTS &&
        d->live < total + PSW_MAX_PARTS)
        return 0;
    if (c->live >= per_client) {
        snprintf(why, whylen, "this node remembers %zu push%s of this "
                 "client that the client has not acknowledged as complete "
                 "(max_unacked_pushes = %zu): it has more pushes in flight "
                 "than that, or one of its requests has been outstanding a "
                 "long time, or it sends no ACK", c->live,
                 c->live == 1 ? "" : "es", per_client);
        return -1;
    }
    if (d->live >= total) {
        snprintf(why, whylen, "this node remembers %zu push%s of its "
                 "clients (max_remembered_pushes = %zu), and every client "
                 "holding them is connected", d->live,
                 d->live == 1 ? "" : "es", total);
        return 1;
    }
    return 0;
}

void psd_dedup_refused(psd_dclient *c, uint64_t ts)
{
    c->refused_ts = ts;
}

int psd_dedup_forget_idlest(psd_dedup *d, uint64_t *client_id,
                            uint64_t *incarnation, size_t *pushes,
                            uint64_t *idle_since)
{
    /* A walk over every client: it runs only at max_remembered_pushes. */
    psd_dclient *best = NULL;
    for (size_t i = 0; i < d->nbuckets; i++)
        for (psd_dclient *c = d->bucket[i]; c; c = c->next)
            if (c->nconns == 0 && c->live &&
                (!best || c->idle_since < best->idle_since))
                best = c;
    if (!best)
        return 0;
    *client_id = best->id;
    *incarnation = best->incarnation;
    *pushes = best->live;
    *idle_since = best->idle_since;
    bury(d, best);
    trim_tombs(d);
    return 1;
}

size_t psd_dedup_expire(psd_dedup *d, uint64_t now_ms, uint64_t ttl_ms,
                        size_t *unacked_clients, size_t *unacked)
{
    size_t gone = 0;
    *unacked_clients = *unacked = 0;
    for (size_t i = 0; i < d->nbuckets; i++)
        for (psd_dclient **pp = &d->bucket[i]; *pp;) {
            psd_dclient *c = *pp;
            if (c->nconns == 0 && !c->tomb &&
                now_ms - c->idle_since >= ttl_ms) {
                *unacked_clients += c->live > 0;
                *unacked += c->live;
                gone++;
                if (c->live || c->forgot > c->low) {
                    /* Kept as a tombstone: a copy of one of those pushes
                     * (or of those an earlier tombstone of it forgot, not
                     * acknowledged since) is refused. */
                    bury(d, c);
                    pp = &c->next;
                } else {
                    *pp = c->next;
                    client_free(c);
                    d->nclients--;
                }
            } else
                pp = &c->next;
        }
    trim_tombs(d);
    return gone;
}

void psd_dedup_size(const psd_dedup *d, size_t *clients, size_t *entries,
                    size_t *bytes)
{
    size_t b = sizeof *d + d->nbuckets * sizeof *d->bucket;
    for (size_t i = 0; i < d->nbuckets; i++)
        for (const psd_dclient *c = d->bucket[i]; c; c = c->next)
            b += sizeof *c + c->cap * sizeof(entry) +
                 c->rcap * sizeof *c->ring;
    *clients = d->nclients - d->ntombs;
    *entries = d->live;
    *bytes = b;
}

/* ---- saving and loading ------------------------------------------------ */

/* On the stream: u64 clients; per client u64 id, u64 incarnation, u64 low,
 * u64 entries, then per entry u64 ts, u32 part, i32 status. */

int psd_dedup_save(const psd_dedup *d, psd_sink *out)
{
    /* Tombstones are not saved: a restarted node no longer knows what
     * it forgot (docs/durability.md). */
    uint64_t n = d->nclients - d->ntombs;
    if (psd_put(out, &n, sizeof n))
        return -1;
    for (size_t i = 0; i < d->nbuckets; i++)
        for (const psd_dclient *c = d->bucket[i]; c; c = c->next) {
            if (c->tomb)
                continue;
            uint64_t live = 0;
            for (size_t j = 0; j < c->cap; j++)
                live += c->tab[j].ts >= c->low && c->tab[j].ts != 0;
            if (psd_put(out, &c->id, 8) || psd_put(out, &c->incarnation, 8) ||
                psd_put(out, &c->low, 8) || psd_put(out, &live, 8))
                return -1;
            for (size_t j = 0; j < c->cap; j++) {
                const entry *e = &c->tab[j];
                if (e->ts == 0 || e->ts < c->low)
                    continue;
                if (psd_put(out, &e->ts, 8) || psd_put(out, &e->part, 4) ||
                    psd_put(out, &e->status, 4))
                    return -1;
            }
        }
    return 0;
}

static int ts_order(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* A snapshot lists a client's pushes in the order of its table's slots,
 * not the order they came in: the ring is put back in ts order, which is
 * how they came. Else an ACK, which pops only the front of the ring,
 * stops at the first push above its mark and leaves the count of an
 * entire snapshot's pushes standing (max_unacked_pushes then refuses a
 * client that is far below it) until the mark passes all of them. */
static void order_ring(psd_dclient *c)
{
    if (c->live < 2 || c->rhead + c->live > c->rcap)
        return;                  /* wrapped: not a client just loaded */
    qsort(c->ring + c->rhead, c->live, sizeof *c->ring, ts_order);
    c->last_ts = c->ring[c->rhead + c->live - 1];
    c->last_parts = 0;
    for (size_t i = c->live; i-- > 0 && c->ring[c->rhead + i] == c->last_ts;)
        c->last_parts++;
}

int psd_dedup_load(psd_dedup *d, psd_source *in, uint64_t now_ms, char *err,
                   size_t errlen)
{
    uint64_t n;
    if (psd_get(in, &n, 8)) {
        snprintf(err, errlen, "truncated");
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id, inc, low, count;
        if (psd_get(in, &id, 8) || psd_get(in, &inc, 8) ||
            psd_get(in, &low, 8) || psd_get(in, &count, 8)) {
            snprintf(err, errlen, "truncated in client %llu of %llu",
                     (unsigned long long)i, (unsigned long long)n);
            return -1;
        }
        psd_dclient *c = psd_dedup_attach(d, id, inc, now_ms);
        if (!c) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        psd_dedup_mark(c, low);
        /* A client the snapshot holds was kept when it was written (a
         * reader then connected too): kept again, so that a node written
         * and loaded holds what it held (a push of ts 0 replayed from the
         * journal left one with neither mark nor pushes). */
        c->pushed = 1;
        for (uint64_t k = 0; k < count; k++) {
            uint64_t ts;
            uint32_t part;
            int32_t st;
            if (psd_get(in, &ts, 8) || psd_get(in, &part, 4) ||
                psd_get(in, &st, 4)) {
                snprintf(err, errlen, "truncated in the pushes of client "
                         "%016llx", (unsigned long long)id);
                psd_dedup_detach(d, c, now_ms);
                return -1;
            }
            if (psd_dedup_record(c, ts, part, st)) {
                snprintf(err, errlen, "out of memory");
                psd_dedup_detach(d, c, now_ms);
                return -1;
            }
        }
        order_ring(c);
        psd_dedup_detach(d, c, now_ms);   /* forgets one with nothing */
    }
    return 0;
}
