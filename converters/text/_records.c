/* The `_records` module: a batch's tf.train.Examples written and framed as TFRecords, grouped
 * by shard, without the GIL (`records.serialize`); documents' names and shards (_lines.c,
 * _route.c); framing (_framing.c).
 *
 * One serializer for every layout: a record is its features in key order, each a list of
 * int64 values, of int64 values gathered from slices of a pool (a document's ids with the
 * special ids around them, truncated, or a window of them), or of byte strings. The wire
 * format, each feature a map entry of Features.feature:
 *   Example   = 0a len Features
 *   Features  = for each feature: 0a len (0a len key 12 len Feature)
 *   Feature   = 0a len BytesList | 1a len Int64List
 *   BytesList = for each value: 0a len bytes
 *   Int64List = 0a len varints (packed; nothing when empty)
 * the bytes format/records.py's encode_example writes (tested), which is the reference.
 *
 * Why: with ids from the compiled WordPiece step, building examples in Python had become the
 * largest part of a conversion after tokenizing (benchmarks/RESULTS.md, "Text conversion"). */
#include "_records.h" /* Python.h first */

#include <string.h>

#include "_int64s.h"
#include "_varints.h"

enum { VALUES, SLICES, STRINGS };

typedef struct {
    const char *key;
    Py_ssize_t key_len, kind;
    const int64_t *counts;             /* per record: values, slices or strings */
    const int64_t *values;             /* VALUES: the values; SLICES: the pool */
    const unsigned char *blob;         /* STRINGS */
    const int64_t *starts, *sizes;     /* SLICES and STRINGS: each slice's or string's */
    Py_buffer views[4];
} Column;

/* A column from (key, kind, counts, values) or (key, kind, counts, pool or blob, starts,
 * sizes), checked: counts add up to its values, slices and strings lie within their pool or
 * blob, so no loop below reads outside them. -1 with an exception. */
