/* Varints (protobuf's base-128 integers) as records store ids (_records.c). */
#ifndef FEEDGPU_VARINTS_H
#define FEEDGPU_VARINTS_H

#include <stddef.h>
#include <stdint.h>

/* A varint's bytes: 1 + (its significant bits - 1) / 7, without a loop (a vocabulary's ids
 * take one or two bytes in no order a branch predicts). */
static inline ptrdiff_t vsize(uint64_t v) {
#if defined(__GNUC__)
    static const unsigned char by_zeros[64] = {
        10, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7,
        6,  6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 3,
        3,  3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};
    return by_zeros[__builtin_clzll(v | 1)];
#else
    ptrdiff_t n = 1;
    for (; v >= 0x80; v >>= 7) n++;
    return n;
#endif
}

static inline unsigned char *put(unsigned char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* ids' varints, those under 2^14 (a vocabulary's) without a branch on their size: both bytes
 * written, the second kept only when needed. It may write one byte past the last varint (into
 * what its caller writes next: a record's next field, or its frame's CRC). */
static inline unsigned char *put_ids(unsigned char *p, const int64_t *v, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        uint64_t u = (uint64_t)v[i];
        if (u < 1u << 14) {
            unsigned two = u >= 0x80;
            p[0] = (unsigned char)(u | (two << 7));
            p[1] = (unsigned char)(u >> 7);
            p += 1 + two;
        } else {
            p = put(p, u);
        }
    }
    return p;
}

#endif
