/* tx_json.c: JSON mode's machine over bytes (tx_json.h). */
#include "text/tx_json.h"
#include "text/tx_utf8.h"

#include <string.h>

enum {
    J_START,     /* nothing yet: '{' */
    J_OBJ_OPEN,  /* after '{': a key or '}' */
    J_KEY,       /* after ',' in an object: a key */
    J_COLON,     /* after a key: ':' */
    J_VALUE,     /* after ':', or ',' in an array: a value */
    J_ARR_OPEN,  /* after '[': a value or ']' */
    J_AFTER,     /* after a value: ',' or the container's closer */
    J_STR,       /* in a string */
    J_ESC,       /* after '\' in a string */
    J_HEX,       /* in \uXXXX: aux digits left */
    J_UTF8,      /* in a multi-byte character: aux bytes left, the next in [lo, hi] */
    J_MINUS,     /* a number: after '-' */
    J_ZERO,      /* ... its integer part is 0 */
    J_INT,       /* ... in its integer part */
    J_DOT,       /* ... after '.' */
    J_FRAC,      /* ... in its fraction */
    J_E,         /* ... after 'e' or 'E' */
    J_ESIGN,     /* ... after the exponent's sign */
    J_EXP,       /* ... in its exponent */
    J_LIT,       /* in true, false or null: aux bytes matched */
    J_DONE       /* the object is closed */
};

static const char *const literal[3] = {"true", "false", "null"};

void tx_json_start(tx_json *j)
{
    memset(j, 0, sizeof *j);
    j->state = J_START;
}

void tx_json_start_value(tx_json *j)
{
    memset(j, 0, sizeof *j);
    j->state = J_VALUE;
}

int tx_json_done(const tx_json *j) { return j->state == J_DONE; }

int tx_json_ended(const tx_json *j)
{
    const int s = j->state;
    return s == J_DONE || (j->depth == 0 && (s == J_ZERO || s == J_INT || s == J_FRAC ||
                                             s == J_EXP));
}

static int top_is_object(const tx_json *j) { return (int)((j->stack >> (j->depth - 1)) & 1u); }

/* Enters a gap state (whitespace may come). */
static int gap(tx_json *j, int state)
{
    j->state = (uint8_t)state;
    j->ws = 0;
    return 0;
}

/* A value just ended: the text is done when it closed the outermost object. */
static int value_end(tx_json *j) { return j->depth == 0 ? gap(j, J_DONE) : gap(j, J_AFTER); }

static int open_container(tx_json *j, int object)
{
    if (j->depth >= TX_JSON_MAX_DEPTH)
        return -1;
    j->stack = (j->stack & ~(1ull << j->depth)) | ((uint64_t)object << j->depth);
    j->depth++;
    return gap(j, object ? J_OBJ_OPEN : J_ARR_OPEN);
}

static int close_container(tx_json *j, int object)
{
    if (j->depth == 0 || top_is_object(j) != object)
        return -1;
    j->depth--;
    return value_end(j);
}

/* Whitespace in a gap: "", " ", or "\n" and at most TX_JSON_MAX_INDENT spaces or tabs. */
int tx_json_gap_byte(uint8_t *ws, uint8_t b)
{
    if (*ws == 0 && (b == ' ' || b == '\n')) {
        *ws = b == ' ' ? 1 : 2;
        return 0;
    }
    if (*ws >= 2 && (b == ' ' || b == '\t') && *ws - 2 < TX_JSON_MAX_INDENT) {
        ++*ws;
        return 0;
    }
    return -1;
}
static int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

/* The first byte of a value. */
static int value_start(tx_json *j, uint8_t b)
{
    switch (b) {
    case '{': return open_container(j, 1);
    case '[': return open_container(j, 0);
    case '"': j->key = 0; j->state = J_STR; return 0;
    case '-': j->state = J_MINUS; return 0;
    case '0': j->state = J_ZERO; return 0;
    case 't': j->lit = 0; break;
    case 'f': j->lit = 1; break;
    case 'n': j->lit = 2; break;
    default:
        if (b >= '1' && b <= '9') {
            j->state = J_INT;
            return 0;
        }
        return -1;
    }
    j->state = J_LIT;
    j->aux = 1;
    return 0;
}

/* A byte in a string: the end, an escape, a character or the lead of a multi-byte one
 * (RFC 3629's table of well-formed sequences). */
