/* What the `_records` module's files share: the serializer (_records.c), framing
 * (_framing.c), routing (_route.c) and names and line ends (_lines.c). What they share is
 * prefixed feedgpu_, or is an inline function of this header. */
#ifndef FEEDGPU_RECORDS_H
#define FEEDGPU_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* crc32c(data, hardware); feedgpu_crc_init before its first call. A record of n bytes already
 * at o + 12 framed there: its length and masked CRCs around it (n + 16 bytes from o). */
PyObject *feedgpu_crc32c(PyObject *self, PyObject *args);
void feedgpu_crc_init(void);
void feedgpu_frame_at(unsigned char *o, size_t n);

/* route(blob, starts, sizes, k0, k1, buckets): each string's SipHash-2-4 modulo buckets
 * (uint64s as bytes); feedgpu_siphash, one string's. */
PyObject *feedgpu_route(PyObject *self, PyObject *args);
uint64_t feedgpu_siphash(uint64_t k0, uint64_t k1, const unsigned char *p, size_t n);

/* v in decimal, ending at end (room for 20 characters before it): where it starts. */
static inline char *feedgpu_decimal(char *end, int64_t v) {
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do *--end = (char)('0' + u % 10); while (u /= 10);
    if (v < 0) *--end = '-';
    return end;
}

/* numbered(prefix, numbers) and line_ends(data). */
PyObject *feedgpu_numbered(PyObject *self, PyObject *args);
PyObject *feedgpu_line_ends(PyObject *self, PyObject *args);

#endif
