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

PyObject *feedgpu_chars_build(PyObject *self, PyObject *args) {
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
