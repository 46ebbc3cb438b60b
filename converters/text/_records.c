/* The `_records` module: serialized examples of a batch (`examples`, as a list; or
 * `shard_records`, framed and grouped by shard: _shard_records.c), built by _example_wire.c
 * without the GIL while bytes are written.
 *
 * Why: with WordPiece ids from the compiled step, building examples had become the largest
 * part of a conversion after tokenizing (benchmarks/RESULTS.md, "Issue 29, fifth session").
 */
#include "_records.h" /* Python.h first */

#include "_int64s.h"

#include <stdint.h>

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
    const int64_t *per_record = blocks.obj ? blocks.buf : NULL;
    job.before = before.obj ? before.buf : NULL;
    job.after = after.obj ? after.buf : NULL;
    job.specials_bytes = feedgpu_specials_bytes(&job);
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
        Py_ssize_t take = per_record ? per_record[r] : 1;
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
    for (Py_ssize_t r = 0; r < job.records; r++) feedgpu_plan_record(&job, r);
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
    for (Py_ssize_t r = 0; r < job.records; r++) feedgpu_write_record(&job, r);
    Py_END_ALLOW_THREADS
done:
    feedgpu_job_free(&job);
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
    {"shard_records", feedgpu_shard_records, METH_VARARGS,
     "shard_records(ids, lengths, numbers, prefixes, runs, before, after, budget, unk_id, "
     "per_record, record_ids, record_docs, k0, k1, count) -> (framed, ends, counts, (start, "
     "stop), doc_shard, full, unknown, stored): the records of documents named prefix + number "
     "(runs: documents per prefix), framed and grouped by shard (ends, counts: int64 bytes per "
     "shard), the first record's span in framed, and int64 bytes per document (framed.py)."},
    {"numbered", feedgpu_numbered, METH_VARARGS,
     "numbered(prefix, numbers) -> list of str: prefix followed by each number (an int64 "
     "buffer) in decimal."},
    {"frame", feedgpu_frame, METH_VARARGS,
     "frame(records) -> bytes: the records (bytes) framed as TFRecords, one after another."},
    {"line_ends", feedgpu_line_ends, METH_VARARGS,
     "line_ends(data, size=-1) -> bytes: int64 offsets into data (bytes), 0 then each line's "
     "end (after each newline, and the end if its last line has none), of data[:size] (of all "
     "of data for a negative size)."},
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
