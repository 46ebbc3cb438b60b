/* JSON lines parsed and tokenized at once (`PlainWordPiece.lines_of`): a line whose document is
 * certain and covered (_json_line.h; characters beyond ASCII by the table) becomes ids
 * straight from its bytes, without the GIL, with no dict, str or anything per document in
 * Python; every other line is left to the caller's Python path (benchmarks/RESULTS.md,
 * "Decisions"). */
#include "_wordpiece.h" /* Python.h first */

#include <string.h>

#include "_int64s.h"
#include "_json_line.h"

void feedgpu_json_init(void) { json_stop_init(); }

/* Whether a line is blank as bytes.isspace() has it (empty too): no document, no skip. */
static int blank_line(cursor p, cursor end) {
    for (; p < end; p++)
        if (!(*p == ' ' || (*p >= '\t' && *p <= '\r'))) return 0;
    return 1;
}

/* A line as the first pass found it: blank, left to the caller, or its text's raw bytes. */
typedef struct {
    cursor text;
    Py_ssize_t len; /* raw, escapes as written: at least the decoded text's bytes */
    int state;      /* BLANK, LEFT or TEXT */
    int holds;      /* json_string's */
    int stopped;    /* the line holds a byte of stop (`mark_stops`) */
} Found;

enum { BLANK, LEFT, TEXT };

/* beyond: whether texts beyond ASCII can be taken (a table was given). */
static void find_text(cursor p, cursor end, const char *field, size_t field_len, int beyond,
                      Found *f) {
    cursor text_end = NULL;
    f->stopped = 0;
    f->state = blank_line(p, end) ? BLANK : LEFT;
    if (f->state == LEFT &&
        json_text_field(p, end, field, field_len, &f->text, &text_end, &f->holds) &&
        (beyond || !(f->holds & JSON_BEYOND_ASCII))) {
        f->state = TEXT;
        f->len = text_end - f->text;
    }
}

/* Marks the lines (of count, bounded by ends in data) that hold a byte of stop anywhere: one
 * memchr pass over the batch's lines for each byte; a search of every text took 1% of a
 * short-document conversion's CPU (benchmarks/RESULTS.md, "Decisions"). */
static void mark_stops(cursor data, const int64_t *ends, Py_ssize_t count,
                       const unsigned char *stop, Found *found) {
    for (const unsigned char *c = stop; *c; c++) {
        cursor p = data + ends[0], end = data + ends[count];
        Py_ssize_t i = 0;
        while (p < end && (p = memchr(p, *c, (size_t)(end - p)))) {
            while (ends[i + 1] <= p - data) i++; /* the line holding it (empty ones passed) */
            found[i].stopped = 1;
            p = data + ends[i + 1];
        }
    }
}

/* Added tokens' texts (HF matches them before it splits a text, so a text holding one is the
 * caller's, for HF): each one's bytes, held while the GIL is released. */
typedef struct {
    const unsigned char **text;
    Py_ssize_t *len, count;
} Tokens;

