/* Serialized tf.train.Examples of {doc_id, input_ids, length[, label]}, one per record (a
 * document, or a block of consecutive documents), byte for byte what the encode_proto graph in
 * examples.py and feedgpu's own codec write, without the GIL while bytes are written.
 *
 * Why: with WordPiece ids from the compiled step, building examples had become the largest
 * part of a conversion after tokenizing (benchmarks/RESULTS.md, "Issue 29, fifth session").
 *
 * The wire format, features in key order (doc_id, input_ids, label, length), each a map entry
 * of Features.feature:
 *   Example   = 0a len Features
 *   Features  = for each feature: 0a len (0a len key 12 len Feature)
 *   Feature   = 0a len BytesList (doc_id) | 1a len Int64List (the others)
 *   BytesList = for each value: 0a len bytes
 *   Int64List = 0a len varints (packed; nothing when empty)
 */
#include "_records.h" /* Python.h first */

#include "_int64s.h"

#include <stdint.h>
#include <string.h>

/* A varint's bytes: 1 + (its significant bits - 1) / 7, without a loop (a vocabulary's ids
 * take one or two bytes in no order a branch predicts). */
static inline Py_ssize_t vsize(uint64_t v) {
#if defined(__GNUC__)
    static const unsigned char by_zeros[64] = {
        10, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7,
        6,  6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 3,
        3,  3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};
    return by_zeros[__builtin_clzll(v | 1)];
#else
    Py_ssize_t n = 1;
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
 * written, the second kept only when needed. It may write one byte past the last varint: into
 * the record's next field (label or length: one always follows), written over after. */
static unsigned char *put_ids(unsigned char *p, const int64_t *v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
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

/* Sizes of one record's parts; all computed before any byte is written. */
typedef struct {
    Py_ssize_t ids_bytes, ids_listed, ids_feature, ids_entry;
    Py_ssize_t doc_values, doc_feature, doc_entry;
    Py_ssize_t len_values, len_feature, len_entry;
    Py_ssize_t lab_values, lab_feature, lab_entry;
    Py_ssize_t total, size;
} Plan;

typedef struct {
    const int64_t *ids, *sizes, *labels, *per_record;
    const int64_t *before, *after; /* the special ids around each document's own */
    Py_ssize_t docs, records, n_before, n_after, specials_bytes;
    const char **names;
    Py_ssize_t *name_sizes;
    Py_ssize_t *starts;    /* where each document's own ids begin in ids */
    Py_ssize_t *first_doc; /* per record, and one past the last */
    Plan *plans;
    unsigned char **out;
} Job;

/* A document's own ids (its size but the special ones). */
static inline Py_ssize_t own(const Job *job, Py_ssize_t d) {
    return job->sizes[d] - job->n_before - job->n_after;
}

static Py_ssize_t entry_size(Py_ssize_t key, Py_ssize_t feature) {
    Py_ssize_t entry = 2 + key + 1 + vsize((uint64_t)feature) + feature;
    return 1 + vsize((uint64_t)entry) + entry;
}

static void plan_record(const Job *job, Py_ssize_t r) {
    Plan *p = &job->plans[r];
    Py_ssize_t d0 = job->first_doc[r], d1 = job->first_doc[r + 1];
    memset(p, 0, sizeof(*p));
    for (Py_ssize_t d = d0; d < d1; d++) {
        const int64_t *v = job->ids + job->starts[d];
        p->ids_bytes += job->specials_bytes;
        for (Py_ssize_t i = 0, n = own(job, d); i < n; i++) p->ids_bytes += vsize((uint64_t)v[i]);
    }
    p->ids_listed = p->ids_bytes ? 1 + vsize((uint64_t)p->ids_bytes) + p->ids_bytes : 0;
    p->ids_feature = 1 + vsize((uint64_t)p->ids_listed) + p->ids_listed;
    p->ids_entry = entry_size(9, p->ids_feature);
    for (Py_ssize_t d = d0; d < d1; d++) {
        p->doc_values += 1 + vsize((uint64_t)job->name_sizes[d]) + job->name_sizes[d];
        p->len_values += vsize((uint64_t)job->sizes[d]);
        if (job->labels) p->lab_values += vsize((uint64_t)job->labels[d]);
    }
    p->doc_feature = 1 + vsize((uint64_t)p->doc_values) + p->doc_values;
    p->doc_entry = entry_size(6, p->doc_feature);
    p->len_feature = 1 + vsize((uint64_t)(1 + vsize((uint64_t)p->len_values) + p->len_values)) +
                     1 + vsize((uint64_t)p->len_values) + p->len_values;
    p->len_entry = entry_size(6, p->len_feature);
    if (job->labels) {
        Py_ssize_t listed = 1 + vsize((uint64_t)p->lab_values) + p->lab_values;
        p->lab_feature = 1 + vsize((uint64_t)listed) + listed;
        p->lab_entry = entry_size(5, p->lab_feature);
    }
    p->total = p->doc_entry + p->ids_entry + p->len_entry + p->lab_entry;
    p->size = 1 + vsize((uint64_t)p->total) + p->total;
}

/* An entry's head: 0a len (0a keylen key 12 featurelen). */
static unsigned char *head(unsigned char *o, const char *key, Py_ssize_t key_size,
                           Py_ssize_t feature) {
    Py_ssize_t entry = 2 + key_size + 1 + vsize((uint64_t)feature) + feature;
    *o++ = 0x0a;
    o = put(o, (uint64_t)entry);
    *o++ = 0x0a;
    *o++ = (unsigned char)key_size;
    memcpy(o, key, key_size);
    o += key_size;
    *o++ = 0x12;
    return put(o, (uint64_t)feature);
}

static unsigned char *put_all(unsigned char *o, const int64_t *v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) o = put(o, (uint64_t)v[i]);
    return o;
}

static unsigned char *int64_feature(unsigned char *o, const int64_t *v, Py_ssize_t n,
                                    Py_ssize_t values) {
    Py_ssize_t listed = 1 + vsize((uint64_t)values) + values;
    *o++ = 0x1a;
    o = put(o, (uint64_t)listed);
    *o++ = 0x0a;
    o = put(o, (uint64_t)values);
    return put_all(o, v, n);
}

static void write_record(const Job *job, Py_ssize_t r) {
    const Plan *p = &job->plans[r];
    Py_ssize_t d0 = job->first_doc[r], d1 = job->first_doc[r + 1];
    unsigned char *o = job->out[r];
    *o++ = 0x0a;
    o = put(o, (uint64_t)p->total);
    o = head(o, "doc_id", 6, p->doc_feature);
    *o++ = 0x0a;
    o = put(o, (uint64_t)p->doc_values);
    for (Py_ssize_t d = d0; d < d1; d++) {
        *o++ = 0x0a;
        o = put(o, (uint64_t)job->name_sizes[d]);
        memcpy(o, job->names[d], job->name_sizes[d]);
        o += job->name_sizes[d];
    }
    o = head(o, "input_ids", 9, p->ids_feature);
    *o++ = 0x1a;
    o = put(o, (uint64_t)p->ids_listed);
    if (p->ids_bytes) {
        *o++ = 0x0a;
        o = put(o, (uint64_t)p->ids_bytes);
        for (Py_ssize_t d = d0; d < d1; d++) {
            o = put_all(o, job->before, job->n_before);
            o = put_ids(o, job->ids + job->starts[d], own(job, d));
            o = put_all(o, job->after, job->n_after);
        }
    }
    if (job->labels) {
        o = head(o, "label", 5, p->lab_feature);
        o = int64_feature(o, job->labels + d0, d1 - d0, p->lab_values);
    }
    o = head(o, "length", 6, p->len_feature);
    int64_feature(o, job->sizes + d0, d1 - d0, p->len_values);
}

static PyObject *examples(PyObject *self, PyObject *args) {
    PyObject *ids_obj, *sizes_obj, *names_obj, *labels_obj, *blocks_obj;
    PyObject *before_obj = Py_None, *after_obj = Py_None, *starts_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOO|OOO", &ids_obj, &sizes_obj, &names_obj, &labels_obj,
                          &blocks_obj, &before_obj, &after_obj, &starts_obj))
        return NULL;
    Py_buffer ids = {0}, sizes = {0}, labels = {0}, blocks = {0};
    Py_buffer before = {0}, after = {0}, starts = {0};
    PyObject *held = NULL, *result = NULL;
    Job job = {0};
    Py_ssize_t id_count, n = 0;
    if (int64s(ids_obj, &ids, &id_count) < 0) return NULL;
    if (int64s(sizes_obj, &sizes, &job.docs) < 0) goto done;
    if (labels_obj != Py_None && int64s(labels_obj, &labels, &n) < 0) goto done;
    if (labels.obj && n != job.docs) {
        PyErr_SetString(PyExc_ValueError, "one label a document");
        goto done;
    }
    job.records = job.docs;
    if (blocks_obj != Py_None && int64s(blocks_obj, &blocks, &job.records) < 0) goto done;
    if (before_obj != Py_None && int64s(before_obj, &before, &job.n_before) < 0) goto done;
    if (after_obj != Py_None && int64s(after_obj, &after, &job.n_after) < 0) goto done;
    if (starts_obj != Py_None && int64s(starts_obj, &starts, &n) < 0) goto done;
    if (starts.obj && n != job.docs) {
        PyErr_SetString(PyExc_ValueError, "one start a document");
        goto done;
    }
    held = PySequence_Tuple(names_obj); /* keeps every name alive while the GIL is released */
    if (!held) goto done;
    if (PyTuple_GET_SIZE(held) != job.docs) {
        PyErr_SetString(PyExc_ValueError, "one doc_id a document");
        goto done;
    }
    job.ids = ids.buf;
    job.sizes = sizes.buf;
    job.labels = labels.obj ? labels.buf : NULL;
    job.per_record = blocks.obj ? blocks.buf : NULL;
    job.before = before.obj ? before.buf : NULL;
    job.after = after.obj ? after.buf : NULL;
    for (Py_ssize_t i = 0; i < job.n_before; i++) job.specials_bytes += vsize(job.before[i]);
    for (Py_ssize_t i = 0; i < job.n_after; i++) job.specials_bytes += vsize(job.after[i]);
    job.names = PyMem_Malloc(sizeof(char *) * (job.docs + 1));
    job.name_sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (job.docs + 1));
    job.starts = PyMem_Malloc(sizeof(Py_ssize_t) * (job.docs + 1));
    job.first_doc = PyMem_Malloc(sizeof(Py_ssize_t) * (job.records + 1));
    job.plans = PyMem_Malloc(sizeof(Plan) * (job.records + 1));
    job.out = PyMem_Malloc(sizeof(unsigned char *) * (job.records + 1));
    if (!job.names || !job.name_sizes || !job.starts || !job.first_doc || !job.plans ||
        !job.out) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t d = 0; d < job.docs; d++) {
        PyObject *name = PyTuple_GET_ITEM(held, d);
        if (PyBytes_Check(name)) {
            job.names[d] = PyBytes_AS_STRING(name);
            job.name_sizes[d] = PyBytes_GET_SIZE(name);
        } else if (!(job.names[d] = PyUnicode_AsUTF8AndSize(name, &job.name_sizes[d]))) {
            goto done;
        }
    }
    /* Each document's own ids, and each record's documents: checked here, so the loops below
     * cannot overrun. Without starts, the documents' own ids follow each other in ids. */
    Py_ssize_t doc = 0, at = 0;
    for (Py_ssize_t d = 0; d < job.docs; d++) {
        Py_ssize_t start = starts.obj ? ((const int64_t *)starts.buf)[d] : at;
        if (job.sizes[d] < job.n_before + job.n_after) {
            PyErr_SetString(PyExc_ValueError,
                            "a negative document size, or one under its special ids");
            goto done;
        }
        if (start < 0 || start > id_count || own(&job, d) > id_count - start) {
            PyErr_SetString(PyExc_ValueError, "sizes do not cover the ids");
            goto done;
        }
        job.starts[d] = start;
        at = start + own(&job, d);
    }
    if (!starts.obj && at != id_count) {
        PyErr_SetString(PyExc_ValueError, "sizes do not cover the ids");
        goto done;
    }
    for (Py_ssize_t r = 0; r < job.records; r++) {
        Py_ssize_t take = job.per_record ? job.per_record[r] : 1;
        if (take < 1 || take > job.docs - doc) { /* no sum that could overflow */
            PyErr_SetString(PyExc_ValueError, "blocks do not cover the documents");
            goto done;
        }
        job.first_doc[r] = doc;
        doc += take;
    }
    if (doc != job.docs) {
        PyErr_SetString(PyExc_ValueError, "blocks do not cover the documents");
        goto done;
    }
    job.first_doc[job.records] = doc;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < job.records; r++) plan_record(&job, r);
    Py_END_ALLOW_THREADS
    result = PyList_New(job.records);
    if (!result) goto done;
    for (Py_ssize_t r = 0; r < job.records; r++) {
        PyObject *record = PyBytes_FromStringAndSize(NULL, job.plans[r].size);
        if (!record) {
            Py_CLEAR(result);
            goto done;
        }
        job.out[r] = (unsigned char *)PyBytes_AS_STRING(record);
        PyList_SET_ITEM(result, r, record);
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < job.records; r++) write_record(&job, r);
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(job.names);
    PyMem_Free(job.name_sizes);
    PyMem_Free(job.starts);
    PyMem_Free(job.first_doc);
    PyMem_Free(job.plans);
    PyMem_Free(job.out);
    Py_XDECREF(held);
    if (ids.obj) PyBuffer_Release(&ids);
    if (sizes.obj) PyBuffer_Release(&sizes);
    if (labels.obj) PyBuffer_Release(&labels);
    if (blocks.obj) PyBuffer_Release(&blocks);
    if (before.obj) PyBuffer_Release(&before);
    if (after.obj) PyBuffer_Release(&after);
    if (starts.obj) PyBuffer_Release(&starts);
    return result;
}

