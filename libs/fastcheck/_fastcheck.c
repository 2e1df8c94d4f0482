/* The per-item checks of a batch enqueue, in C: one call per batch instead of one Python
 * call per task (see __init__.py for the contract and the pure-Python twin).
 *
 * first_bad_json(items) -> index of the first item that is not exactly one JSON value
 *   (str or UTF-8 bytes; no whitespace before or after it), or -1 when every item is one.
 *   It may answer "bad" for an item Python's json would take (nesting deeper than
 *   MAX_DEPTH, a number token longer than MAX_NUMBER, a str holding a lone surrogate):
 *   callers then ask the Python path, which decides and names the error. It never answers
 *   "good" for an item that path rejects: RFC 8259 values only, strings without raw control
 *   characters (json's strict mode), no NaN or Infinity.
 *
 * all_canonical_ids(ids) -> whether every item is a str task id in canonical form:
 *   8-4-4-4-12 lowercase hex, version nibble 8, variant [89ab].
 *
 * copy_rows(ids, payloads, nfields, shared) -> Postgres binary COPY data (header, one tuple
 *   per id, trailer): each tuple is nfields fields, the id as a uuid, its payload as bytes,
 *   then `shared` as given (the other fields, already encoded, the same for every row).
 *   ValueError for an id not in canonical form; TypeError for a payload not bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_DEPTH 128
#define MAX_NUMBER 4000 /* below int()'s 4,300-digit limit, which json.loads hits */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
    int depth;
} scan;

static inline void skip_ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static inline int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int value(scan *s);

/* A string literal, s->p at its opening quote. Bytes >= 0x80 pass here: the caller has
 * checked the item is UTF-8 (a str's UTF-8 form, or bytes checked by the decoder). */
static int string(scan *s) {
    s->p++;
    while (s->p < s->end) {
        unsigned char c = *s->p++;
        if (c == '"')
            return 1;
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (s->p >= s->end)
                return 0;
            c = *s->p++;
            switch (c) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                break;
            case 'u':
                if (s->end - s->p < 4 || !is_hex(s->p[0]) || !is_hex(s->p[1]) || !is_hex(s->p[2]) ||
                    !is_hex(s->p[3]))
                    return 0;
                s->p += 4;
                break;
            default:
                return 0;
            }
        }
    }
    return 0;
}

static int number(scan *s) {
    const unsigned char *start = s->p;
    if (*s->p == '-')
        s->p++;
    if (s->p >= s->end)
        return 0;
    if (*s->p == '0') {
        s->p++;
    } else if (*s->p >= '1' && *s->p <= '9') {
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    } else {
        return 0;
    }
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    return s->p - start <= MAX_NUMBER;
}

static int word(scan *s, const char *w, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, w, n) != 0)
        return 0;
    s->p += n;
    return 1;
}

static int container(scan *s, unsigned char close) {
    if (++s->depth > MAX_DEPTH)
        return 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 1;
    }
    for (;;) {
        if (close == '}') {
            if (s->p >= s->end || *s->p != '"' || !string(s))
                return 0;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':')
                return 0;
            s->p++;
            skip_ws(s);
        }
        if (!value(s))
            return 0;
        skip_ws(s);
        if (s->p >= s->end)
            return 0;
        if (*s->p == close) {
            s->p++;
            s->depth--;
            return 1;
        }
        if (*s->p != ',')
            return 0;
        s->p++;
        skip_ws(s);
    }
}

static int value(scan *s) {
    if (s->p >= s->end)
        return 0;
    switch (*s->p) {
    case '{': return container(s, '}');
    case '[': return container(s, ']');
    case '"': return string(s);
    case 't': return word(s, "true", 4);
    case 'f': return word(s, "false", 5);
    case 'n': return word(s, "null", 4);
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
            return number(s);
        return 0;
    }
}

static int has_high_bytes(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] & 0x80)
            return 1;
    return 0;
}

