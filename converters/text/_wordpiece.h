/* What the WordPiece step (_wordpiece.c) shares with its JSON-lines entry (_json_lines.c): the
 * vocabulary's trie and plain text's ids. */
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
    Py_ssize_t max_chars;
    unsigned char fold[256]; /* lowercase or not */
} Vocab;

/* A plain text's ids into out (at most one a byte); -1 if the text is not plain. */
Py_ssize_t feedgpu_text_ids(const Vocab *v, const unsigned char *s, Py_ssize_t len, int64_t *out);

/* lines(vocabulary, lines, field, triggers): _json_lines.c; feedgpu_json_init before its
 * first call. (Prefixed: the module's only symbols outside its own files.) */
PyObject *feedgpu_lines(PyObject *self, PyObject *args);
void feedgpu_json_init(void);

#endif
