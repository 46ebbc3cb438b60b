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

#if defined(__SSE2__)
#include <emmintrin.h>

/* Which of the 64 bytes at p are newlines: bit i for p[i]. */
static inline uint64_t newlines_64(const char *p) {
    const __m128i nl = _mm_set1_epi8('\n');
    uint64_t m = 0;
    for (int k = 0; k < 4; k++) {
        __m128i b = _mm_loadu_si128((const __m128i *)(p + 16 * k));
        m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, nl)) << (16 * k);
    }
    return m;
}
#endif

#define LONG_RUN 4

/* Each newline's end in s[0:len] (the offset after it) into a growing buffer at *out (room
 * for *cap; NULL: none yet); how many, or -1 out of memory. One pass of 64 bytes a step,
 * each step's newlines by their bits, and memchr to the next newline after LONG_RUN steps
 * without one (glibc's is twice as fast over a long line). With a call of memchr a line
 * (twice: counted, then put), reading a 48 MB corpus of short documents took 21.3 ms of the
 * reading thread, this way 16.1; a 1 MB block of ~20-byte lines 879 us, now 232
 * (benchmarks/RESULTS.md, "Issue 29, twelfth session"). */
static Py_ssize_t newline_ends(const char *s, Py_ssize_t len, int64_t **out, Py_ssize_t *cap) {
    Py_ssize_t n = 0, i = 0;
    int empty = 0; /* steps in a row without a newline: past LONG_RUN, memchr skips ahead */
    for (;;) {
        if (*cap - n < 64) { /* a step puts at most 64 */
            Py_ssize_t more = *cap * 2 + 1024;
            int64_t *grown = realloc(*out, (size_t)more * sizeof(int64_t));
            if (!grown) return -1;
            *out = grown, *cap = more;
        }
#if defined(__SSE2__)
        if (len - i >= 64 && empty < LONG_RUN) {
            uint64_t m = newlines_64(s + i);
            empty = m ? 0 : empty + 1;
            for (; m; m &= m - 1) (*out)[n++] = i + __builtin_ctzll(m) + 1;
            i += 64;
            continue;
        }
        empty = 0;
#endif
        const char *p = memchr(s + i, '\n', (size_t)(len - i));
        if (!p) return n;
        i = p + 1 - s;
        (*out)[n++] = i;
    }
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
        memcpy(out + 1, ends, (size_t)count * sizeof(int64_t));
        if (open) out[1 + count] = len;
    }
    free(ends);
    return result;
}
