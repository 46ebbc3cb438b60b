/* A batch of numbered documents (JSON lines' "file:line") made into records in one call,
 * without the GIL (`framed.shard_records`): each document truncated and given its special ids,
 * its name formatted, the records cut (blocks.cut_blocks's rule, for one split), each record
 * routed by its first document's name (examples.route's SipHash, then the split's shards),
 * written and framed as TFRecords, grouped by shard in record order; and each document's
 * statistics for `pieces.ChunkWriter.count_batch`.
 *
 * Why: done as separate steps (names as str, blocks and unknown ids by numpy, records as a list
 * of bytes, then framed again on the thread that writes), they were the largest of the
 * steps after tokenizing (49.6 ms on one thread for a 48 MB short-document corpus's batches,
 * this 27.4: benchmarks/RESULTS.md, "Issue 29, tenth session"). */
#include "_records.h" /* Python.h first */

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "_int64s.h"
#include "_varints.h"

/* Each record's first document, and one past the last; the record count. blocks.cut_blocks's
 * rule for one split: per_record documents each, or with per_record 0 the documents that start
 * within each window of record_ids ids (sizes: as stored), at most record_docs of them. */
static Py_ssize_t cut(const int64_t *sizes, Py_ssize_t docs, Py_ssize_t per_record,
                      Py_ssize_t record_ids, Py_ssize_t record_docs, Py_ssize_t *first_doc) {
    Py_ssize_t records = 0, run = 0;
    int64_t start = 0, window = -1;
    for (Py_ssize_t d = 0; d < docs; d++) {
        int opens;
        if (per_record) {
            opens = d % per_record == 0;
        } else {
            int64_t w = start / record_ids;
            opens = w != window || (d - run) % record_docs == 0;
            if (w != window) window = w, run = d;
            start += sizes[d];
        }
        if (opens) first_doc[records++] = d;
    }
    first_doc[records] = docs;
    return records;
}

/* The bytes of the first count varints at p, within size. */
static Py_ssize_t varint_bytes(const unsigned char *p, Py_ssize_t count, Py_ssize_t size) {
    Py_ssize_t k = 0;
    for (; count && k < size; k++) count -= p[k] < 0x80;
    return k;
}

/* The int64 bytes object of n values, and its values; NULL with MemoryError if too many. */
static PyObject *int64_bytes(Py_ssize_t n, int64_t **values) {
    if (n > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int64_t)) {
        *values = NULL;
        return PyErr_NoMemory();
    }
    PyObject *b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    *values = b ? (int64_t *)PyBytes_AS_STRING(b) : NULL;
    return b;
}

typedef struct {
    const int64_t *lengths, *numbers, *runs;
    const int64_t *vbytes, *unknown_in;  /* given varints: each document's bytes and unknown ids */
    Py_ssize_t nruns, budget, per_record, record_ids, record_docs, count;
    int64_t unk;
    uint64_t k0, k1;
    const char **prefixes;
    Py_ssize_t *prefix_sizes;
    char *name_room;
    int64_t *full, *unknown, *doc_shard, *stored; /* out, per document (stored: job->sizes) */
    Py_ssize_t *shard_of, *at;           /* per record: its shard (from 0), its frame's offset */
    Py_ssize_t *varint_at, *varint_end;  /* per document, in job->varints */
    int64_t *ends, *counts;              /* out, per shard: bytes to its group's end, records */
} Batch;

/* The bits set in x, under 2^16: __builtin_popcount without -mpopcnt (the baseline x86-64 a wheel
 * is built for) is a call into libgcc, 0.3% of a short-document conversion's CPU. */
static inline unsigned bits16(unsigned x) {
    x -= (x >> 1) & 0x5555u;
    x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
    x = (x + (x >> 4)) & 0x0F0Fu;
    return (x + (x >> 8)) & 0x1Fu;
}

/* How many varints end in the n bytes at p (bytes under 0x80), sixteen bytes a step where the
 * CPU has SSE2: the check of given varints reads every byte of them. */
static Py_ssize_t varint_count(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t count = 0, k = 0;
#if defined(__SSE2__)
    for (; n - k >= 16; k += 16) {
        unsigned high = (unsigned)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(p + k)));
        count += 16 - bits16(high);
    }
