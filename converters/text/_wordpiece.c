/* BERT WordPiece ids of texts, exactly as HF's BertWordPieceTokenizer gives them, without the
 * GIL: plain text (printable ASCII, tab, CR, LF) from its bytes, other characters by the
 * table of HF's answers (_chars.c, `char_table.py`).
 *
 * Why: most of a real corpus is plain text, and for it BERT's normaliser is at most ASCII
 * lowercasing, its pre-tokenizer a split at whitespace and punctuation, and WordPiece a
 * greedy longest match. tensorflow-text's op does this too, but also builds every token's
 * string and offsets, which nobody reads, and needs the texts copied into a tensor first;
 * here the ids come straight from the texts' bytes (benchmarks/RESULTS.md, "Decisions"). In other
 * texts, the chunks between ASCII whitespace the table covers are
 * tokenized here too (WordPiece never crosses whitespace); the others are left to the caller
 * as holes, which it tokenizes the usual way; a text of many holes is one hole (_texts.c).
 *
 * The vocabulary is a trie kept in a hash table: a node is a prefix of some token, keyed by
 * (its parent node, its last byte), exactly, so no two strings can be confused. Two roots:
 * a word's first piece, and continuing pieces (tokens starting with the prefix, "##").
 */
#include "_wordpiece.h" /* Python.h first */

#include <stdlib.h>
#include <string.h>

#define MAX_NODES (1u << 24) /* node numbers fit a key's upper 24 bits */

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
    v->size = count;
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
                } else if (!t) { /* it goes on past ASCII, and there is no table */
                    return -1;
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

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS,
     "build(tokens, prefix, unk_id, max_chars, lowercase) -> vocabulary: tokens in id order."},
    {"chars", feedgpu_chars_build, METH_VARARGS,
     "chars(entries) -> character table: entries of characters beyond ASCII, packed (bytes, "
     "18 each: code point as uint32 little-endian, kind, the normal form's length, the form "
     "as UTF-8 padded to 12 bytes); kind 1: part of a word, 2: a word alone, 3: a boundary, "
     "4: dropped."},
    {"tokenize", feedgpu_tokenize, METH_VARARGS,
     "tokenize(vocabulary, chars, texts) -> (int64 ids as bytes, int64 counts as bytes, holes "
     "as bytes: int64 (text, start, end, position) of each chunk between ASCII whitespace "
     "that is not plain or holds a character the table (or None) lacks, left out of the ids "
     "and the counts, for the caller)."},
    {"lines", feedgpu_lines, METH_VARARGS,
     "lines(vocabulary, chars, data, ends, field, tokens) -> (int64 ids, int64 counts, int64 "
     "indexes of the lines so tokenized, int64 indexes of the lines left to the caller; all "
     "as bytes): line i is data[ends[i]:ends[i + 1]] (data bytes-like, ends an int64 buffer); "
     "JSON lines whose document is certain and covered (_json_line.h; beyond ASCII, by the "
     "table, or None) tokenized, in order; blank lines in neither; a text that may hold one "
     "of tokens (a sequence of bytes: added tokens' texts, ignoring ASCII case) left to the "
     "caller."},
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
