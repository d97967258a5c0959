/* kept.c: the engine's table of kept sequences (pe_seq_params.keep), shared by the client
 * threads (submit, append, release) and the replicas' threads (a final event).
 *
 * A kept sequence is RUNNING from its submit or append to its final event, then PARKED
 * (its replica holds its tokens and KV blocks) or DEAD (an engine failure ended it: no KV
 * is left); it leaves the table when the client releases it. The replica writes PARKED or
 * DEAD before it hands out the final event, so a client that took the event finds the
 * sequence ready for an append. A mutex guards the table; a lookup is linear, which suits
 * the few sequences a client keeps at once (chat sessions).
 */
#include <stdlib.h>

#include "engine/engine_internal.h"

void en_kept_init(pe_engine *e)
{
    pthread_mutex_init(&e->kept_mu, NULL);
    e->kept = NULL;
    e->nkept = e->kept_cap = 0;
}

void en_kept_destroy(pe_engine *e)
{
    free(e->kept);
    e->kept = NULL;
    e->nkept = e->kept_cap = 0;
    pthread_mutex_destroy(&e->kept_mu);
}

/* The entry of id (under kept_mu); NULL when none. */
static en_kept *find(pe_engine *e, uint64_t id)
{
    for (size_t i = 0; i < e->nkept; i++)
        if (e->kept[i].id == id)
            return &e->kept[i];
    return NULL;
}

pe_status en_kept_add(pe_engine *e, uint64_t id, int replica)
{
    pthread_mutex_lock(&e->kept_mu);
    pe_status s = PE_OK;
    if (e->nkept == e->kept_cap) {
        size_t cap = e->kept_cap ? 2 * e->kept_cap : 16;
        en_kept *v = realloc(e->kept, cap * sizeof *v);
        if (v) {
            e->kept = v;
            e->kept_cap = cap;
        } else {
            s = PE_ENOMEM;
        }
    }
    if (s == PE_OK)
        e->kept[e->nkept++] = (en_kept){id, replica, 0, EN_KEPT_RUNNING};
    pthread_mutex_unlock(&e->kept_mu);
    return s;
}

void en_kept_forget(pe_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->kept_mu);
    en_kept *k = find(e, id);
    if (k)
        *k = e->kept[--e->nkept];
    pthread_mutex_unlock(&e->kept_mu);
}

void en_kept_ended(pe_engine *e, uint64_t id, int parked, int ntok)
{
    pthread_mutex_lock(&e->kept_mu);
    en_kept *k = find(e, id);
    if (k) {
        k->state = parked ? EN_KEPT_PARKED : EN_KEPT_DEAD;
        k->ntok = ntok;
    }
    pthread_mutex_unlock(&e->kept_mu);
}

/* Why sequence id (entry k, possibly NULL) cannot take an append or a release now. */
static pe_status not_parked(const en_kept *k, uint64_t id, const char *call, pe_err *err)
{
    unsigned long long i = (unsigned long long)id;
    if (!k)
        return pe_fail(err, PE_EINVAL, "%s: sequence %llu is not a kept sequence of this engine "
                       "(submit it with keep = 1; a released one is gone)", call, i);
    if (k->state == EN_KEPT_RUNNING)
        return pe_fail(err, PE_EINVAL, "%s: sequence %llu is still generating; wait for its "
                       "final event (pe_seq_cancel ends it sooner)", call, i);
    return pe_fail(err, PE_EINVAL, "%s: sequence %llu ended with an error and holds no KV "
                   "cache; release it and submit the whole conversation again", call, i);
}

pe_status en_kept_take_for_append(pe_engine *e, uint64_t id, size_t n, int *replica,
                                  pe_err *err)
{
    pthread_mutex_lock(&e->kept_mu);
    en_kept *k = find(e, id);
    pe_status s = PE_OK;
    if (!k || k->state != EN_KEPT_PARKED)
        s = not_parked(k, id, "pe_seq_append", err);
    else if ((size_t)k->ntok + n >= (size_t)e->dec.cfg.maxT)
        s = pe_fail(err, PE_EINVAL, "pe_seq_append: sequence %llu holds %d tokens; %zu more reach "
                    "the model's context of %d; release it and start a shorter one",
                    (unsigned long long)id, k->ntok, n, e->dec.cfg.maxT);
    if (s == PE_OK) {
        k->state = EN_KEPT_RUNNING;
        *replica = k->replica;
    }
    pthread_mutex_unlock(&e->kept_mu);
    return s;
}

void en_kept_untake(pe_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->kept_mu);
    en_kept *k = find(e, id);
    if (k)
        k->state = EN_KEPT_PARKED;
    pthread_mutex_unlock(&e->kept_mu);
}

int en_kept_length(pe_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->kept_mu);
    en_kept *k = find(e, id);
    int n = k ? k->ntok : 0;
    pthread_mutex_unlock(&e->kept_mu);
    return n;
}

pe_status en_kept_take_for_release(pe_engine *e, uint64_t id, int *replica, int *parked,
                                   pe_err *err)
{
    pthread_mutex_lock(&e->kept_mu);
    en_kept *k = find(e, id);
    pe_status s = PE_OK;
    if (!k || k->state == EN_KEPT_RUNNING) {
        s = not_parked(k, id, "pe_seq_release", err);
    } else {
        *replica = k->replica;
        *parked = k->state == EN_KEPT_PARKED;
        *k = e->kept[--e->nkept];
    }
    pthread_mutex_unlock(&e->kept_mu);
    return s;
}