/* 1: one JSON value; 0: not (or not decided here); -1: error set (a wrong type). */
static int item_ok(PyObject *item) {
    const char *data;
    Py_ssize_t n;
    if (PyUnicode_Check(item)) {
        data = PyUnicode_AsUTF8AndSize(item, &n);
        if (data == NULL) { /* a lone surrogate: no UTF-8 form; the Python path decides */
            PyErr_Clear();
            return 0;
        }
    } else if (PyBytes_Check(item)) {
        data = PyBytes_AS_STRING(item);
        n = PyBytes_GET_SIZE(item);
        if (has_high_bytes((const unsigned char *)data, n)) {
            PyObject *u = PyUnicode_DecodeUTF8(data, n, "strict");
            if (u == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(u);
        }
    } else {
        PyErr_Format(PyExc_TypeError, "first_bad_json: items must be str or bytes, not %.100s",
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    scan s = {(const unsigned char *)data, (const unsigned char *)data + n, 0};
    if (n == 0 || *s.p == ' ' || *s.p == '\t' || *s.p == '\n' || *s.p == '\r')
        return 0;
    return value(&s) && s.p == s.end;
}

static PyObject *first_bad_json(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "first_bad_json: expected a list or tuple of str or bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = item_ok(items[i]);
        if (ok < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        if (!ok) {
            bad = i;
            break;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(bad);
}

static int canonical(PyObject *item) {
    if (!PyUnicode_Check(item) || !PyUnicode_IS_ASCII(item) || PyUnicode_GET_LENGTH(item) != 36)
        return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(item);
    for (int i = 0; i < 36; i++) {
        unsigned char c = p[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return 0;
        }
    }
    return p[14] == '8' && (p[19] == '8' || p[19] == '9' || p[19] == 'a' || p[19] == 'b');
}

static PyObject *all_canonical_ids(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "all_canonical_ids: expected a list or tuple of str");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok; i++)
        ok = canonical(items[i]);
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static const unsigned char COPY_HEADER[19] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0,
                                              0, 0, 0, 0, 0, 0, 0, 0};

static PyObject *copy_rows(PyObject *self, PyObject *args) {
    PyObject *ids_arg, *payloads_arg;
    int nfields;
    Py_buffer shared;
    if (!PyArg_ParseTuple(args, "OOiy*", &ids_arg, &payloads_arg, &nfields, &shared))
        return NULL;
    PyObject *ids = NULL, *payloads = NULL, *out = NULL;
    if (nfields < 2 || nfields > 1600) {
        PyErr_SetString(PyExc_ValueError, "copy_rows: nfields must be 2..1600");
        goto done;
    }
    ids = PySequence_Fast(ids_arg, "copy_rows: ids must be a list or tuple");
    if (ids == NULL)
        goto done;
    payloads = PySequence_Fast(payloads_arg, "copy_rows: payloads must be a list or tuple");
    if (payloads == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ids);
    if (PySequence_Fast_GET_SIZE(payloads) != n) {
        PyErr_SetString(PyExc_ValueError, "copy_rows: one payload per id");
        goto done;
    }
    PyObject **id_items = PySequence_Fast_ITEMS(ids), **pay_items = PySequence_Fast_ITEMS(payloads);
    Py_ssize_t size = sizeof(COPY_HEADER) + 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(pay_items[i])) {
            PyErr_Format(PyExc_TypeError, "copy_rows: payloads[%zd] is not bytes", i);
            goto done;
        }
        if (PyBytes_GET_SIZE(pay_items[i]) > 0x3fffffff) {
            PyErr_Format(PyExc_ValueError, "copy_rows: payloads[%zd] is too large", i);
            goto done;
        }
        size += 2 + 4 + 16 + 4 + PyBytes_GET_SIZE(pay_items[i]) + shared.len;
    }
    out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(w, COPY_HEADER, sizeof(COPY_HEADER));
    w += sizeof(COPY_HEADER);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!canonical(id_items[i])) {
            PyErr_Format(PyExc_ValueError, "copy_rows: ids[%zd] is not a canonical task id", i);
            Py_CLEAR(out);
            goto done;
        }
        const unsigned char *h = PyUnicode_1BYTE_DATA(id_items[i]);
        w[0] = (unsigned char)(nfields >> 8);
        w[1] = (unsigned char)nfields;
        put32(w + 2, 16);
        w += 6;
        for (int k = 0, j = 0; k < 16; k++) {
            if (h[j] == '-')
                j++;
            *w++ = (unsigned char)(hexval(h[j]) << 4 | hexval(h[j + 1]));
            j += 2;
        }
        Py_ssize_t plen = PyBytes_GET_SIZE(pay_items[i]);
        put32(w, (uint32_t)plen);
        memcpy(w + 4, PyBytes_AS_STRING(pay_items[i]), plen);
        w += 4 + plen;
        memcpy(w, shared.buf, shared.len);
        w += shared.len;
    }
    w[0] = 0xff;
    w[1] = 0xff;
done:
    Py_XDECREF(ids);
    Py_XDECREF(payloads);
    PyBuffer_Release(&shared);
    return out;
}

static PyMethodDef methods[] = {
    {"first_bad_json", first_bad_json, METH_O,
     "Index of the first item that is not exactly one JSON value, or -1."},
    {"all_canonical_ids", all_canonical_ids, METH_O,
     "Whether every item is a canonical Ratchet task id."},
    {"copy_rows", copy_rows, METH_VARARGS,
     "Postgres binary COPY data: per row the id (uuid), the payload (bytes), then shared."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcheck", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastcheck(void) { return PyModule_Create(&module); }