static PyMethodDef methods[] = {
    {"examples", examples, METH_VARARGS,
     "examples(ids, sizes, doc_ids, labels, per_record[, before, after, starts]) -> list of "
     "serialized Examples: ids and sizes (ids per document, as stored) int64 buffers, doc_ids "
     "str or bytes, labels an int64 buffer or None, per_record (documents a record holds) an "
     "int64 buffer or None (one each); before and after, int64 buffers or None, the special "
     "ids around each document's own; starts, an int64 buffer or None, where each document's "
     "own ids (its size less the special ids) begin in ids (None: one after another, all of "
     "ids)."},
    {"numbered", feedgpu_numbered, METH_VARARGS,
     "numbered(prefix, numbers) -> list of str: prefix followed by each number (an int64 "
     "buffer) in decimal."},
    {"frame", feedgpu_frame, METH_VARARGS,
     "frame(records) -> bytes: the records (bytes) framed as TFRecords, one after another."},
    {"line_ends", feedgpu_line_ends, METH_VARARGS,
     "line_ends(data) -> bytes: int64 offsets into data (bytes), 0 then each line's end (after "
     "each newline, and the end of data if its last line has none)."},
    {"route", feedgpu_route, METH_VARARGS,
     "route(ids, k0, k1, buckets) -> bytes: uint64 SipHash-2-4 of each id (str as UTF-8, or "
     "bytes) under the key (k0, k1), modulo buckets: tf.strings.to_hash_bucket_strong's."},
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
