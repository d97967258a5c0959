/* tx_schema_nodes.h: a compiled JSON schema (tx_schema.h), shared by its compiler
 * (tx_schema_compile.c) and its machine (tx_schema.c). A node is one schema: what a value
 * may be, and the bytes it may start with. */
#ifndef PE_TEXT_TX_SCHEMA_NODES_H
#define PE_TEXT_TX_SCHEMA_NODES_H

#include <stdint.h>

#include "text/tx_pattern.h"
#include "text/tx_schema.h"

typedef enum ts_kind {
    TS_ANY,     /* any value (first: the bytes it may start with, '{' alone for any object) */
    TS_OBJECT,  /* lit: the properties' keys, child: their nodes, in the order listed */
    TS_MAP,     /* an object of any keys, child[0]: its values (additionalProperties) */
    TS_ARRAY,   /* child[0]: the items; min_items .. max_items of them */
    TS_STRING,
    TS_NUMBER,
    TS_INTEGER, /* a number without fraction or exponent */
    TS_BOOLEAN,
    TS_NULL,
    TS_ENUM,    /* lit: the values, as JSON written without whitespace */
    TS_ANYOF,   /* child: the alternatives, whose first bytes differ */
    TS_REF      /* child[0]: the node a $ref names */
} ts_kind;

#define TS_UNBOUNDED 0xFFFFu /* max_items when the schema gives none */

typedef struct ts_lit {
    uint8_t *p;
    uint32_t n;
} ts_lit;

typedef struct ts_node {
    uint8_t kind;            /* ts_kind */
    uint8_t first[32];       /* bit b: a value may start with byte b (set by the compiler) */
    int32_t nlit;
    ts_lit *lit;             /* (nlit) */
    int32_t nchild;
    uint16_t *child;         /* (nchild) */
    uint16_t *next_required; /* object: (nchild + 1) the first required property at or after
                              * i; nchild when none */
    uint16_t min_items, max_items;
    char *where;             /* anyOf: where it is in the schema (for errors) */
    tx_pattern *text;        /* string: its characters' pattern or format, and lengths;
                              * number, integer: the bytes its bounds allow (NULL: any) */
} ts_node;

struct tx_schema {
    ts_node *node;
    int32_t nnode, cap;
    uint16_t root;
};

static inline int ts_first_has(const ts_node *n, uint8_t b)
{
    return (n->first[b >> 3] >> (b & 7)) & 1;
}

#endif
