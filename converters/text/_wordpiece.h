/* What the WordPiece step's files share: the vocabulary's trie and text's ids (_wordpiece.c),
 * the table of characters beyond ASCII (_chars.c), texts given as str (_texts.c) and JSON
 * lines (_json_lines.c). */
#ifndef FEEDGPU_WORDPIECE_H
#define FEEDGPU_WORDPIECE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define CAPSULE "feedgpu.wordpiece"
#define ROOT_FIRST 1u
#define ROOT_NEXT 2u

typedef struct {
    uint32_t key; /* (parent node << 8) | byte; 0 marks an empty slot */
    uint32_t node;
    int32_t token; /* the token this prefix completes, or -1 */
} Slot;

typedef struct {
    Slot *slots;
    uint32_t mask;
    uint32_t nodes;
    int64_t unk;
    int64_t size; /* tokens: ids are under it */
    Py_ssize_t max_chars;
    unsigned char fold[256]; /* lowercase or not */
} Vocab;

/* Characters beyond ASCII as the tokenizer's own normaliser and pre-tokenizer treat them, one
 * by one (char_table.py learns them from HF): part of a word (its normal form's bytes), a word
 * alone (punctuation, CJK), a word boundary, or nothing. A character not in it is a hole. */
#define CHARS_CAPSULE "feedgpu.chars"
enum { CHAR_WORD = 1, CHAR_ALONE = 2, CHAR_SPACE = 3, CHAR_DROP = 4 };

#define CHAR_FORM_MAX 12 /* a normal form's bytes: at most three times the character's */

typedef struct {
    uint32_t cp; /* 0 marks an empty slot */
    unsigned char kind, len, chars; /* its normal form's bytes and characters: no more
                                       characters than the character has bytes */
    unsigned char bytes[CHAR_FORM_MAX];
} CharSlot;

typedef struct {
    CharSlot *slots;
    uint32_t mask;
} Chars;

/* The hash of the vocabulary's trie and of the table of characters. */
static inline uint32_t mix(uint32_t key) {
    key ^= key >> 16;
    key *= 0x45D9F3Bu;
    return key ^ (key >> 16);
}

/* The character table: open addressing by code point, at most half full. */
static inline const CharSlot *char_slot(const Chars *t, uint32_t cp) {
    for (uint32_t i = mix(cp) & t->mask;; i = (i + 1) & t->mask) {
        if (t->slots[i].cp == cp) return &t->slots[i];
        if (t->slots[i].cp == 0) return NULL;
    }
}

/* chars(entries) and tokenize(vocabulary, chars, texts): _chars.c, _texts.c. */
PyObject *feedgpu_chars_build(PyObject *self, PyObject *args);
PyObject *feedgpu_tokenize(PyObject *self, PyObject *args);

/* The table in obj (a capsule of chars()), NULL for None; NULL with an error set if neither. */
const Chars *feedgpu_chars(PyObject *obj, int *failed);

/* A text's ids (valid UTF-8) into out (at most one a byte): printable ASCII, tab, CR and LF
 * from its bytes, other characters as the table t has them; -1 if one is not in it (or t is
 * NULL) or the text holds an ASCII control character or DEL. buf: room for 3 * len bytes (a
 * normal form may be longer than its character); with t NULL, none is used. */
Py_ssize_t feedgpu_utf8_ids(const Vocab *v, const Chars *t, const unsigned char *s,
                            Py_ssize_t len, int64_t *out, unsigned char *buf);

/* lines(vocabulary, chars, data, ends, field, triggers): _json_lines.c; feedgpu_json_init
 * before its first call. (Prefixed: the module's only symbols outside its own files.) */
PyObject *feedgpu_lines(PyObject *self, PyObject *args);
void feedgpu_json_init(void);

#endif
