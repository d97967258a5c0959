/* tx_schema_format.c: JSON schema's string formats as regular expressions
 * (tx_schema_format.h says which, and what each writes). */
#include <string.h>

#include "text/tx_schema_format.h"

/* RFC 3339 full-date: a month's days (30 or 31; February 28), or February 29 of a leap
 * year: a year divisible by 4 and not by 100 (its last two digits), or by 400. */
#define FULL_DATE                                                                          \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|"                      \
    "(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|"                 \
    "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"

/* RFC 3339 full-time: partial-time and an offset. */
#define FULL_TIME                                                                          \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"                            \
    "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"

/* RFC 3339 appendix A: dur-second, dur-minute, dur-hour, dur-time; dur-day, dur-month,
 * dur-year, dur-date; dur-week. */
#define DUR_S "[0-9]+S"
#define DUR_MI "[0-9]+M(?:" DUR_S ")?"
#define DUR_H "[0-9]+H(?:" DUR_MI ")?"
#define DUR_TIME "T(?:" DUR_H "|" DUR_MI "|" DUR_S ")"
#define DUR_D "[0-9]+D"
#define DUR_MO "[0-9]+M(?:" DUR_D ")?"
#define DUR_Y "[0-9]+Y(?:" DUR_MO ")?"
#define DURATION "P(?:(?:" DUR_D "|" DUR_MO "|" DUR_Y ")(?:" DUR_TIME ")?|" DUR_TIME "|[0-9]+W)"

#define HEX4 "[0-9a-fA-F]{4}"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define IPV4 OCTET "(?:\\." OCTET "){3}"

/* RFC 3986's IPv6address: h16 is 1 to 4 hex digits, ls32 two of them or an IPv4 address,
 * "::" stands for one group of zeros or more: */
#define H16 "[0-9a-fA-F]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" IPV4 ")"
#define IPV6                                                                               \
    "(?:(?:" H16 ":){6}" LS32 "|::(?:" H16 ":){5}" LS32 "|(?:" H16 ")?::(?:" H16 ":){4}"    \
    LS32 "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32 "|(?:(?:" H16 ":){0,2}"    \
    H16 ")?::(?:" H16 ":){2}" LS32 "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":" LS32         \
    "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32 "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16         \
    "|(?:(?:" H16 ":){0,6}" H16 ")?::)"

/* RFC 5322 atext, and a domain label (RFC 1035 / 1123). */
#define ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

static const struct {
    const char *name, *regex;
} formats[] = {
    {"date", "^" FULL_DATE "$"},
    {"time", "^" FULL_TIME "$"},
    {"date-time", "^" FULL_DATE "T" FULL_TIME "$"},
    {"duration", "^" DURATION "$"},
    {"uuid", "^[0-9a-fA-F]{8}-" HEX4 "-" HEX4 "-" HEX4 "-" HEX4 HEX4 HEX4 "$"},
    {"ipv4", "^" IPV4 "$"},
    {"ipv6", "^" IPV6 "$"},
    {"email", "^" ATEXT "(?:\\." ATEXT ")*@" LABEL "(?:\\." LABEL ")+$"},
};

const char *tx_schema_format_regex(const char *format)
{
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++)
        if (strcmp(format, formats[k].name) == 0)
            return formats[k].regex;
    return NULL;
}
