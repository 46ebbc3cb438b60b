/* What reading JSON lines needs from the `_records` module: where each line of a block ends
 * (`raw_lines.line_bounds`), and documents' ids by their line (`batches.numbered`). */
#include "_records.h" /* Python.h first */

#include <stdint.h>
#include <string.h>

#include "_int64s.h"

/* Documents' ids "prefix" + each number in decimal (a JSONL file's "name:line"), as str. */
PyObject *feedgpu_numbered(PyObject *self, PyObject *args) {
    PyObject *prefix, *numbers_obj;
    if (!PyArg_ParseTuple(args, "UO", &prefix, &numbers_obj)) return NULL;
    Py_buffer numbers = {0};
    Py_ssize_t count;
    if (int64s(numbers_obj, &numbers, &count) < 0) return NULL;
    PyObject *result = PyList_New(count);
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    int ascii = PyUnicode_IS_ASCII(prefix);
    for (Py_ssize_t i = 0; result && i < count; i++) {
        char buf[24], *digits = feedgpu_decimal(buf + sizeof buf, ((int64_t *)numbers.buf)[i]);
        int n = (int)(buf + sizeof buf - digits);
        PyObject *name;
        if (ascii) { /* the usual file name: one allocation, two copies */
            name = PyUnicode_New(plen + n, 127);
            if (name) {
                memcpy(PyUnicode_1BYTE_DATA(name), PyUnicode_1BYTE_DATA(prefix), plen);
                memcpy(PyUnicode_1BYTE_DATA(name) + plen, digits, n);
            }
        } else {
            PyObject *tail = PyUnicode_FromStringAndSize(digits, n);
            name = tail ? PyUnicode_Concat(prefix, tail) : NULL;
            Py_XDECREF(tail);
        }
        if (!name) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, name);
    }
    PyBuffer_Release(&numbers);
    return result;
}

/* Where each line of data[:size] (all of data without size) starts and the last one ends
 * (after each b"\n", and at its end if its last line has none), as int64 bytes:
 * `raw_lines.line_bounds`, by memchr. */
PyObject *feedgpu_line_ends(PyObject *self, PyObject *args) {
    PyObject *given; /* bytes only: nothing can change them while the GIL is released */
    Py_ssize_t len = -1;
    if (!PyArg_ParseTuple(args, "S|n", &given, &len)) return NULL;
    if (len > PyBytes_GET_SIZE(given)) {
        PyErr_SetString(PyExc_ValueError, "line_ends: size beyond the data");
        return NULL;
    }
    if (len < 0) len = PyBytes_GET_SIZE(given);
    const char *s = PyBytes_AS_STRING(given), *end = s + len;
    Py_ssize_t count = 1; /* 1: the first line's start */
    Py_BEGIN_ALLOW_THREADS
    for (const char *p = s; (p = memchr(p, '\n', end - p)); p++) count++;
    Py_END_ALLOW_THREADS
    int open = len && s[len - 1] != '\n';
    PyObject *result =
        PyBytes_FromStringAndSize(NULL, (count + open) * (Py_ssize_t)sizeof(int64_t));
    if (result) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
        *out++ = 0;
        Py_BEGIN_ALLOW_THREADS
        for (const char *p = s; (p = memchr(p, '\n', end - p)); p++) *out++ = p + 1 - s;
        Py_END_ALLOW_THREADS
        if (open) *out = len;
    }
    return result;
}
