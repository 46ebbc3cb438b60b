/* BERT WordPiece ids of plain texts (printable ASCII, tab, CR, LF), exactly as HF's
 * BertWordPieceTokenizer gives them, without the GIL.
 *
 * Why: most of a real corpus is plain text, and for it BERT's normaliser is at most ASCII
 * lowercasing, its pre-tokenizer a split at whitespace and punctuation, and WordPiece a
 * greedy longest match. tensorflow-text's op does this too, but also builds every token's
 * string and offsets, which nobody reads, and needs the texts copied into a tensor first;
 * here the ids come straight from the texts' bytes (benchmarks/RESULTS.md, "Issue 29,
 * fifth session"). In a text that is not plain, the chunks between ASCII whitespace that are
 * plain are tokenized here too (WordPiece never crosses whitespace); the others are left to
 * the caller as holes, which it tokenizes the usual way; a text of many holes is one hole.
 *
 * The vocabulary is a trie kept in a hash table: a node is a prefix of some token, keyed by
 * (its parent node, its last byte), exactly, so no two strings can be confused. Two roots:
 * a word's first piece, and continuing pieces (tokens starting with the prefix, "##").
 */
#include "_wordpiece.h" /* Python.h first */

#include <stdlib.h>
#include <string.h>

#define MAX_NODES (1u << 24) /* node numbers fit a key's upper 24 bits */

static inline uint32_t mix(uint32_t key) {
    key ^= key >> 16;
    key *= 0x45D9F3Bu;
    return key ^ (key >> 16);
}

/* The slot of node's child by byte c (of the node it leads to, and its token), or NULL. */
static inline const Slot *child(const Vocab *v, uint32_t node, unsigned char c) {
    uint32_t key = (node << 8) | c;
    for (uint32_t i = mix(key) & v->mask;; i = (i + 1) & v->mask) {
        if (v->slots[i].key == key) return &v->slots[i];
        if (v->slots[i].key == 0) return NULL;
    }
}

static Slot *place(Slot *slots, uint32_t mask, const Slot *slot) {
    uint32_t i = mix(slot->key) & mask;
    while (slots[i].key != 0) i = (i + 1) & mask;
    slots[i] = *slot;
    return &slots[i];
}

/* The table doubles whenever it would be over half full: small vocabularies stay in cache. */
static int grow(Vocab *v) {
    uint32_t size = 2 * (v->mask + 1);
    Slot *slots = calloc(size, sizeof(Slot));
    if (!slots) return -1;
    for (uint32_t i = 0; i <= v->mask; i++)
        if (v->slots[i].key) place(slots, size - 1, &v->slots[i]);
    free(v->slots);
    v->slots = slots;
    v->mask = size - 1;
    return 0;
}

/* node's child by byte c, made if new; NULL when out of memory or nodes. */
static Slot *add_child(Vocab *v, uint32_t node, unsigned char c) {
    const Slot *found = child(v, node, c);
    if (found) return (Slot *)found;
    if (v->nodes >= MAX_NODES || (2 * (v->nodes + 1) > v->mask + 1 && grow(v) < 0)) return NULL;
    Slot slot = {(node << 8) | c, v->nodes++, -1};
    return place(v->slots, v->mask, &slot);
}

static void vocab_free(PyObject *capsule) {
    Vocab *v = PyCapsule_GetPointer(capsule, CAPSULE);
    if (v) {
        free(v->slots);
        free(v);
    }
}

/* A token's UTF-8 bytes under root (none holds a NUL: no text's word can). */
static int add_token(Vocab *v, uint32_t root, const char *s, Py_ssize_t n, int32_t id) {
    if (memchr(s, 0, (size_t)n)) return 0;
    Slot *slot = NULL;
    uint32_t node = root;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!(slot = add_child(v, node, (unsigned char)s[k]))) return -1;
        node = slot->node;
    }
    if (slot && slot->token < 0) slot->token = id;
    return 0;
}

