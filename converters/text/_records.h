/* What the `_records` module's files share: its examples' wire format (_example_wire.c),
 * a batch's records framed by shard (_shard_records.c), framing (_framing.c), routing
 * (_route.c) and lines' (_lines.c) entries. */
#ifndef FEEDGPU_RECORDS_H
#define FEEDGPU_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Sizes of one record's parts; all computed before any byte is written. */
typedef struct {
    Py_ssize_t ids_bytes, ids_listed, ids_feature, ids_entry;
    Py_ssize_t doc_values, doc_feature, doc_entry;
    Py_ssize_t len_values, len_feature, len_entry;
    Py_ssize_t lab_values, lab_feature, lab_entry;
    Py_ssize_t total, size;
} Plan;

/* A batch's records: each document's ids as stored (sizes, with the special ids), and name;
 * each record's documents (first_doc), plan, and where it is written (out). */
typedef struct {
    const int64_t *ids, *sizes, *labels; /* labels: NULL without */
    const int64_t *before, *after;        /* the special ids around each document's own */
    Py_ssize_t docs, records, n_before, n_after, specials_bytes;
    const char **names;
    Py_ssize_t *name_sizes;
    Py_ssize_t *starts;    /* where each document's own ids begin in ids */
    /* Or NULL: each document's own ids (as stored: truncated) as varints already, from
     * varints + varint_at[d] to varints + varint_end[d]. */
    const unsigned char *varints;
    const Py_ssize_t *varint_at, *varint_end;
    Py_ssize_t *first_doc; /* per record, and one past the last */
    Plan *plans;
    unsigned char **out;
} Job;

/* A document's own ids (its size but the special ones). */
static inline Py_ssize_t own(const Job *job, Py_ssize_t d) {
    return job->sizes[d] - job->n_before - job->n_after;
}

/* The special ids' varint bytes (for specials_bytes); a record's plan into job->plans[r], then
 * the record (plans[r].size bytes) at job->out[r]. */
Py_ssize_t feedgpu_specials_bytes(const Job *job);
void feedgpu_plan_record(const Job *job, Py_ssize_t r);
void feedgpu_write_record(const Job *job, Py_ssize_t r);
/* What a job's arrays hold freed (PyMem_Free; NULL ones too). */
void feedgpu_job_free(Job *job);

/* frame(records) and crc32c(data, hardware); feedgpu_crc_init before either's first call.
 * (What the module's files share is prefixed feedgpu_, or is a type or inline function of
 * this header.) */
PyObject *feedgpu_frame(PyObject *self, PyObject *args);
PyObject *feedgpu_crc32c(PyObject *self, PyObject *args);
void feedgpu_crc_init(void);
/* A record of n bytes already at o + 12 framed there: its length and masked CRCs around it
 * (n + 16 bytes from o). */
void feedgpu_frame_at(unsigned char *o, size_t n);

/* route(ids, k0, k1, buckets): each id's SipHash-2-4 modulo buckets (uint64s as bytes);
 * feedgpu_siphash, one id's. */
PyObject *feedgpu_route(PyObject *self, PyObject *args);
uint64_t feedgpu_siphash(uint64_t k0, uint64_t k1, const unsigned char *p, size_t n);

/* shard_records(...): a batch's records framed, grouped by shard (_shard_records.c). */
PyObject *feedgpu_shard_records(PyObject *self, PyObject *args);

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
