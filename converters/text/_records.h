/* What the `_records` module's files share: its framing entries (_framing.c). */
#ifndef FEEDGPU_RECORDS_H
#define FEEDGPU_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* frame(records) and crc32c(data, hardware); feedgpu_crc_init before either's first call.
 * (Prefixed: the module's only symbols outside its own files.) */
PyObject *feedgpu_frame(PyObject *self, PyObject *args);
PyObject *feedgpu_crc32c(PyObject *self, PyObject *args);
void feedgpu_crc_init(void);

#endif
