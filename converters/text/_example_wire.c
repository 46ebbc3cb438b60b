/* Serialized tf.train.Examples of {doc_id, input_ids, length[, label]}, one per record (a
 * document, or a block of consecutive documents), byte for byte what the encode_proto graph in
 * examples.py and feedgpu's own codec write: each record planned (its parts' sizes), then
 * written where its caller has room for it (`examples`, `shard_records`).
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

#include <stdint.h>
#include <string.h>

#include "_varints.h"

static Py_ssize_t entry_size(Py_ssize_t key, Py_ssize_t feature) {
    Py_ssize_t entry = 2 + key + 1 + vsize((uint64_t)feature) + feature;
    return 1 + vsize((uint64_t)entry) + entry;
}

void feedgpu_plan_record(const Job *job, Py_ssize_t r) {
    Plan *p = &job->plans[r];
    Py_ssize_t d0 = job->first_doc[r], d1 = job->first_doc[r + 1];
    memset(p, 0, sizeof(*p));
    for (Py_ssize_t d = d0; d < d1; d++) {
        p->ids_bytes += job->specials_bytes;
        if (job->varint_at) { /* written already */
            p->ids_bytes += job->varint_end[d] - job->varint_at[d];
            continue;
        }
        const int64_t *v = job->ids + job->starts[d];
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

void feedgpu_write_record(const Job *job, Py_ssize_t r) {
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
            if (job->varint_at) {
                Py_ssize_t n = job->varint_end[d] - job->varint_at[d];
                memcpy(o, job->varints + job->varint_at[d], (size_t)n);
                o += n;
            } else {
                o = put_ids(o, job->ids + job->starts[d], own(job, d), 0, 0, NULL);
            }
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

Py_ssize_t feedgpu_specials_bytes(const Job *job) {
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < job->n_before; i++) n += vsize((uint64_t)job->before[i]);
    for (Py_ssize_t i = 0; i < job->n_after; i++) n += vsize((uint64_t)job->after[i]);
    return n;
}

void feedgpu_job_free(Job *job) {
    PyMem_Free(job->names);
    PyMem_Free(job->name_sizes);
    PyMem_Free(job->starts);
    PyMem_Free(job->first_doc);
    PyMem_Free(job->plans);
    PyMem_Free(job->out);
}
