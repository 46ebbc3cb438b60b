/* What the `_records` module's files share: its framing (_framing.c), routing (_route.c) and
 * lines' (_lines.c) entries. */
#ifndef FEEDGPU_RECORDS_H
#define FEEDGPU_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* frame(records) and crc32c(data, hardware); feedgpu_crc_init before either's first call.
 * (Prefixed: the module's only symbols outside its own files.) */
PyObject *feedgpu_frame(PyObject *self, PyObject *args);
PyObject *feedgpu_crc32c(PyObject *self, PyObject *args);
void feedgpu_crc_init(void);

/* route(ids, k0, k1, buckets): each id's SipHash-2-4 modulo buckets (uint64s as bytes). */
PyObject *feedgpu_route(PyObject *self, PyObject *args);

/* numbered(prefix, numbers) and line_ends(data). */
PyObject *feedgpu_numbered(PyObject *self, PyObject *args);
PyObject *feedgpu_line_ends(PyObject *self, PyObject *args);

#endif