static inline int space_class(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static inline unsigned char fold(unsigned char c) {
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* Whether a token matches at p (within end): each byte equal to the token's but for ASCII
 * case, and any of space, tab, LF and CR where the token has one. */
static int matches_at(cursor p, cursor end, const unsigned char *w, Py_ssize_t m) {
    if (end - p < m) return 0;
    for (Py_ssize_t j = 0; j < m; j++)
        if (space_class(w[j]) ? !space_class(p[j]) : fold(w[j]) != fold(p[j])) return 0;
    return 1;
}

/* Whether the text may hold one of the tokens (`matches_at`): found by memchr of each byte of
 * stop (the tokens' first bytes, in both cases), then the tokens tried there. More texts than
 * HF matches (it may match case and spaces exactly), never fewer: a text holding
 * "[1913 Webster]" is the step's, one holding "[SEP]" or "[sep]" the caller's. */
static int holds_token(cursor text, Py_ssize_t len, const Tokens *tk, const unsigned char *stop) {
    cursor end = text + len;
    for (const unsigned char *c = stop; *c; c++) {
        for (cursor p = text; p < end && (p = memchr(p, *c, (size_t)(end - p))); p++) {
            for (Py_ssize_t k = 0; k < tk->count; k++) {
                unsigned char w = tk->text[k][0]; /* only the tokens starting here */
                if (space_class(w) ? !space_class(*c) : fold(w) != fold(*c)) continue;
                if (matches_at(p, end, tk->text[k], tk->len[k])) return 1;
            }
        }
    }
    return 0;
}

/* A found text's ids into out, its count; -1: the caller's after all (an escape or byte
 * plain text cannot hold, a character the table t lacks, blank, or an added token's text:
 * `holds_token`, searched only in lines holding one of stop, the tokens' first bytes). buf:
 * room for the text decoded and three times it for a word's normal form (four times its raw
 * bytes); a text of ASCII alone uses none. */
static Py_ssize_t text_of_line(const Vocab *v, const Chars *t, const Found *f,
                               const Tokens *tk, const unsigned char *stop, unsigned char *buf,
                               int64_t *out) {
    const unsigned char *text = f->text;
    Py_ssize_t len = f->len;
    if (f->holds & JSON_ESCAPED) {
        len = json_text(f->text, f->text + f->len, buf);
        if (len < 0) return -1;
        text = buf;
    }
    /* Raw, the text's bytes are its line's: a line without a byte of stop needs no search.
     * Decoded, an escape may have written one (\u005b is "["). */
    if ((f->stopped || (f->holds & JSON_ESCAPED)) && holds_token(text, len, tk, stop)) return -1;
    Py_ssize_t n = feedgpu_utf8_ids(v, t, text, len, out, buf + f->len);
    return n > 0 ? n : -1; /* none: blank, the caller's to skip */
}

PyObject *feedgpu_lines(PyObject *self, PyObject *args) {
    PyObject *capsule, *table, *data_obj, *ends_obj, *tokens_obj;
    const char *field;
    Py_ssize_t field_len;
    if (!PyArg_ParseTuple(args, "OOOOy#O", &capsule, &table, &data_obj, &ends_obj, &field,
                          &field_len, &tokens_obj))
        return NULL;
    const Vocab *v = PyCapsule_GetPointer(capsule, CAPSULE);
    int failed = 0;
    const Chars *t = feedgpu_chars(table, &failed);
    if (!v || failed) return NULL;
    /* The buffers are held (and their objects alive) while the GIL is released. */
    Py_buffer data = {0}, bounds = {0};
    PyObject *held = PySequence_Tuple(tokens_obj); /* each token's bytes kept alive */
    if (!held) return NULL;
    Tokens tk = {0};
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0) {
        Py_DECREF(held);
        return NULL;
    }
    Py_ssize_t count = 0, texts = 0, longest = 0;
    PyObject *values = NULL, *lengths = NULL, *taken = NULL, *odd = NULL, *result = NULL;
    unsigned char *buf = NULL, stop[257] = {0};
    int64_t *scratch = NULL;
    Found *found = NULL;
    if (int64s(ends_obj, &bounds, &count) < 0) goto done;
    if (count-- < 1) {
        PyErr_SetString(PyExc_ValueError, "ends: int64 values, one more than the lines");
        goto done;
    }
    const int64_t *ends = bounds.buf;
    for (Py_ssize_t i = 0; i <= count; i++) { /* checked here: no line read past the data */
        if ((i ? ends[i] < ends[i - 1] : ends[i] < 0) || ends[i] > data.len) {
            PyErr_SetString(PyExc_ValueError, "ends: not rising within the data");
            goto done;
        }
    }
    tk.count = PyTuple_GET_SIZE(held);
    tk.text = PyMem_Malloc(sizeof(char *) * (tk.count + 1));
    tk.len = PyMem_Malloc(sizeof(Py_ssize_t) * (tk.count + 1));
    if (!tk.text || !tk.len) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0, n = 0; k < tk.count; k++) {
        PyObject *token = PyTuple_GET_ITEM(held, k);
        if (!PyBytes_Check(token) || PyBytes_GET_SIZE(token) < 1) {
            PyErr_SetString(PyExc_TypeError, "tokens: non-empty bytes");
            goto done;
        }
        tk.text[k] = (const unsigned char *)PyBytes_AS_STRING(token);
        tk.len[k] = PyBytes_GET_SIZE(token);
        unsigned char first = tk.text[k][0], cases[2] = {first, first};
        if (first >= 'a' && first <= 'z') cases[1] = (unsigned char)(first - 32);
        if (first >= 'A' && first <= 'Z') cases[1] = (unsigned char)(first + 32);
        if (space_class(first)) { /* any of the four: the search marks them all */
            for (const char *c = " \t\n\r"; *c; c++)
                if (!memchr(stop, *c, n)) stop[n++] = (unsigned char)*c;
            continue;
        }
        for (int c = 0; c < 2; c++) /* NUL is never raw in a line the step takes */
            if (cases[c] && !memchr(stop, cases[c], n)) stop[n++] = cases[c];
    }
    found = PyMem_Malloc(sizeof(Found) * (count + 1));
    if (!found) {
        PyErr_NoMemory();
        goto done;
    }
    /* First the texts, so the ids take room for them alone (one id a byte at most), not for
     * whole lines: a line of huge metadata, or one left to the caller, costs no ids. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        cursor p = (cursor)data.buf;
        find_text(p + ends[i], p + ends[i + 1], field, (size_t)field_len, t != NULL, &found[i]);
        if (found[i].state == TEXT) { /* room to decode it, and for a word's normal form */
            Py_ssize_t room = found[i].len * (found[i].holds ? 4 : 1); /* \u, or beyond */
            texts += found[i].len;
            if (room > longest) longest = room;
        }
    }
    mark_stops((cursor)data.buf, ends, count, stop, found);
    Py_END_ALLOW_THREADS
    /* The ids go to room for one a byte, then are copied out at their size: a bytes object
     * of that room shrunk after made glibc map fresh pages for every batch (page faults
     * fifteen times as many: benchmarks/RESULTS.md, "Decisions"). */
    scratch = PyMem_Malloc((texts + 1) * sizeof(int64_t));
    lengths = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
    taken = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
    odd = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int64_t));
    buf = PyMem_Malloc(longest + 1);
    if (!scratch || !lengths || !taken || !odd || !buf) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int64_t *out = scratch;
    int64_t *counts = (int64_t *)PyBytes_AS_STRING(lengths);
    int64_t *docs = (int64_t *)PyBytes_AS_STRING(taken);
    int64_t *left = (int64_t *)PyBytes_AS_STRING(odd);
    Py_ssize_t at = 0, ndocs = 0, nodd = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n = -1;
        if (found[i].state == BLANK) continue;
        if (found[i].state == TEXT) n = text_of_line(v, t, &found[i], &tk, stop, buf, out + at);
        if (n < 0) {
            left[nodd++] = i;
            continue;
        }
        docs[ndocs] = i;
        counts[ndocs++] = n;
        at += n;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t size = ndocs * (Py_ssize_t)sizeof(int64_t);
    values = PyBytes_FromStringAndSize((const char *)scratch, at * (Py_ssize_t)sizeof(int64_t));
    if (!values || _PyBytes_Resize(&lengths, size) < 0 || _PyBytes_Resize(&taken, size) < 0 ||
        _PyBytes_Resize(&odd, nodd * (Py_ssize_t)sizeof(int64_t)) < 0)
        goto done;
    result = Py_BuildValue("OOOO", values, lengths, taken, odd);
done:
    PyMem_Free(tk.text);
    PyMem_Free(tk.len);
    Py_DECREF(held);
    PyMem_Free(found);
    PyMem_Free(buf);
    PyMem_Free(scratch);
    Py_XDECREF(values);
    Py_XDECREF(lengths);
    Py_XDECREF(taken);
    Py_XDECREF(odd);
    if (bounds.obj) PyBuffer_Release(&bounds);
    PyBuffer_Release(&data);
    return result;
}