#endif
    for (; k < n; k++) count += p[k] < 0x80;
    return count;
}

/* Given varints (a tuple of the bytes, each document's bytes and unknown ids: int64) into b,
 * checked against the documents' id counts (b->lengths): -1 with ValueError if they do not
 * add up (each document's bytes exactly its ids' varints, its unknown ids no more than its
 * ids), so no loop reads past them and no record says other than it holds. */
static int given_varints(PyObject *given, Py_buffer *data, Py_buffer *sizes, Py_buffer *unknown,
                         Batch *b, Py_ssize_t docs) {
    Py_ssize_t n = 0, m = 0;
    PyObject *sizes_obj, *unknown_obj;
    if (!PyArg_ParseTuple(given, "y*OO", data, &sizes_obj, &unknown_obj)) return -1;
    if (int64s(sizes_obj, sizes, &n) < 0 || int64s(unknown_obj, unknown, &m) < 0) return -1;
    b->vbytes = sizes->buf, b->unknown_in = unknown->buf;
    const unsigned char *bytes = data->buf;
    Py_ssize_t at = 0, d = 0;
    for (; d < docs && n == docs && m == docs; d++) {
        Py_ssize_t size = b->vbytes[d], ids = b->lengths[d];
        if (size < ids || size > 10 * ids || size > data->len - at) break;
        if (size && bytes[at + size - 1] >= 0x80) break;
        if (varint_count(bytes + at, size) != ids) break;
        if (b->unknown_in[d] < 0 || b->unknown_in[d] > ids) break;
        at += size;
    }
    if (d != docs || at != data->len) {
        PyErr_SetString(PyExc_ValueError, "varints, their sizes and the lengths disagree");
        return -1;
    }
    return 0;
}

/* Everything but the bytes: sizes, names, records and their plans, shards, where each record's
 * frame goes. The frames' total. */
static Py_ssize_t arrange(Job *job, Batch *b) {
    Py_ssize_t d = 0, extra = job->n_before + job->n_after;
    char *room = b->name_room;
    for (Py_ssize_t r = 0; r < b->nruns; r++) {
        for (Py_ssize_t end = d + b->runs[r]; d < end; d++) {
            char digits[24], *first = feedgpu_decimal(digits + sizeof digits, b->numbers[d]);
            Py_ssize_t n = digits + sizeof digits - first;
            memcpy(room, b->prefixes[r], b->prefix_sizes[r]);
            memcpy(room + b->prefix_sizes[r], first, n);
            job->names[d] = room;
            job->name_sizes[d] = b->prefix_sizes[r] + n;
            room += job->name_sizes[d];
        }
    }
    /* Each document's kept ids as varints, once (with its unknown ids counted): planned and
     * written from there, the ids are read once, not three times. Given as varints already
     * (the JSON-lines step's), a truncated document's kept ones are found in its bytes. */
    unsigned char *varints = (unsigned char *)job->varints, *o = varints;
    for (Py_ssize_t i = 0, at = 0; i < job->docs; i++) {
        Py_ssize_t n = b->lengths[i], kept = b->budget >= 0 && n > b->budget ? b->budget : n;
        int64_t hits = 0;
        if (b->vbytes) { /* at: in the given bytes */
            Py_ssize_t size = b->vbytes[i];
            b->varint_at[i] = at;
            b->varint_end[i] = at + (kept < n ? varint_bytes(varints + at, kept, size) : size);
            hits = b->unknown_in[i];
            at += size;
        } else { /* at: in the ids */
            const int64_t *ids = job->ids + at;
            b->varint_at[i] = o - varints;
            o = put_ids(o, ids, kept, 1, b->unk, &hits);
            for (Py_ssize_t k = kept; k < n; k++) hits += ids[k] == b->unk; /* truncated */
            b->varint_end[i] = o - varints;
            at += n;
        }
        b->stored[i] = kept + extra;
        b->full[i] = n + extra;
        b->unknown[i] = hits;
    }
    job->records = cut(job->sizes, job->docs, b->per_record, b->record_ids, b->record_docs,
                       job->first_doc);
    memset(b->ends, 0, sizeof(int64_t) * b->count);
    memset(b->counts, 0, sizeof(int64_t) * b->count);
    for (Py_ssize_t r = 0; r < job->records; r++) {
        Py_ssize_t f = job->first_doc[r];
        uint64_t h = feedgpu_siphash(b->k0, b->k1, (const unsigned char *)job->names[f],
                                     (size_t)job->name_sizes[f]);
        b->shard_of[r] = (Py_ssize_t)(h % (1ull << 62) % (uint64_t)b->count);
        feedgpu_plan_record(job, r);
        b->ends[b->shard_of[r]] += job->plans[r].size + 16;
        b->counts[b->shard_of[r]]++;
        for (Py_ssize_t k = f; k < job->first_doc[r + 1]; k++) b->doc_shard[k] = b->shard_of[r];
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t s = 0; s < b->count; s++) { /* each group's start, for now */
        Py_ssize_t size = b->ends[s];
        b->ends[s] = total;
        total += size;
    }
    for (Py_ssize_t r = 0; r < job->records; r++) {
        b->at[r] = b->ends[b->shard_of[r]];
        b->ends[b->shard_of[r]] += job->plans[r].size + 16;
    }
    return total;
}