static int column(PyObject *spec, Py_ssize_t records, Column *c) {
    PyObject *objs[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t n[4] = {0, 0, 0, 0};
    if (!PyArg_ParseTuple(spec, "s#nO|OOO", &c->key, &c->key_len, &c->kind, &objs[0], &objs[1],
                          &objs[2], &objs[3]))
        return -1;
    if (c->key_len < 1 || c->key_len > 127 || c->kind < VALUES || c->kind > STRINGS ||
        !objs[1] || (c->kind != VALUES) != (objs[2] && objs[3])) {
        PyErr_SetString(PyExc_ValueError, "a column: key (1-127 bytes), kind, counts, values");
        return -1;
    }
    for (int k = 0; k < 4 && objs[k]; k++) {
        if (k == 1 && c->kind == STRINGS) {
            if (PyObject_GetBuffer(objs[1], &c->views[1], PyBUF_SIMPLE) < 0) return -1;
            n[1] = c->views[1].len;
        } else if (int64s(objs[k], &c->views[k], &n[k]) < 0) {
            return -1;
        }
    }
    c->counts = c->views[0].buf;
    c->values = c->kind == STRINGS ? NULL : c->views[1].buf;
    c->blob = c->kind == STRINGS ? c->views[1].buf : NULL;
    c->starts = c->views[2].buf, c->sizes = c->views[3].buf;
    Py_ssize_t items = c->kind == VALUES ? n[1] : n[2], sum = 0, r = 0;
    for (; n[0] == records && r < records; r++) {
        if (c->counts[r] < 0 || c->counts[r] > items - sum) break; /* no sum that overflows */
        sum += c->counts[r];
    }
    if (n[0] != records || r != records || sum != items || (c->kind != VALUES && n[3] != items)) {
        PyErr_SetString(PyExc_ValueError, "a column's counts do not cover its values");
        return -1;
    }
    for (Py_ssize_t i = 0; c->kind != VALUES && i < items; i++) {
        if (c->starts[i] < 0 || c->sizes[i] < 0 || c->starts[i] > n[1] ||
            c->sizes[i] > n[1] - c->starts[i]) {
            PyErr_SetString(PyExc_ValueError, "a slice or string outside its pool or blob");
            return -1;
        }
    }
    return 0;
}

/* A column's part of record r (its values from *at, then *at moved past them): the bytes of
 * its values (varints, or strings with their heads). */
static Py_ssize_t payload(const Column *c, Py_ssize_t r, Py_ssize_t *at) {
    Py_ssize_t bytes = 0, end = *at + c->counts[r];
    for (Py_ssize_t i = *at; i < end; i++) {
        if (c->kind == VALUES) {
            bytes += vsize((uint64_t)c->values[i]);
        } else if (c->kind == SLICES) {
            const int64_t *v = c->values + c->starts[i];
            for (Py_ssize_t k = 0, m = c->sizes[i]; k < m; k++) bytes += vsize((uint64_t)v[k]);
        } else {
            bytes += 1 + vsize((uint64_t)c->sizes[i]) + c->sizes[i];
        }
    }
    *at = end;
    return bytes;
}

/* The Feature around a payload, and its map entry's whole size. */
static Py_ssize_t feature_size(const Column *c, Py_ssize_t payload) {
    Py_ssize_t listed = payload;
    if (c->kind != STRINGS) listed = payload ? 1 + vsize((uint64_t)payload) + payload : 0;
    return 1 + vsize((uint64_t)listed) + listed;
}

static Py_ssize_t entry_size(const Column *c, Py_ssize_t feature) {
    Py_ssize_t entry = 2 + c->key_len + 1 + vsize((uint64_t)feature) + feature;
    return 1 + vsize((uint64_t)entry) + entry;
}

static unsigned char *write_column(const Column *c, Py_ssize_t r, Py_ssize_t *at,
                                   Py_ssize_t bytes, unsigned char *o) {
    Py_ssize_t feature = feature_size(c, bytes);
    *o++ = 0x0a;
    o = put(o, (uint64_t)(2 + c->key_len + 1 + vsize((uint64_t)feature) + feature));
    *o++ = 0x0a;
    *o++ = (unsigned char)c->key_len;
    memcpy(o, c->key, (size_t)c->key_len);
    o += c->key_len;
    *o++ = 0x12;
    o = put(o, (uint64_t)feature);
    Py_ssize_t end = *at + c->counts[r];
    if (c->kind == STRINGS) {
        *o++ = 0x0a;
        o = put(o, (uint64_t)bytes);
        for (Py_ssize_t i = *at; i < end; i++) {
            *o++ = 0x0a;
            o = put(o, (uint64_t)c->sizes[i]);
            memcpy(o, c->blob + c->starts[i], (size_t)c->sizes[i]);
            o += c->sizes[i];
        }
    } else {
        Py_ssize_t listed = bytes ? 1 + vsize((uint64_t)bytes) + bytes : 0;
        *o++ = 0x1a;
        o = put(o, (uint64_t)listed);
        if (bytes) {
            *o++ = 0x0a;
            o = put(o, (uint64_t)bytes);
        }
        if (c->kind == VALUES) /* (a stray byte past the last varint: the frame's CRC's) */
            o = put_ids(o, c->values + *at, end - *at);
        for (Py_ssize_t i = *at; c->kind == SLICES && i < end; i++)
            o = put_ids(o, c->values + c->starts[i], c->sizes[i]);
    }
    *at = end;
    return o;
}

static PyObject *serialize(PyObject *self, PyObject *args) {
    PyObject *specs, *shards_obj, *held = NULL, *framed = NULL, *result = NULL;
    PyObject *ends_obj = NULL, *counts_obj = NULL;
    Py_ssize_t records, count, cols = 0, n = 0;
    if (!PyArg_ParseTuple(args, "OnOn", &specs, &records, &shards_obj, &count)) return NULL;
    Py_buffer shards_view = {0};
    Column *c = NULL;
    Py_ssize_t *bytes = NULL, *at = NULL, *offset = NULL;
    /* Bounded before anything is sized by them: no product below can wrap. */
    if (records < 0 || count < 1 || count > PY_SSIZE_T_MAX / 16 ||
        !(held = PySequence_Tuple(specs))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "records, count");
        return NULL;
    }
    cols = PyTuple_GET_SIZE(held);
    if (records > (PY_SSIZE_T_MAX / 16 - 1) / (cols ? cols : 1)) {
        Py_DECREF(held);
        return PyErr_NoMemory();
    }
    c = PyMem_Calloc((size_t)cols + 1, sizeof(Column));
    at = PyMem_Calloc((size_t)cols + 1, sizeof(Py_ssize_t));
    bytes = PyMem_Malloc(sizeof(Py_ssize_t) * ((size_t)(records * cols) + 1));
    offset = PyMem_Malloc(sizeof(Py_ssize_t) * ((size_t)records + 1));
    ends_obj = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    counts_obj = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (!c || !at || !bytes || !offset || !ends_obj || !counts_obj) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < cols; k++)
        if (column(PyTuple_GET_ITEM(held, k), records, &c[k]) < 0) goto done;
    if (int64s(shards_obj, &shards_view, &n) < 0) goto done;
    const int64_t *shard = shards_view.buf;
    Py_ssize_t r = 0;
    for (; n == records && r < records && shard[r] >= 0 && shard[r] < count; r++) {}
    if (n != records || r != records) {
        PyErr_SetString(PyExc_ValueError, "one shard a record, each below count");
        goto done;
    }
    int64_t *ends = (int64_t *)PyBytes_AS_STRING(ends_obj);
    int64_t *per_shard = (int64_t *)PyBytes_AS_STRING(counts_obj);
    Py_ssize_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(ends, 0, sizeof(int64_t) * (size_t)count);
    memset(per_shard, 0, sizeof(int64_t) * (size_t)count);
    for (Py_ssize_t r = 0; r < records; r++) { /* each record's size: its frame's */
        Py_ssize_t size = 0;
        for (Py_ssize_t k = 0; k < cols; k++) {
            bytes[r * cols + k] = payload(&c[k], r, &at[k]);
            size += entry_size(&c[k], feature_size(&c[k], bytes[r * cols + k]));
        }
        offset[r] = size; /* its features' bytes */
        ends[shard[r]] += 1 + vsize((uint64_t)size) + size + 16;
        per_shard[shard[r]]++;
        if (ends[shard[r]] > PY_SSIZE_T_MAX / 4) total = -1; /* slices may overlap: no bound */
    }
    for (Py_ssize_t s = 0; total >= 0 && s < count; s++) { /* each group's start, for now */
        Py_ssize_t size = ends[s];
        ends[s] = total;
        total = size > PY_SSIZE_T_MAX / 4 - total ? -1 : total + size;
    }
    Py_END_ALLOW_THREADS
    if (total < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(framed = PyBytes_FromStringAndSize(NULL, total))) goto done;
    unsigned char *base = (unsigned char *)PyBytes_AS_STRING(framed);
    Py_BEGIN_ALLOW_THREADS
    memset(at, 0, sizeof(Py_ssize_t) * (size_t)cols);
    for (Py_ssize_t r = 0; r < records; r++) {
        Py_ssize_t features = offset[r], start = ends[shard[r]];
        Py_ssize_t size = 1 + vsize((uint64_t)features) + features;
        unsigned char *o = base + start + 12;
        *o++ = 0x0a;
        o = put(o, (uint64_t)features);
        for (Py_ssize_t k = 0; k < cols; k++)
            o = write_column(&c[k], r, &at[k], bytes[r * cols + k], o);
        feedgpu_frame_at(base + start, (size_t)size);
        ends[shard[r]] += size + 16;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("OOO", framed, ends_obj, counts_obj);
done:
    for (Py_ssize_t k = 0; c && k < cols; k++)
        for (int v = 0; v < 4; v++)
            if (c[k].views[v].obj) PyBuffer_Release(&c[k].views[v]);
    if (shards_view.obj) PyBuffer_Release(&shards_view);
    PyMem_Free(c);
    PyMem_Free(at);
    PyMem_Free(bytes);
    PyMem_Free(offset);
    Py_XDECREF(framed);
    Py_XDECREF(ends_obj);
    Py_XDECREF(counts_obj);
    Py_XDECREF(held);
    return result;
}

