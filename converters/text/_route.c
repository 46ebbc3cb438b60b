/* Documents' shards for the `_records` module (`examples.route`): each document id's keyed
 * hash, SipHash-2-4 as TensorFlow's `tf.strings.to_hash_bucket_strong` computes it (the same
 * 64-bit value, then modulo the buckets), without the GIL and without TensorFlow's per-call
 * work (a batch's ids made a tensor, an eager op, the result back): a conversion of short
 * documents took 0.39 s with the op, 0.37 s with this (paired A/B, benchmarks/RESULTS.md,
 * "Issue 29, eighth session"). */
#include "_records.h" /* Python.h first */

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
    PyObject *ids;
    unsigned long long k0, k1, buckets;
    if (!PyArg_ParseTuple(args, "OKKK", &ids, &k0, &k1, &buckets)) return NULL;
    if (buckets == 0) {
        PyErr_SetString(PyExc_ValueError, "buckets must be at least 1");
        return NULL;
    }
    PyObject *held = PySequence_Tuple(ids); /* holds each id while the GIL is released */
    if (!held) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(held);
    const char **texts = PyMem_Malloc(sizeof(char *) * (size_t)(count + 1));
    Py_ssize_t *sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(count + 1));
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(uint64_t));
    if (!texts || !sizes || !out) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < count; i++) { /* str as UTF-8, as TensorFlow takes it */
        PyObject *id = PyTuple_GET_ITEM(held, i);
        if (PyBytes_Check(id)) {
            texts[i] = PyBytes_AS_STRING(id);
            sizes[i] = PyBytes_GET_SIZE(id);
        } else if (!(texts[i] = PyUnicode_Check(id) ? PyUnicode_AsUTF8AndSize(id, &sizes[i])
                                                     : NULL)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "ids must be str or bytes");
            goto fail;
        }
    }
    uint64_t *hashed = (uint64_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++)
        hashed[i] =
            feedgpu_siphash(k0, k1, (const unsigned char *)texts[i], (size_t)sizes[i]) % buckets;
    Py_END_ALLOW_THREADS
    PyMem_Free(texts);
    PyMem_Free(sizes);
    Py_DECREF(held);
    return out;
fail:
    PyMem_Free(texts);
    PyMem_Free(sizes);
    Py_XDECREF(out);
    Py_DECREF(held);
    return NULL;
}
