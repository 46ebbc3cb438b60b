/* tokenize(): texts given as Python str, for the step (`PlainWordPiece.ids`): each text's
 * ids, and its chunks the step cannot take (holes) for the caller. */
#include "_wordpiece.h" /* Python.h first */

#include <stdlib.h>
#include <string.h>

/* Whitespace to both BERT tokenizers, and where WordPiece always stops. */
static inline int ascii_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The chunks of a text that is not plain (pieces between ASCII whitespace: WordPiece never
 * crosses it): those the table covers tokenized here, the others left as holes for the
 * caller, each (text, first code point, end, where its ids go among the output's). */
typedef struct {
    int64_t *quads;
    Py_ssize_t count, capacity;
} Holes;

static int add_hole(Holes *h, Py_ssize_t text, Py_ssize_t start, Py_ssize_t end, Py_ssize_t at) {
    if (h->count == h->capacity) {
        Py_ssize_t capacity = h->capacity ? 2 * h->capacity : 64;
        int64_t *quads = realloc(h->quads, sizeof(int64_t) * 4 * capacity);
        if (!quads) return -1;
        h->quads = quads;
        h->capacity = capacity;
    }
    int64_t *q = h->quads + 4 * h->count++;
    q[0] = text;
    q[1] = start;
    q[2] = end;
    q[3] = at;
    return 0;
}

/* Past this many holes a text is one hole, whole: each hole costs the caller a string and an
 * insert, so a text mostly in characters the table cannot hold goes to HF in one piece. */
#define MAX_HOLES 4

/* A text's (UTF-8, valid; chars code points) covered chunks' ids into out, its others into
 * holes. buf: room for three times the text's bytes. */
static Py_ssize_t chunked_ids(const Vocab *v, const Chars *t, const unsigned char *s,
                              Py_ssize_t len, Py_ssize_t chars, Py_ssize_t text, int64_t *out,
                              Py_ssize_t at, Holes *holes, unsigned char *buf, int *failed) {
    Py_ssize_t k = 0, n = 0, cp = 0, first_hole = holes->count;
    while (k < len) {
        if (ascii_space(s[k])) {
            k++;
            cp++;
            continue;
        }
        Py_ssize_t e = k, end = cp;
        for (; e < len && !ascii_space(s[e]); e++) end += (s[e] & 0xC0) != 0x80;
        Py_ssize_t got = feedgpu_utf8_ids(v, t, s + k, e - k, out + n, buf);
        if (got >= 0) {
            n += got;
        } else if (add_hole(holes, text, cp, end, at + n) < 0) {
            *failed = 1;
        } else if (holes->count - first_hole > MAX_HOLES) {
            holes->count = first_hole; /* its ids so far are dropped: it counts 0 */
            if (add_hole(holes, text, 0, chars, at) < 0) *failed = 1;
            return 0;
        }
        k = e;
        cp = end;
    }
    return n;
}

PyObject *feedgpu_tokenize(PyObject *self, PyObject *args) {
    PyObject *capsule, *table, *texts;
    if (!PyArg_ParseTuple(args, "OOO", &capsule, &table, &texts)) return NULL;
    const Vocab *v = PyCapsule_GetPointer(capsule, CAPSULE);
    int failed = 0;
    const Chars *t = feedgpu_chars(table, &failed);
    if (!v || failed) return NULL;
    /* A tuple holds a reference to every text (and its UTF-8) while the GIL is released. */
    PyObject *held = PySequence_Tuple(texts);
    if (!held) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(held), total = 0, longest = 0;
    PyObject *values = NULL, *lengths = NULL, *found = NULL, *result = NULL;
    Holes holes = {NULL, 0, 0};
    unsigned char *buf = NULL;
    int64_t *scratch = NULL; /* room for one id a byte; the ids are copied out at size */
    const unsigned char **utf8 = PyMem_Calloc((size_t)count + 1, sizeof(*utf8));
    Py_ssize_t *sizes = PyMem_Calloc((size_t)count + 1, sizeof(*sizes));
    if (!utf8 || !sizes) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *text = PyTuple_GET_ITEM(held, i);
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "texts must be str");
            goto done;
        }
        /* UTF-8 (kept by the str); none for one that has none (a lone surrogate): a hole */
        utf8[i] = (const unsigned char *)PyUnicode_AsUTF8AndSize(text, &sizes[i]);
        if (!utf8[i]) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) goto done;
            PyErr_Clear();
            sizes[i] = 0; /* Python 3.13 sets -1 there, which would shrink the ids' room */
        }
        total += sizes[i];
        if (sizes[i] > longest) longest = sizes[i];
    }
    scratch = PyMem_Malloc((total + 1) * sizeof(int64_t));
    lengths = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
    buf = PyMem_Malloc(3 * longest + 1);
    if (!scratch || !lengths || !buf) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int64_t *out = scratch;
    int64_t *counts = (int64_t *)PyBytes_AS_STRING(lengths);
    Py_ssize_t at = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        PyObject *text = PyTuple_GET_ITEM(held, i);
        Py_ssize_t chars = PyUnicode_GET_LENGTH(text), n = -1;
        if (!utf8[i]) {
            n = 0;
            if (add_hole(&holes, i, 0, chars, at) < 0) failed = 1;
        } else { /* whole, as most texts are taken */
            n = feedgpu_utf8_ids(v, t, utf8[i], sizes[i], out + at, buf);
        }
        if (n < 0) /* a character it cannot take: chunk by chunk */
            n = chunked_ids(v, t, utf8[i], sizes[i], chars, i, out + at, at, &holes, buf,
                            &failed);
        counts[i] = n;
        at += n;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    found = PyBytes_FromStringAndSize((const char *)holes.quads,
                                      holes.count * 4 * (Py_ssize_t)sizeof(int64_t));
    if (!found) goto done;
    values = PyBytes_FromStringAndSize((const char *)scratch, at * (Py_ssize_t)sizeof(int64_t));
    if (!values) goto done;
    if (_PyBytes_Resize(&lengths, count * (Py_ssize_t)sizeof(int64_t)) < 0) goto done;
    result = Py_BuildValue("OOO", values, lengths, found);
done:
    PyMem_Free(utf8);
    PyMem_Free(sizes);
    PyMem_Free(buf);
    PyMem_Free(scratch);
    free(holes.quads);
    Py_XDECREF(values);
    Py_XDECREF(lengths);
    Py_XDECREF(found);
    Py_DECREF(held);
    return result;
}