/* --pack's sequences of streams (each a shard's documents' ids, whole sequences but for a
 * last one to pad): per sequence of n ids, the ids (pad after the last real one), each id's
 * position in its piece (a document's ids in a sequence, from 0) and the piece's segment
 * (from 1 in its sequence; 0 on padding); and each sequence's real ids. `records.Packer`'s
 * reference in numpy gives the same. */
static PyObject *pack(PyObject *self, PyObject *args) {
    PyObject *ids_obj, *lengths_obj, *grid = NULL, *real = NULL, *result = NULL;
    Py_buffer ids = {0}, marks = {0}, lengths = {0};
    Py_ssize_t n, m = 0, k = 0, rows = 0, sum = 0;
    long long pad;
    if (!PyArg_ParseTuple(args, "Oy*OnL", &ids_obj, &marks, &lengths_obj, &n, &pad)) return NULL;
    if (int64s(ids_obj, &ids, &m) < 0 || int64s(lengths_obj, &lengths, &k) < 0) goto done;
    const int64_t *len = lengths.buf;
    Py_ssize_t i = 0;
    for (; n >= 1 && i < k && len[i] >= 0 && len[i] <= m - sum; i++) {
        sum += len[i];
        rows += len[i] / n + (len[i] % n != 0); /* no sum that could wrap */
    }
    if (n < 1 || i != k || sum != m || marks.len != m || rows > PY_SSIZE_T_MAX / 24 / n) {
        PyErr_SetString(PyExc_ValueError, "ids, marks and lengths disagree");
        goto done;
    }
    grid = PyBytes_FromStringAndSize(NULL, 3 * rows * n * (Py_ssize_t)sizeof(int64_t));
    real = PyBytes_FromStringAndSize(NULL, rows * (Py_ssize_t)sizeof(int64_t));
    if (!grid || !real) goto done;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(grid), *got = (int64_t *)PyBytes_AS_STRING(real);
    const int64_t *v = ids.buf;
    const unsigned char *mark = marks.buf;
    Py_BEGIN_ALLOW_THREADS
    int64_t *pos = out + rows * n, *seg = out + 2 * rows * n;
    Py_ssize_t at = 0, row = 0;
    for (Py_ssize_t s = 0; s < k; s++) {
        int64_t p = 0, g = 0;
        Py_ssize_t slots = (len[s] / n + (len[s] % n != 0)) * n;
        for (Py_ssize_t j = 0; j < slots; j++) {
            Py_ssize_t o = row * n + j;
            if (j >= len[s]) { /* padding */
                out[o] = pad, pos[o] = 0, seg[o] = 0;
                continue;
            }
            int first = j % n == 0;
            if (first || mark[at + j]) {
                g = first ? 1 : g + 1;
                p = 0;
            } else {
                p++;
            }
            out[o] = v[at + j], pos[o] = p, seg[o] = g;
        }
        for (Py_ssize_t r = 0; r < slots / n; r++) {
            Py_ssize_t left = len[s] - r * n;
            got[row + r] = left < n ? left : n;
        }
        at += len[s];
        row += slots / n;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("OO", grid, real);
done:
    Py_XDECREF(grid);
    Py_XDECREF(real);
    if (ids.obj) PyBuffer_Release(&ids);
    if (lengths.obj) PyBuffer_Release(&lengths);
    if (marks.obj) PyBuffer_Release(&marks);
    return result;
}

static PyMethodDef methods[] = {
    {"serialize", serialize, METH_VARARGS,
     "serialize(columns, records, shards, count) -> (framed, ends, counts): records tf.train."
     "Examples, framed as TFRecords and grouped by shard (shards: an int64 buffer, one below "
     "count a record), groups in shard order, records in order within; ends and counts: int64 "
     "bytes, each shard's group's end in framed and its records. columns, in key order: (key, "
     "0, counts, values) int64 values; (key, 1, counts, pool, starts, sizes) int64 values "
     "gathered from slices of pool; (key, 2, counts, blob, starts, sizes) byte strings of "
     "blob; counts: per record, its values, slices or strings."},
    {"pack", pack, METH_VARARGS,
     "pack(ids, marks, lengths, n, pad) -> (grid, real): streams of ids (int64, their lengths "
     "an int64 buffer; marks: a byte a id, nonzero where a document starts) cut into "
     "sequences of n, the last of each padded with pad: the ids, positions and segments "
     "(int64 bytes, three blocks of sequences x n) and each sequence's real ids."},
    {"numbered", feedgpu_numbered, METH_VARARGS,
     "numbered(prefix, numbers) -> (blob, sizes): prefix (bytes) followed by each number (an "
     "int64 buffer) in decimal, one after another, and each one's size (int64 bytes)."},
    {"line_ends", feedgpu_line_ends, METH_VARARGS,
     "line_ends(data, size=-1) -> bytes: int64 offsets into data (bytes), 0 then each line's "
     "end (after each newline, and the end if its last line has none), of data[:size] (of all "
     "of data for a negative size)."},
    {"route", feedgpu_route, METH_VARARGS,
     "route(blob, starts, sizes, k0, k1, buckets) -> bytes: uint64 SipHash-2-4 of each string "
     "of blob under the key (k0, k1), modulo buckets: tf.strings.to_hash_bucket_strong's."},
    {"crc32c", feedgpu_crc32c, METH_VARARGS,
     "crc32c(data, hardware) -> int: CRC32C of data, by the CPU's instruction where it has one "
     "and hardware is true, else by tables (for tests of both)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records", "Serialized text examples, without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__records(void) {
    feedgpu_crc_init();
    return PyModule_Create(&module);
}
