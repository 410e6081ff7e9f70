/* Per-client memory of applied pushes; see dedup.h. Each client keeps an
 * open-addressing table of (ts, part) -> status. Entries below the
 * client's mark are dead: lookups ignore them and the next rebuild drops
 * them, so a table holds at most four times what is live. */
#include <stdlib.h>
#include <string.h>

#include "dedup.h"
#include "../proto/layout.h"
#include "../proto/status.h"

#define MIN_CAP 16

typedef struct entry {
    uint64_t ts;                 /* 0: a free slot (timestamps start at 1) */
    uint32_t part;
    int32_t status;
} entry;

struct psd_dclient {
    uint64_t id, incarnation;
    uint64_t low;                /* requests below it are complete */
    entry *tab;
    size_t cap, n;               /* n counts dead entries too */
    int nconns;                  /* connections attached */
    uint64_t idle_since;         /* when nconns fell to 0 */
    struct psd_dclient *next;    /* hash chain */
};

struct psd_dedup {
    psd_dclient **bucket;
    size_t nbuckets;             /* power of two */
    size_t nclients;
};

static size_t client_hash(uint64_t id, uint64_t incarnation)
{
    return (size_t)psw_mix64(id ^ psw_mix64(incarnation));
}

static size_t slot_of(uint64_t ts, uint32_t part, size_t cap)
{
    return (size_t)psw_mix64(ts ^ ((uint64_t)part << 40)) & (cap - 1);
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
        c->next = d->bucket[i];
        d->bucket[i] = c;
        if (++d->nclients > d->nbuckets)
            grow_buckets(d);
    }
    c->nconns++;
    c->idle_since = now_ms;
    return c;
}

void psd_dedup_detach(psd_dedup *d, psd_dclient *c, uint64_t now_ms)
{
    (void)d;
    if (c->nconns > 0 && --c->nconns == 0)
        c->idle_since = now_ms;
}

int psd_dedup_seen(const psd_dclient *c, uint64_t ts, uint32_t part,
                   int *status)
{
    if (ts < c->low) {
        *status = PSW_OK;        /* complete at the client: a stale copy */
        return 1;
    }
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

int psd_dedup_record(psd_dclient *c, uint64_t ts, uint32_t part, int status)
{
    if (ts < c->low || ts == 0)
        return 0;
    if (2 * (c->n + 1) > c->cap && rebuild(c))
        return -1;
    put(c->tab, c->cap, (entry){ ts, part, status });
    c->n++;
    return 0;
}

void psd_dedup_ack(psd_dclient *c, uint64_t upto)
{
    if (upto > c->low)
        c->low = upto;
}

void psd_dedup_expire(psd_dedup *d, uint64_t now_ms, uint64_t ttl_ms)
{
    for (size_t i = 0; i < d->nbuckets; i++)
        for (psd_dclient **pp = &d->bucket[i]; *pp;) {
            psd_dclient *c = *pp;
            if (c->nconns == 0 && now_ms - c->idle_since >= ttl_ms) {
                *pp = c->next;
                client_free(c);
                d->nclients--;
            } else
                pp = &c->next;
        }
}

void psd_dedup_size(const psd_dedup *d, size_t *clients, size_t *entries,
                    size_t *bytes)
{
    size_t n = 0, b = sizeof *d + d->nbuckets * sizeof *d->bucket;
    for (size_t i = 0; i < d->nbuckets; i++)
        for (const psd_dclient *c = d->bucket[i]; c; c = c->next) {
            n += c->n;
            b += sizeof *c + c->cap * sizeof(entry);
        }
    *clients = d->nclients;
    *entries = n;
    *bytes = b;
}
