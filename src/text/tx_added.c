/* tx_added.c: added tokens: reading "added_tokens", the two tries (tokens matched on the
 * raw text, and those with normalized: true, matched on the normalized text with their
 * content normalized too, as Hugging Face does), and cutting a text at them. */
#include <stdlib.h>
#include <string.h>

#include "text/tx_load.h"
#include "text/tx_pipeline.h"

/* ---- loading --------------------------------------------------------------------------------- */

pe_status tx_add_token(pe_tokenizer *t, const char *content, int32_t id, int special,
                       tx_ctx *c)
{
    size_t len = strlen(content);
    if (!len)
        return pe_fail(c->err, PE_EFORMAT, "%s: added token %d has empty content", c->file,
                       (int)id);
    tx_added *na = realloc(t->added, (size_t)(t->nadded + 1) * sizeof *na);
    if (!na)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    t->added = na;
    tx_added *a = &t->added[t->nadded];
    memset(a, 0, sizeof *a);
    a->content = malloc(len + 1);
    if (!a->content)
        return pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    memcpy(a->content, content, len + 1);
    a->len = len;
    a->id = id;
    a->special = special != 0;
    t->nadded++;
    pe_status s = tx_set_token(t, content, len, id, c);
    if (s == PE_OK)
        t->is_special[id] = (uint8_t)(special != 0);
    return s;
}

pe_status tx_load_added(pe_tokenizer *t, const cJSON *arr, tx_ctx *c)
{
    if (arr && !cJSON_IsNull(arr) && !cJSON_IsArray(arr))
        return pe_fail(c->err, PE_EFORMAT, "%s: added_tokens is not a list", c->file);
    int i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const char *content = tx_json_str(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 0x7fffffff ||
            !content)
            return pe_fail(c->err, PE_EFORMAT, "%s: added_tokens[%d] needs an \"id\" >= 0 and "
                           "a \"content\" string", c->file, i);
        int special, flag;
        pe_status s = tx_json_bool(e, "special", 0, "added_tokens[].special", &special, c);
        if (s == PE_OK)
            s = tx_add_token(t, content, (int32_t)id->valuedouble, special, c);
        if (s != PE_OK)
            return s;
        tx_added *a = &t->added[t->nadded - 1];
        const char *flags[4] = {"lstrip", "rstrip", "single_word", "normalized"};
        for (int k = 0; k < 4; k++) {
            /* normalized defaults to true for non-special tokens, as in Hugging Face */
            s = tx_json_bool(e, flags[k], k == 3 ? !special : 0, "added_tokens[] flag", &flag, c);
            if (s != PE_OK)
                return s;
            if (k == 0) a->lstrip = flag != 0;
            if (k == 1) a->rstrip = flag != 0;
            if (k == 2) a->single_word = flag != 0;
            if (k == 3) a->normalized = flag != 0;
        }
    }
    return tx_build_tries(t, c);
}

/* ---- the tries ---------------------------------------------------------------------------------- */

static int trie_node(tx_trie *tr)
{
    if (tr->nnodes == tr->cap) {
        int32_t cap = tr->cap ? tr->cap * 2 : 64;
        int32_t *nt = realloc(tr->token, (size_t)cap * sizeof *nt);
        if (!nt)
            return -1;
        tr->token = nt;
        tr->cap = cap;
    }
    tr->token[tr->nnodes] = -1;
    return tr->nnodes++;
}

static int trie_insert(tx_trie *tr, const char *s, size_t n, int32_t index)
{
    if (!tr->token && (tx_pairmap_init(&tr->edges, 256) != 0 || trie_node(tr) < 0))
        return -1;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        uint64_t child;
        if (!tx_pairmap_get(&tr->edges, tx_pair_key(node, b), &child)) {
            int nn = trie_node(tr);
            if (nn < 0 || tx_pairmap_put(&tr->edges, tx_pair_key(node, b), (uint64_t)nn) != 0)
                return -1;
            child = (uint64_t)nn;
        }
        node = (int32_t)child;
    }
    tr->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    if (tr->token[node] < 0) /* the first of two tokens with the same content wins */
        tr->token[node] = index;
    return 0;
}

