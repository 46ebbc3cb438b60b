/* The step's table of characters beyond ASCII (`char_table.py` fills it from HF's answers):
 * built from Python's entries, read by the step without the GIL (_wordpiece.h, char_slot). */
#include "_wordpiece.h" /* Python.h first */

#include <stdlib.h>
#include <string.h>

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

/* An entry as `char_table.CharTable` packs it: code point (uint32, little-endian), kind,
 * its normal form's length and bytes (CHAR_FORM_MAX, zero-padded). Packed, a table of 20k
 * characters rebuilds in a fraction of a millisecond; as a list of tuples it took 3 ms, each
 * time a batch brought a character new to it. */
#define ENTRY_SIZE (6 + CHAR_FORM_MAX)

PyObject *feedgpu_chars_build(PyObject *self, PyObject *args) {
    Py_buffer packed;
    if (!PyArg_ParseTuple(args, "y*", &packed)) return NULL;
    if (packed.len % ENTRY_SIZE) {
        PyBuffer_Release(&packed);
        PyErr_SetString(PyExc_ValueError, "entries: whole packed entries");
        return NULL;
    }
    Py_ssize_t count = packed.len / ENTRY_SIZE;
    const unsigned char *entry = packed.buf;
    uint32_t size = 16;
    while (size < 2 * (uint64_t)count + 2) {
        if (size >= (1u << 30)) {
            PyBuffer_Release(&packed);
            PyErr_SetString(PyExc_ValueError, "too many characters");
            return NULL;
        }
        size *= 2;
    }
    Chars *t = calloc(1, sizeof(Chars));
    if (t) t->slots = calloc(size, sizeof(CharSlot));
    if (!t || !t->slots) {
        free(t);
        PyBuffer_Release(&packed);
        return PyErr_NoMemory();
    }
    t->mask = size - 1;
    for (Py_ssize_t i = 0; i < count; i++, entry += ENTRY_SIZE) {
        uint32_t cp = entry[0] | (uint32_t)entry[1] << 8 | (uint32_t)entry[2] << 16 |
                      (uint32_t)entry[3] << 24;
        unsigned kind = entry[4];
        Py_ssize_t len = entry[5];
        const unsigned char *bytes = entry + 6;
        Py_ssize_t width = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4, chars = 0;
        if (len <= 3 * width) /* within the entry: counted only then */
            for (Py_ssize_t k = 0; k < len; k++) chars += (bytes[k] & 0xC0) != 0x80;
        int formed = kind == CHAR_WORD || kind == CHAR_ALONE; /* a form, or none */
        if (cp < 0x80 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || kind < CHAR_WORD ||
            kind > CHAR_DROP ||
            len > 3 * width || chars > width || formed != (len > 0) ||
            (kind == CHAR_ALONE && chars != 1)) {
            PyErr_Format(PyExc_ValueError, "not a character's entry: code point 0x%x", cp);
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
    PyBuffer_Release(&packed);
    PyObject *capsule = PyCapsule_New(t, CHARS_CAPSULE, chars_free);
    if (capsule) return capsule;
    free(t->slots);
    free(t);
    return NULL;
fail:
    PyBuffer_Release(&packed);
    free(t->slots);
    free(t);
    return NULL;
}
