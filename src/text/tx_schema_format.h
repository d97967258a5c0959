/* tx_schema_format.h: the string formats of JSON schema that pengine enforces, each as a
 * regular expression (tx_pattern.h's syntax) of the texts it writes. */
#ifndef PE_TEXT_TX_SCHEMA_FORMAT_H
#define PE_TEXT_TX_SCHEMA_FORMAT_H

/* The anchored regular expression of a string format, or NULL for a format pengine leaves
 * as an annotation (JSON schema 2020-12 makes every format one unless asked otherwise).
 * Each writes a subset of what its RFC allows, the part that the usual parsers (Python's
 * datetime and uuid, pydantic, email-validator) read too:
 *   - "date": RFC 3339 full-date, days within their month, February 29 in leap years only
 *     (the Gregorian rule);
 *   - "time": RFC 3339 full-time with seconds 00 to 59 (no leap second), an optional
 *     fraction, and "Z" or a +hh:mm / -hh:mm offset;
 *   - "date-time": a date, "T", a time;
 *   - "duration": RFC 3339 appendix A's ISO 8601 duration ("P1Y2M", "PT30M", "P2W");
 *   - "uuid": RFC 4122's 8-4-4-4-12 hex digits, either case;
 *   - "ipv4": four decimal octets 0 to 255, without leading zeros;
 *   - "ipv6": RFC 3986's IPv6address (glibc's inet_pton reads the same), without a zone;
 *   - "email": a dot-atom local part (RFC 5322's atext), "@", and a domain of two labels
 *     or more (letters, digits and inner hyphens, 1 to 63 characters each). */
const char *tx_schema_format_regex(const char *format);

#endif
