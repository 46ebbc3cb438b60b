/* One JSON line's text field, found without Python, for the lines whose document is certain.
 *
 * A line is taken here only when its document is beyond doubt: valid UTF-8 (strictly: no
 * overlong form, surrogate or code point past U+10FFFF), valid JSON (RFC 8259) that is an
 * object, whose text field (the last, if given twice, as Python's and orjson's parsers keep
 * it) is a string, not blank, with no escape but \" \\ \/ \n \r \t \uXXXX (a surrogate only
 * in a pair) and no control character or DEL (plain: benchmarks/RESULTS.md, "Decisions"). Any
 * other line (blank, malformed, a missing or empty text, a deep nesting, a key
 * with an escape) is left to the caller, whose Python path reads it as before; so this file
 * never has to agree with a parser on anything but the lines it takes.
 */
#ifndef FEEDGPU_JSON_LINE_H
#define FEEDGPU_JSON_LINE_H

#include <stddef.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define JSON_MAX_DEPTH 64 /* deeper values are left to the caller (Python's limit is ~1000) */

typedef const unsigned char *cursor;

static inline cursor json_ws(cursor p, cursor end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static inline int json_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The bytes a string's scan stops at: its end, an escape, what JSON cannot hold there
 * (control characters) and the start of a character beyond ASCII. Filled by json_stop_init. */
static unsigned char JSON_STOP[256];

static void json_stop_init(void) {
    for (int c = 0; c < 256; c++) JSON_STOP[c] = c == '"' || c == '\\' || c < 0x20 || c > 0x7f;
}

/* The first byte of JSON_STOP at or after p, or end. Sixteen bytes a step where the CPU has
 * SSE2 (every x86-64): a text's bytes are scanned here once each, and byte by byte this scan
 * was a tenth of the step's time on short documents (benchmarks/RESULTS.md, "Decisions"). */
static inline cursor json_run(cursor p, cursor end) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)p);
        /* signed: under 0x20 is a control character or, negative, a byte over 0x7f */
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b, quote),
                                                 _mm_cmpeq_epi8(b, backslash)),
                                    _mm_cmplt_epi8(b, space));
        int mask = _mm_movemask_epi8(stop);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < end && !JSON_STOP[*p]) p++;
    return p;
}

/* The bytes of the UTF-8 character at p (p < end), or 0 if it is not valid (Unicode's
 * table 3-7: no overlong form, no surrogate, nothing past U+10FFFF). */
static inline int json_utf8(cursor p, cursor end) {
    unsigned char c = p[0];
    ptrdiff_t room = end - p;
    if (c >= 0xC2 && c <= 0xDF) return room >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (room < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F)) return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (room < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F)) return 0;
        return 4;
    }
    return 0;
}

enum { JSON_ESCAPED = 1, JSON_BEYOND_ASCII = 2 }; /* what a string holds */

/* Past a string at p (its opening quote), or NULL if not a valid JSON string of valid UTF-8.
 * *holds: JSON_ESCAPED and JSON_BEYOND_ASCII, as it holds an escape, a character past ASCII. */
static cursor json_string(cursor p, cursor end, int *holds) {
    *holds = 0;
    for (p++; p < end; p++) {
        p = json_run(p, end);
        if (p >= end) return NULL;
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c >= 0x80) {
            int size = json_utf8(p, end);
            if (!size) return NULL;
            *holds |= JSON_BEYOND_ASCII;
            p += size - 1;
            continue;
        }
        if (c != '\\') return NULL;
        *holds |= JSON_ESCAPED;
        if (++p >= end) return NULL;
        switch (*p) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            break;
        case 'u':
            if (end - p < 5 || !json_hex(p[1]) || !json_hex(p[2]) || !json_hex(p[3]) ||
                !json_hex(p[4]))
                return NULL;
            p += 4;
            break;
        default:
            return NULL;
        }
    }
    return NULL;
}

static cursor json_digits(cursor p, cursor end) {
    cursor start = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p > start ? p : NULL;
}

/* orjson takes an integer of at most 308 digits; a longer one goes to Python's json, which
 * refuses one over its digit limit (4300, or as low as 640 by PYTHONINTMAXSTRDIGITS): such a
 * line is left to the caller, to be read (or skipped) as Python reads it. */
#define JSON_MAX_INT_DIGITS 308

static cursor json_number(cursor p, cursor end) {
    if (p < end && *p == '-') p++;
    cursor digits = p;
    if (p < end && *p == '0')
        p++;
    else if (!(p = json_digits(p, end)))
        return NULL;
    int integer = 1;
    ptrdiff_t count = p - digits;
    if (p < end && *p == '.') {
        integer = 0;
        if (!(p = json_digits(p + 1, end))) return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (!(p = json_digits(p, end))) return NULL;
    }
    return integer && count > JSON_MAX_INT_DIGITS ? NULL : p;
}