static PyObject *build(PyObject *self, PyObject *args) {
    PyObject *tokens;
    const char *prefix;
    Py_ssize_t plen, max_chars;
    long long unk;
    int lowercase;
    if (!PyArg_ParseTuple(args, "O!s#Lnp", &PyList_Type, &tokens, &prefix, &plen, &unk,
                          &max_chars, &lowercase))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(tokens);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyUnicode_Check(PyList_GET_ITEM(tokens, i)) ||
            !PyUnicode_AsUTF8(PyList_GET_ITEM(tokens, i))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "tokens must be str");
            return NULL;
        }
    }
    if (count >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "vocabulary too large");
        return NULL;
    }
    Vocab *v = calloc(1, sizeof(Vocab));
    if (v) v->slots = calloc(1024, sizeof(Slot));
    if (!v || !v->slots) {
        free(v);
        return PyErr_NoMemory();
    }
    v->mask = 1023;
    v->nodes = 3; /* 0: none, 1 and 2: the roots */
    v->unk = unk;
    v->max_chars = max_chars;
    for (int c = 0; c < 256; c++)
        v->fold[c] = (unsigned char)(lowercase && c >= 'A' && c <= 'Z' ? c + 32 : c);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(tokens, i), &n);
        int failed = add_token(v, ROOT_FIRST, s, n, (int32_t)i);
        if (plen == 0)
            failed |= add_token(v, ROOT_NEXT, s, n, (int32_t)i);
        else if (n > plen && memcmp(s, prefix, plen) == 0)
            failed |= add_token(v, ROOT_NEXT, s + plen, n - plen, (int32_t)i);
        if (failed) {
            PyErr_SetString(PyExc_MemoryError, "vocabulary too large for the plain-text path");
            free(v->slots);
            free(v);
            return NULL;
        }
    }
    PyObject *capsule = PyCapsule_New(v, CAPSULE, vocab_free);
    if (!capsule) {
        free(v->slots);
        free(v);
    }
    return capsule;
}

/* Each byte's class: HF's punctuation for ASCII is everything printable that is neither a
 * letter nor a digit; whitespace is space, tab, CR and LF; anything else is not plain. */
enum { OTHER = 0, SPACE = 1, PUNCT = 2, WORD = 3 };
static unsigned char CLASS[256];

static void classes(void) {
    for (int c = 0; c < 256; c++) {
        int punct = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                    (c >= 123 && c <= 126);
        int space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        CLASS[c] = space ? SPACE : punct ? PUNCT : (c > 32 && c < 127) ? WORD : OTHER;
    }
}

/* One word's ids into out: greedy longest match, the whole word [UNK] where a piece fails.
 * chars: its characters, which HF's limit counts. A token's bytes end where a character does,
 * so a match never stops inside one. */
static Py_ssize_t word_ids(const Vocab *v, const unsigned char *w, Py_ssize_t len,
                           Py_ssize_t chars, int64_t *out) {
    if (chars > v->max_chars) {
        out[0] = v->unk;
        return 1;
    }
    Py_ssize_t start = 0, n = 0;
    while (start < len) {
        uint32_t node = start ? ROOT_NEXT : ROOT_FIRST;
        int32_t best = -1;
        Py_ssize_t end = start;
        for (Py_ssize_t k = start; k < len; k++) {
            const Slot *slot = child(v, node, v->fold[w[k]]);
            if (!slot) break;
            node = slot->node;
            if (slot->token >= 0) {
                best = slot->token;
                end = k + 1;
            }
        }
        if (best < 0) {
            out[0] = v->unk;
            return 1;
        }
        out[n++] = best;
        start = end;
    }
    return n;
}

/* A plain text's ids into out (at most one a byte); -1 if the text is not plain. */
Py_ssize_t feedgpu_text_ids(const Vocab *v, const unsigned char *s, Py_ssize_t len,
                            int64_t *out) {
    Py_ssize_t k = 0, n = 0;
    while (k < len) {
        switch (CLASS[s[k]]) {
        case SPACE:
            k++;
            break;
        case PUNCT:
            n += word_ids(v, s + k, 1, 1, out + n);
            k++;
            break;
        case WORD: {
            Py_ssize_t e = k + 1;
            while (e < len && CLASS[s[e]] == WORD) e++;
            n += word_ids(v, s + k, e - k, e - k, out + n);
            k = e;
            break;
        }
        default:
            return -1;
        }
    }
    return n;
}

