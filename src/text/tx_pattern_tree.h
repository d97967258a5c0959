/* tx_pattern_tree.h: a regular expression's syntax tree (tx_pattern_parse.c makes it,
 * tx_pattern_dfa.c compiles it): sets of characters, sequences, alternatives and repeats.
 * Groups leave no node of their own. */
#ifndef PE_TEXT_TX_PATTERN_TREE_H
#define PE_TEXT_TX_PATTERN_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "pengine/pengine.h"

#define PT_MAX_NESTING 256  /* groups inside groups */
#define PT_ANY_REPEAT (-1)  /* the max of * and + and {n,} */

typedef enum pt_kind {
    PT_EMPTY,  /* matches the empty text */
    PT_SET,    /* one character of ranges [set, set + nset) */
    PT_CAT,    /* its children one after the other */
    PT_ALT,    /* one of its children */
    PT_REPEAT, /* its child min..max times (max PT_ANY_REPEAT: no limit) */
} pt_kind;

typedef struct pt_range {
    uint32_t lo, hi; /* code points lo..hi, inclusive */
} pt_range;

typedef struct pt_node {
    int32_t kind;          /* pt_kind */
    int32_t child, next;   /* first child and next sibling (-1: none) */
    int32_t min, max;      /* PT_REPEAT */
    int32_t set, nset;     /* PT_SET: sorted, disjoint, not touching; never surrogates */
} pt_node;

typedef struct pt_tree {
    pt_node *node;
    int32_t nnode, capnode;
    pt_range *range;
    int32_t nrange, caprange;
    int32_t root;
    uint8_t anchored_start, anchored_end; /* ^ or \A first, $ or \z last */
    uint8_t top_alt;                      /* a '|' outside every group */
} pt_tree;

/* Parses pattern (len bytes of UTF-8) into t (tx_pattern.h's syntax). PE_EINVAL sets the
 * last error, naming the problem and its byte offset; t is then freed. */
pe_status pt_parse(const char *pattern, size_t len, pt_tree *t);
void pt_tree_free(pt_tree *t);

#endif