PyObject *feedgpu_shard_records(PyObject *self, PyObject *args) {
    PyObject *ids_obj, *lengths_obj, *numbers_obj, *prefixes_obj, *runs_obj, *before_obj,
        *after_obj;
    Batch b = {0};
    Job job = {0};
    long long unk;
    if (!PyArg_ParseTuple(args, "OOOOOOOnLnnnKKn", &ids_obj, &lengths_obj, &numbers_obj,
                          &prefixes_obj, &runs_obj, &before_obj, &after_obj, &b.budget, &unk,
                          &b.per_record, &b.record_ids, &b.record_docs, &b.k0, &b.k1, &b.count))
        return NULL;
    b.unk = unk;
    Py_buffer ids = {0}, lengths = {0}, numbers = {0}, runs = {0}, before = {0}, after = {0};
    PyObject *held = NULL, *framed = NULL, *result = NULL, *out[6] = {0};
    Py_ssize_t id_count = PY_SSIZE_T_MAX, n = 0;
    int given = PyTuple_Check(ids_obj); /* (varints, their sizes, unknown ids): `given_varints` */
    Py_buffer vdata = {0}, vsizes = {0}, vunknown = {0};
    if (b.per_record < 0 || b.record_ids < 1 || b.record_docs < 1 || b.count < 1 ||
        b.budget < -1) {
        PyErr_SetString(PyExc_ValueError, "budget, per_record, record_ids, record_docs or count");
        return NULL;
    }
    if (!given && int64s(ids_obj, &ids, &id_count) < 0) return NULL;
    if (int64s(lengths_obj, &lengths, &job.docs) < 0 || int64s(numbers_obj, &numbers, &n) < 0 ||
        int64s(runs_obj, &runs, &b.nruns) < 0 || int64s(before_obj, &before, &job.n_before) < 0 ||
        int64s(after_obj, &after, &job.n_after) < 0)
        goto done;
    held = PySequence_Tuple(prefixes_obj); /* each prefix held while the GIL is released */
    if (!held) goto done;
    Py_ssize_t docs = job.docs, sum = 0, room = 0;
    b.lengths = lengths.buf, b.numbers = numbers.buf, b.runs = runs.buf;
    Py_ssize_t d = 0;
    for (; d < docs; d++) { /* checked here: no loop below can overrun */
        if (b.lengths[d] < 0 || b.lengths[d] > id_count - sum) break;
        sum += b.lengths[d];
    }
    Py_ssize_t in_runs = 0, r = 0;
    for (; r < b.nruns && b.runs[r] >= 0 && b.runs[r] <= docs - in_runs; r++)
        in_runs += b.runs[r]; /* no sum that could overflow */
    if (d != docs || (!given && sum != id_count) || n != docs || r != b.nruns || in_runs != docs ||
        PyTuple_GET_SIZE(held) != b.nruns) {
        PyErr_SetString(PyExc_ValueError, "lengths, numbers, runs and prefixes disagree");
        goto done;
    }
    if (given && given_varints(ids_obj, &vdata, &vsizes, &vunknown, &b, docs) < 0) goto done;
    b.prefixes = PyMem_Malloc(sizeof(char *) * (b.nruns + 1));
    b.prefix_sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (b.nruns + 1));
    if (!b.prefixes || !b.prefix_sizes) goto nomemory;
    for (Py_ssize_t r = 0; r < b.nruns; r++) {
        PyObject *prefix = PyTuple_GET_ITEM(held, r);
        if (!PyUnicode_Check(prefix)) {
            PyErr_SetString(PyExc_TypeError, "prefixes must be str");
            goto done;
        }
        if (!(b.prefixes[r] = PyUnicode_AsUTF8AndSize(prefix, &b.prefix_sizes[r]))) goto done;
        room += (b.prefix_sizes[r] + 20) * b.runs[r];
    }
    job.ids = ids.buf, job.before = before.buf, job.after = after.buf;
    job.specials_bytes = feedgpu_specials_bytes(&job);
    b.name_room = PyMem_Malloc(room + 1);
    job.names = PyMem_Malloc(sizeof(char *) * (docs + 1));
    job.name_sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (docs + 1));
    job.first_doc = PyMem_Malloc(sizeof(Py_ssize_t) * (docs + 1));
    job.plans = PyMem_Malloc(sizeof(Plan) * (docs + 1));
    job.out = PyMem_Malloc(sizeof(unsigned char *) * (docs + 1));
    b.shard_of = PyMem_Malloc(sizeof(Py_ssize_t) * (docs + 1));
    b.at = PyMem_Malloc(sizeof(Py_ssize_t) * (docs + 1));
    b.varint_at = PyMem_Malloc(sizeof(Py_ssize_t) * (docs + 1));
    b.varint_end = PyMem_Malloc(sizeof(Py_ssize_t) * (docs + 1));
    job.varint_at = b.varint_at, job.varint_end = b.varint_end;
    /* ten bytes an id at most */
    job.varints = given ? vdata.buf : PyMem_Malloc(10 * (size_t)id_count + 1);
    out[0] = int64_bytes(b.count, &b.ends);
    out[1] = int64_bytes(b.count, &b.counts);
    out[2] = int64_bytes(docs, &b.doc_shard);
    out[3] = int64_bytes(docs, &b.full);
    out[4] = int64_bytes(docs, &b.unknown);
    out[5] = int64_bytes(docs, &b.stored);
    job.sizes = b.stored;
    if (!b.name_room || !job.names || !job.name_sizes || !job.first_doc ||
        !job.plans || !job.out || !b.shard_of || !b.at || !b.varint_at || !b.varint_end ||
        !job.varints)
        goto nomemory;
    for (int k = 0; k < 6; k++)
        if (!out[k]) goto done; /* MemoryError set */
    Py_ssize_t total;
    Py_BEGIN_ALLOW_THREADS
    total = arrange(&job, &b);
    Py_END_ALLOW_THREADS
    if (!(framed = PyBytes_FromStringAndSize(NULL, total))) goto done;
    unsigned char *base = (unsigned char *)PyBytes_AS_STRING(framed);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < job.records; r++) {
        job.out[r] = base + b.at[r] + 12;
        feedgpu_write_record(&job, r);
        feedgpu_frame_at(base + b.at[r], (size_t)job.plans[r].size);
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t first_at = job.records ? b.at[0] + 12 : 0;
    Py_ssize_t first_size = job.records ? job.plans[0].size : 0;
    result = Py_BuildValue("OOO(nn)OOOO", framed, out[0], out[1], first_at, first_at + first_size,
                           out[2], out[3], out[4], out[5]);
    goto done;
nomemory:
    PyErr_NoMemory();
done:
    PyMem_Free(b.prefixes);
    PyMem_Free(b.prefix_sizes);
    PyMem_Free(b.name_room);
    feedgpu_job_free(&job);
    PyMem_Free(b.shard_of);
    PyMem_Free(b.at);
    PyMem_Free(b.varint_at);
    PyMem_Free(b.varint_end);
    if (!given) PyMem_Free((void *)job.varints);
    for (int k = 0; k < 6; k++) Py_XDECREF(out[k]);
    Py_XDECREF(framed);
    Py_XDECREF(held);
    Py_buffer *views[] = {&ids, &lengths, &numbers, &runs, &before, &after, &vdata, &vsizes,
                          &vunknown};
    for (int k = 0; k < 9; k++)
        if (views[k]->obj) PyBuffer_Release(views[k]);
    return result;
}