/* The character table: open addressing by code point, at most half full. */
static const CharSlot *char_slot(const Chars *t, uint32_t cp) {
    for (uint32_t i = mix(cp) & t->mask;; i = (i + 1) & t->mask) {
        if (t->slots[i].cp == cp) return &t->slots[i];
        if (t->slots[i].cp == 0) return NULL;
    }
}

static void chars_free(PyObject *capsule) {
    Chars *t = PyCapsule_GetPointer(capsule, CHARS_CAPSULE);
    if (t) {
        free(t->slots);
        free(t);
    }
}

const Chars *feedgpu_chars(PyObject *obj, int *failed) {
    *failed = 0;
    if (obj == Py_None) return NULL;
    const Chars *t = PyCapsule_GetPointer(obj, CHARS_CAPSULE);
    *failed = t == NULL;
    return t;
}

static PyObject *chars(PyObject *self, PyObject *args) {
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &entries)) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(entries);
    uint32_t size = 16;
    while (size < 2 * (uint64_t)count + 2) {
        if (size >= (1u << 30)) {
            PyErr_SetString(PyExc_ValueError, "too many characters");
            return NULL;
        }
        size *= 2;
    }
    Chars *t = calloc(1, sizeof(Chars));
    if (t) t->slots = calloc(size, sizeof(CharSlot));
    if (!t || !t->slots) {
        free(t);
        return PyErr_NoMemory();
    }
    t->mask = size - 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        unsigned int cp, kind;
        const char *bytes;
        Py_ssize_t len;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(entries, i), "IIy#", &cp, &kind, &bytes, &len))
            goto fail;
        Py_ssize_t width = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4, chars = 0;
        for (Py_ssize_t k = 0; k < len; k++) chars += (bytes[k] & 0xC0) != 0x80;
        int formed = kind == CHAR_WORD || kind == CHAR_ALONE; /* a form, or none */
        if (cp < 0x80 || cp > 0x10FFFF || kind < CHAR_WORD || kind > CHAR_DROP ||
            len > 3 * width || chars > width || formed != (len > 0) ||
            (kind == CHAR_ALONE && chars != 1)) {
            PyErr_Format(PyExc_ValueError, "not a character's entry: U+%04X", cp);
            goto fail;
        }
        uint32_t at = mix(cp) & t->mask;
        while (t->slots[at].cp != 0 && t->slots[at].cp != cp) at = (at + 1) & t->mask;
        CharSlot *slot = &t->slots[at];
        slot->cp = cp;
        slot->kind = (unsigned char)kind;
        slot->len = (unsigned char)len;
        slot->chars = (unsigned char)chars;
        memcpy(slot->bytes, bytes, (size_t)len);
    }
    PyObject *capsule = PyCapsule_New(t, CHARS_CAPSULE, chars_free);
    if (capsule) return capsule;
fail:
    free(t->slots);
    free(t);
    return NULL;
}

/* The code point at s (valid UTF-8) and its bytes. */
static inline uint32_t utf8_char(const unsigned char *s, Py_ssize_t *size) {
    if (s[0] < 0xE0) {
        *size = 2;
        return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    }
    if (s[0] < 0xF0) {
        *size = 3;
        return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    }
    *size = 4;
    return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
           (s[3] & 0x3Fu);
}

/* Words that hold a character beyond ASCII are put together in buf, as normalised (HF's
 * normaliser maps each character on its own, and its pre-tokenizer splits at characters). */