static int string_byte(tx_json *j, uint8_t b)
{
    if (b == '"')
        return j->key ? gap(j, J_COLON) : value_end(j);
    if (b == '\\') {
        j->state = J_ESC;
        return 0;
    }
    if (b < 0x20)
        return -1;
    if (b < 0x80)
        return 0;
    j->lo = 0x80, j->hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        j->aux = 1;
    else if (b >= 0xE0 && b <= 0xEF)
        j->aux = 2, j->lo = b == 0xE0 ? 0xA0 : 0x80, j->hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
        j->aux = 3, j->lo = b == 0xF0 ? 0x90 : 0x80, j->hi = b == 0xF4 ? 0x8F : 0xBF;
    else
        return -1;
    j->state = J_UTF8;
    return 0;
}

/* A number's next byte; a byte that cannot continue it ends it (where it may end) and is
 * read after the value. */
static int number_byte(tx_json *j, uint8_t b)
{
    const int s = j->state;
    if (is_digit(b)) {
        static const uint8_t next[] = {[J_MINUS] = J_INT, [J_INT] = J_INT, [J_DOT] = J_FRAC,
                                       [J_FRAC] = J_FRAC, [J_E] = J_EXP, [J_ESIGN] = J_EXP,
                                       [J_EXP] = J_EXP};
        if (s == J_ZERO)
            return -1; /* a leading zero: "01" is not a number */
        j->state = (s == J_MINUS && b == '0') ? J_ZERO : next[s];
        return 0;
    }
    if (b == '.' && (s == J_ZERO || s == J_INT)) {
        j->state = J_DOT;
        return 0;
    }
    if ((b == 'e' || b == 'E') && (s == J_ZERO || s == J_INT || s == J_FRAC)) {
        j->state = J_E;
        return 0;
    }
    if ((b == '+' || b == '-') && s == J_E) {
        j->state = J_ESIGN;
        return 0;
    }
    if (s == J_MINUS || s == J_DOT || s == J_E || s == J_ESIGN)
        return -1; /* the number is not whole yet */
    value_end(j);
    return -2; /* read b again, after the value */
}

/* One byte; -1 when it does not fit (j may be changed: tx_json_byte works on a copy). */
static int step(tx_json *j, uint8_t b)
{
    for (;;) {
        int gap_state = j->state <= J_AFTER && j->state != J_START;
        if (gap_state && tx_json_is_ws(b))
            return tx_json_gap_byte(&j->ws, b);
        switch (j->state) {
        case J_START: return b == '{' ? open_container(j, 1) : -1;
        case J_OBJ_OPEN:
            if (b == '}')
                return close_container(j, 1);
            /* fall through */
        case J_KEY:
            if (b != '"')
                return -1;
            j->key = 1;
            j->state = J_STR;
            return 0;
        case J_COLON: return b == ':' ? gap(j, J_VALUE) : -1;
        case J_ARR_OPEN:
            if (b == ']')
                return close_container(j, 0);
            /* fall through */
        case J_VALUE: return value_start(j, b);
        case J_AFTER:
            if (b == ',')
                return gap(j, top_is_object(j) ? J_KEY : J_VALUE);
            if (b == '}' || b == ']')
                return close_container(j, b == '}');
            return -1;
        case J_STR: return string_byte(j, b);
        case J_ESC:
            if (b == 'u') {
                j->state = J_HEX;
                j->aux = 4;
                return 0;
            }
            if (!strchr("\"\\/bfnrt", b) || b == 0)
                return -1;
            j->state = J_STR;
            return 0;
        case J_HEX:
            if (tx_hex_value(b) < 0)
                return -1;
            if (--j->aux == 0)
                j->state = J_STR;
            return 0;
        case J_UTF8:
            if (b < j->lo || b > j->hi)
                return -1;
            j->lo = 0x80, j->hi = 0xBF;
            if (--j->aux == 0)
                j->state = J_STR;
            return 0;
        case J_LIT: {
            const char *w = literal[j->lit];
            if (b != (uint8_t)w[j->aux])
                return -1;
            if (w[++j->aux] == '\0')
                return value_end(j);
            return 0;
        }
        case J_DONE: return -1;
        default: {
            int r = number_byte(j, b);
            if (r != -2)
                return r;
            continue; /* the number ended before b */
        }
        }
    }
}

int tx_json_byte(tx_json *j, uint8_t b)
{
    tx_json next = *j;
    if (step(&next, b) != 0)
        return -1;
    *j = next;
    return 0;
}

int tx_json_bytes(tx_json *j, const uint8_t *s, size_t n)
{
    tx_json next = *j;
    for (size_t i = 0; i < n; i++)
        if (step(&next, s[i]) != 0)
            return -1;
    *j = next;
    return 0;
}
