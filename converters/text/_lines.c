/* What reading JSON lines needs from the `_records` module: where each line of a block ends
 * (`raw_lines.line_bounds`), and documents' names by their line (`records.numbered`). */
#include "_records.h" /* Python.h first */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_int64s.h"

/* Documents' names: prefix + each number in decimal (a JSONL file's "name:line"), one after
 * another, and each one's size. */
PyObject *feedgpu_numbered(PyObject *self, PyObject *args) {
    PyObject *numbers_obj, *blob = NULL, *sizes = NULL, *result = NULL;
    Py_buffer prefix = {0}, numbers = {0};
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*O", &prefix, &numbers_obj)) return NULL;
    if (int64s(numbers_obj, &numbers, &count) < 0) goto done;
    if (count > PY_SSIZE_T_MAX / (prefix.len + 21)) {
        PyErr_NoMemory();
        goto done;
    }
    blob = PyBytes_FromStringAndSize(NULL, count * (prefix.len + 20));
    sizes = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (!blob || !sizes) goto done;
    char *o = PyBytes_AS_STRING(blob);
    int64_t *size = (int64_t *)PyBytes_AS_STRING(sizes);
    for (Py_ssize_t i = 0; i < count; i++) {
        char buf[24], *digits = feedgpu_decimal(buf + sizeof buf, ((int64_t *)numbers.buf)[i]);
        Py_ssize_t n = buf + sizeof buf - digits;
        memcpy(o, prefix.buf, (size_t)prefix.len);
        memcpy(o + prefix.len, digits, (size_t)n);
        o += prefix.len + n;
        size[i] = prefix.len + n;
    }
    if (_PyBytes_Resize(&blob, o - PyBytes_AS_STRING(blob)) < 0) goto done;
    result = Py_BuildValue("OO", blob, sizes);
done:
    Py_XDECREF(blob);
    Py_XDECREF(sizes);
    if (numbers.obj) PyBuffer_Release(&numbers);
    PyBuffer_Release(&prefix);
    return result;
}

/* Each newline's end in s[0:len] (the offset after it) into a growing buffer at *out (room
 * for *cap; NULL: none yet); how many, or -1 out of memory. */
static Py_ssize_t newline_ends(const char *s, Py_ssize_t len, int64_t **out, Py_ssize_t *cap) {
    Py_ssize_t n = 0;
    for (const char *p = s; (p = memchr(p, '\n', (size_t)(s + len - p))); p++) {
        if (n == *cap) {
            Py_ssize_t more = *cap * 2 + 1024;
            int64_t *grown = realloc(*out, (size_t)more * sizeof(int64_t));
            if (!grown) return -1;
            *out = grown, *cap = more;
        }
        (*out)[n++] = p + 1 - s;
    }
    return n;
}

/* Where each line of data[:size] (all of data without size) starts and the last one ends
 * (after each b"\n", and at its end if its last line has none), as int64 bytes:
 * `raw_lines.line_bounds`. */
PyObject *feedgpu_line_ends(PyObject *self, PyObject *args) {
    PyObject *given; /* bytes only: nothing can change them while the GIL is released */
    Py_ssize_t len = -1;
    if (!PyArg_ParseTuple(args, "S|n", &given, &len)) return NULL;
    if (len > PyBytes_GET_SIZE(given)) {
        PyErr_SetString(PyExc_ValueError, "line_ends: size beyond the data");
        return NULL;
    }
    if (len < 0) len = PyBytes_GET_SIZE(given);
    const char *s = PyBytes_AS_STRING(given);
    int64_t *ends = NULL;
    Py_ssize_t cap = 0, count;
    Py_BEGIN_ALLOW_THREADS
    count = newline_ends(s, len, &ends, &cap);
    Py_END_ALLOW_THREADS
    if (count < 0) {
        free(ends);
        return PyErr_NoMemory();
    }
    int open = len && s[len - 1] != '\n';
    Py_ssize_t size = (1 + count + open) * (Py_ssize_t)sizeof(int64_t);
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
        out[0] = 0;
        if (count) memcpy(out + 1, ends, (size_t)count * sizeof(int64_t)); /* none: NULL */
        if (open) out[1 + count] = len;
    }
    free(ends);
    return result;
}