static cursor json_word(cursor p, cursor end, const char *word) {
    size_t n = strlen(word);
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

static cursor json_value(cursor p, cursor end, int depth);

/* Past an object or array at p, or NULL. */
static cursor json_container(cursor p, cursor end, int depth) {
    unsigned char close = *p == '{' ? '}' : ']';
    int holds;
    if (depth >= JSON_MAX_DEPTH) return NULL;
    p = json_ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (close == '}') {
            if (p >= end || *p != '"' || !(p = json_string(p, end, &holds))) return NULL;
            p = json_ws(p, end);
            if (p >= end || *p != ':') return NULL;
            p = json_ws(p + 1, end);
        }
        if (!(p = json_value(p, end, depth + 1))) return NULL;
        p = json_ws(p, end);
        if (p < end && *p == close) return p + 1;
        if (p >= end || *p != ',') return NULL;
        p = json_ws(p + 1, end);
    }
}

static cursor json_value(cursor p, cursor end, int depth) {
    int holds;
    if (p >= end) return NULL;
    switch (*p) {
    case '"': return json_string(p, end, &holds);
    case '{': case '[': return json_container(p, end, depth);
    case 't': return json_word(p, end, "true");
    case 'f': return json_word(p, end, "false");
    case 'n': return json_word(p, end, "null");
    default: return json_number(p, end);
    }
}

/* The text field's string in a line (its bytes between the quotes, escapes as written), or
 * 0 if the line is not an object of valid JSON with that field a string. A key with an
 * escape is not compared: 0. *text_holds: what the text holds (json_string). */
static int json_text_field(cursor p, cursor end, const char *field, size_t field_len,
                           cursor *text, cursor *text_end, int *text_holds) {
    int found = 0, holds;
    p = json_ws(p, end);
    if (p >= end || *p != '{') return 0;
    p = json_ws(p + 1, end);
    if (p < end && *p == '}') return 0; /* {}: no text */
    for (;;) {
        if (p >= end || *p != '"') return 0;
        cursor key = p + 1;
        if (!(p = json_string(p, end, &holds)) || (holds & JSON_ESCAPED)) return 0;
        int match = (size_t)(p - 1 - key) == field_len && memcmp(key, field, field_len) == 0;
        p = json_ws(p, end);
        if (p >= end || *p != ':') return 0;
        p = json_ws(p + 1, end);
        cursor value = p;
        if (match && p < end && *p == '"') { /* the last one given counts, as both keep it */
            if (!(p = json_string(p, end, text_holds))) return 0;
            found = 1;
            *text = value + 1;
            *text_end = p - 1;
        } else {
            if (!(p = json_value(p, end, 1))) return 0;
            found &= !match; /* a later text field that is not a string */
        }
        p = json_ws(p, end);
        if (p < end && *p == '}') break;
        if (p >= end || *p != ',') return 0;
        p = json_ws(p + 1, end);
    }
    return found && json_ws(p + 1, end) == end;
}

static inline unsigned json_hex4(cursor p) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = p[k];
        v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* A text's string (json_string's, escapes as written) decoded into out (room for end - s) as
 * UTF-8, its length; -1 if it has an escape plain text cannot hold (\b, \f, a control
 * character's \u) or a lone surrogate, or DEL. (A control character written as itself never
 * passed json_string.) */
static ptrdiff_t json_text(cursor s, cursor end, unsigned char *out) {
    ptrdiff_t n = 0;
    for (; s < end; s++) {
#if defined(__SSE2__)
        /* Sixteen bytes a step up to the next escape or DEL, stored whole (the bytes past it
         * are written over, within the room: never more than is left of the text): byte by
         * byte, this copy was most of the JSON-lines step's own time on real-like text. */
        const __m128i backslash = _mm_set1_epi8('\\'), del = _mm_set1_epi8(0x7f);
        while (end - s >= 16) {
            __m128i b = _mm_loadu_si128((const __m128i *)s);
            int mask = _mm_movemask_epi8(
                _mm_or_si128(_mm_cmpeq_epi8(b, backslash), _mm_cmpeq_epi8(b, del)));
            _mm_storeu_si128((__m128i *)(out + n), b);
            if (mask) {
                int k = __builtin_ctz((unsigned)mask);
                s += k, n += k;
                break;
            }
            s += 16, n += 16;
        }
        if (s >= end) break;
#endif
        unsigned char c = *s;
        if (c == 0x7f) return -1;
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        switch (*++s) {
        case 'n': out[n++] = '\n'; continue;
        case 'r': out[n++] = '\r'; continue;
        case 't': out[n++] = '\t'; continue;
        case '"': case '\\': case '/': out[n++] = *s; continue;
        case 'u': break;
        default: return -1;
        }
        unsigned cp = json_hex4(s + 1);
        s += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a pair's first half, or alone */
            if (end - s < 7 || s[1] != '\\' || s[2] != 'u') return -1;
            unsigned low = json_hex4(s + 3);
            if (low < 0xDC00 || low > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            s += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return -1;
        }
        if (cp < 0x20 || cp == 0x7f) return -1;
        if (cp < 0x80) {
            out[n++] = (unsigned char)cp;
            continue;
        }
        if (cp < 0x800) {
            out[n++] = (unsigned char)(0xC0 | (cp >> 6));
        } else {
            if (cp < 0x10000) {
                out[n++] = (unsigned char)(0xE0 | (cp >> 12));
            } else {
                out[n++] = (unsigned char)(0xF0 | (cp >> 18));
                out[n++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            }
            out[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        }
        out[n++] = (unsigned char)(0x80 | (cp & 0x3F));
    }
    return n;
}

#endif
