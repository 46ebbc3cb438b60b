/* Documents' shards for the `_records` module (`records.route`): each document name's keyed
 * hash, SipHash-2-4 as TensorFlow's `tf.strings.to_hash_bucket_strong` computes it (the same
 * 64-bit value, then modulo the buckets), without the GIL; `records.siphash` is the Python
 * reference. */
#include "_records.h" /* Python.h first */

#include "_int64s.h"

#include <stdint.h>
#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                           \
    do {                                                                                   \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                          \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                             \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                             \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                          \
    } while (0)

static inline uint64_t read64(const unsigned char *p) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | p[k]; /* little-endian, whatever the CPU */
    return v;
}

/* SipHash-2-4 of n bytes under the key (k0, k1): the reference algorithm. */
uint64_t feedgpu_siphash(uint64_t k0, uint64_t k1, const unsigned char *p, size_t n) {
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = read64(p + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = (uint64_t)n << 56;
    for (size_t k = 0; k < n % 8; k++) last |= (uint64_t)p[whole + k] << (8 * k);
    v3 ^= last;
    SIPROUND;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

PyObject *feedgpu_route(PyObject *self, PyObject *args) {
    PyObject *starts_obj, *sizes_obj;
    Py_buffer blob = {0}, starts = {0}, sizes = {0};
    unsigned long long k0, k1, buckets;
    Py_ssize_t n = 0, m = 0;
    if (!PyArg_ParseTuple(args, "y*OOKKK", &blob, &starts_obj, &sizes_obj, &k0, &k1, &buckets))
        return NULL;
    PyObject *out = NULL;
    if (int64s(starts_obj, &starts, &n) < 0 || int64s(sizes_obj, &sizes, &m) < 0) goto done;
    const int64_t *at = starts.buf, *size = sizes.buf;
    Py_ssize_t i = 0;
    for (; n == m && i < n; i++) /* checked here: no string read outside the blob */
        if (at[i] < 0 || size[i] < 0 || at[i] > blob.len || size[i] > blob.len - at[i]) break;
    if (buckets == 0 || n != m || i != n) {
        PyErr_SetString(PyExc_ValueError, "buckets under 1, or a string outside the blob");
        goto done;
    }
    if (!(out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t)))) goto done;
    uint64_t *hashed = (uint64_t *)PyBytes_AS_STRING(out);
    const unsigned char *p = blob.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        hashed[i] = feedgpu_siphash(k0, k1, p + at[i], (size_t)size[i]) % buckets;
    Py_END_ALLOW_THREADS
done:
    if (starts.obj) PyBuffer_Release(&starts);
    if (sizes.obj) PyBuffer_Release(&sizes);
    PyBuffer_Release(&blob);
    return out;
}