pe_status tx_build_tries(pe_tokenizer *t, tx_ctx *c)
{
    tx_buf norm = {0};
    tx_region *r = tx_region_new();
    pe_status s = r ? PE_OK : pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    for (int i = 0; i < t->nadded && s == PE_OK; i++) {
        const tx_added *a = &t->added[i];
        int rc;
        if (a->normalized && t->nnorm) {
            rc = tx_normalize(t, a->content, a->len, r, &norm);
            if (rc == 0 && norm.n == 0)
                continue; /* normalized away: it can never match */
            if (rc == 0)
                rc = trie_insert(&t->trie_norm, norm.p, norm.n, i);
            t->has_norm_added = 1;
        } else {
            rc = trie_insert(&t->trie_raw, a->content, a->len, i);
        }
        if (rc != 0)
            s = pe_fail(c->err, PE_ENOMEM, "out of memory loading %s", c->file);
    }
    tx_buf_free(&norm);
    tx_region_free(r);
    return s;
}

/* ---- splitting ---------------------------------------------------------------------------------- */

/* The longest token of trie starting at s[i]: its index, and its length in *len; -1 if none. */
static int32_t longest_at(const tx_trie *tr, const char *s, size_t n, size_t i, size_t *len)
{
    int32_t node = 0, best = -1;
    for (size_t j = i; j < n; j++) {
        uint64_t child;
        if (!tx_pairmap_get(&tr->edges, tx_pair_key(node, (uint8_t)s[j]), &child))
            break;
        node = (int32_t)child;
        if (tr->token[node] >= 0) {
            best = tr->token[node];
            *len = j + 1 - i;
        }
    }
    return best;
}

static size_t prev_char(const char *s, size_t i)
{
    do
        i--;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
    return i;
}

static int class_at(const tx_regex *re, tx_region *r, const char *s, size_t n, size_t i)
{
    return tx_regex_match_at(re, r, s, n, i) > 0;
}

static int push_seg(tx_segs *v, size_t a, size_t b, int32_t added)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        tx_seg *p = realloc(v->p, cap * sizeof *p);
        if (!p)
            return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = (tx_seg){a, b, added};
    return 0;
}

int tx_added_split(const pe_tokenizer *t, const tx_trie *tr, const char *s, size_t n,
                   tx_region *r, tx_segs *out)
{
    out->n = 0;
    size_t done = 0; /* s[0, done) is cut */
    for (size_t i = 0; tr->token && i < n;) {
        uint8_t b = (uint8_t)s[i];
        size_t len = 0;
        int32_t k = (tr->first[b >> 3] >> (b & 7)) & 1 ? longest_at(tr, s, n, i, &len) : -1;
        if (k < 0) {
            i++;
            continue;
        }
        const tx_added *a = &t->added[k];
        size_t start = i, stop = i + len;
        i = stop; /* a refused match still covers its bytes, as the Aho-Corasick scan does */
        if (a->single_word &&
            ((start > 0 && class_at(t->word_char, r, s, n, prev_char(s, start))) ||
             (stop < n && class_at(t->word_char, r, s, n, stop))))
            continue;
        if (a->lstrip)
            while (start > done && class_at(t->whitespace, r, s, n, prev_char(s, start)))
                start = prev_char(s, start);
        if (a->rstrip)
            while (stop < n && class_at(t->whitespace, r, s, n, stop))
                stop += tx_utf8_char_len((const unsigned char *)s, n, stop);
        if ((done < start && push_seg(out, done, start, -1) != 0) ||
            push_seg(out, start, stop, k) != 0)
            return -1;
        done = i = stop;
    }
    if (done < n && push_seg(out, done, n, -1) != 0)
        return -1;
    return 0;
}