Py_ssize_t feedgpu_utf8_ids(const Vocab *v, const Chars *t, const unsigned char *s,
                            Py_ssize_t len, int64_t *out, unsigned char *buf) {
    Py_ssize_t k = 0, n = 0, w = 0, chars = 0;
    while (k < len) {
        unsigned char c = s[k];
        if (c < 0x80) {
            Py_ssize_t e = k + 1;
            switch (CLASS[c]) {
            case WORD:
                while (e < len && CLASS[s[e]] == WORD) e++;
                if (!w && (e == len || s[e] < 0x80)) { /* an ASCII word, whole */
                    n += word_ids(v, s + k, e - k, e - k, out + n);
                } else {
                    memcpy(buf + w, s + k, (size_t)(e - k));
                    w += e - k;
                    chars += e - k;
                }
                k = e;
                continue;
            case SPACE:
            case PUNCT:
                if (w) n += word_ids(v, buf, w, chars, out + n);
                w = chars = 0;
                if (CLASS[c] == PUNCT) n += word_ids(v, s + k, 1, 1, out + n);
                k = e;
                continue;
            default:
                return -1;
            }
        }
        Py_ssize_t size;
        const CharSlot *slot = t ? char_slot(t, utf8_char(s + k, &size)) : NULL;
        if (!slot) return -1;
        k += size;
        if (slot->kind == CHAR_WORD) {
            memcpy(buf + w, slot->bytes, slot->len);
            w += slot->len;
            chars += slot->chars;
        } else if (slot->kind != CHAR_DROP) { /* a word alone, or a boundary */
            if (w) n += word_ids(v, buf, w, chars, out + n);
            w = chars = 0;
            if (slot->kind == CHAR_ALONE) n += word_ids(v, slot->bytes, slot->len, 1, out + n);
        }
    }
    if (w) n += word_ids(v, buf, w, chars, out + n);
    return n;
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
 * insert, so a text mostly in characters the table lacks goes to tensorflow-text in one
 * piece, as it did before holes. */
#define MAX_HOLES 4

/* A text's (UTF-8, valid; chars code points) covered chunks' ids into out, its others into
 * holes. buf: room for three times the text's bytes. */
static Py_ssize_t chunked_ids(const Vocab *v, const Chars *t, const unsigned char *s,
                              Py_ssize_t len, Py_ssize_t chars, Py_ssize_t text, int64_t *out,
                              Py_ssize_t at, Holes *holes, unsigned char *buf, int *failed) {
    Py_ssize_t k = 0, n = 0, cp = 0, first_hole = holes->count;
    while (k < len) {
        if (CLASS[s[k]] == SPACE) {
            k++;
            cp++;
            continue;
        }
        Py_ssize_t e = k, end = cp;
        for (; e < len && CLASS[s[e]] != SPACE; e++) end += (s[e] & 0xC0) != 0x80;
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

static PyObject *tokenize(PyObject *self, PyObject *args) {
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
        } else if (PyUnicode_IS_ASCII(text)) { /* compact ASCII: its bytes as they are */
            n = feedgpu_text_ids(v, utf8[i], chars, out + at);
        }
        if (n < 0) /* not plain: chunk by chunk */
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

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS,
     "build(tokens, prefix, unk_id, max_chars, lowercase) -> vocabulary: tokens in id order."},
    {"chars", chars, METH_VARARGS,
     "chars(entries) -> character table: entries (code point, kind, normal form as UTF-8) "
     "of characters beyond ASCII; kind 1: part of a word, 2: a word alone, 3: a boundary, "
     "4: dropped."},
    {"tokenize", tokenize, METH_VARARGS,
     "tokenize(vocabulary, chars, texts) -> (int64 ids as bytes, int64 counts as bytes, holes "
     "as bytes: int64 (text, start, end, position) of each chunk between ASCII whitespace "
     "that is not plain or holds a character the table (or None) lacks, left out of the ids "
     "and the counts, for the caller)."},
    {"lines", feedgpu_lines, METH_VARARGS,
     "lines(vocabulary, chars, data, ends, field, triggers) -> (int64 ids, int64 counts, "
     "int64 indexes of the lines so tokenized, int64 indexes of the lines left to the caller; "
     "all as bytes): line i is data[ends[i]:ends[i + 1]] (data bytes-like, ends an int64 "
     "buffer); JSON lines whose document is certain and covered (_json_line.h; beyond ASCII, "
     "by the table, or None) tokenized, in order; blank lines in neither; a text holding a "
     "byte of triggers left to the caller."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wordpiece", "BERT WordPiece ids of plain texts, without the GIL.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wordpiece(void) {
    classes();
    feedgpu_json_init();
    return PyModule_Create(&module);
}
