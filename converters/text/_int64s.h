/* What both compiled steps take from numpy: C-contiguous signed 64-bit integers. */
#ifndef FEEDGPU_INT64S_H
#define FEEDGPU_INT64S_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* obj's buffer into view and its count of values, or -1 with ValueError (view released) if
 * it is not int64 (an int64 numpy array, native byte order). */
static inline int int64s(PyObject *obj, Py_buffer *view, Py_ssize_t *count) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    char kind = format[0] && strchr("@=<", format[0]) ? format[1] : format[0];
    if (view->itemsize != 8 || (kind != 'l' && kind != 'q')) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "expected int64 values");
        return -1;
    }
    *count = view->len / 8;
    return 0;
}

#endif
