/* zactors.patterns.zeps._deliver: a batch of journal records to DELIVER frames, in C.
 *
 * A replaying ZEPS broker turned each record into a DELIVER frame with a
 * dozen bytecodes (filter call, two struct packs, a join, credit
 * arithmetic), and a subscriber each DELIVER back into a Message with as
 * many.  frames() and parse() do a whole batch in one call; deliver.py is the
 * only caller and holds the pure-Python twin (used when this module is not
 * built, or with ZACTORS_PURE_PYTHON=1), which behaves identically.
 *
 * DELIVER (the ZEPS spec): AA A5 07 | u64 sequence | u8 key length | key |
 * u32 body length | body, integers big-endian.
 *
 * parse_publish() is the broker's per-message PUBLISH parse (a Python call, a
 * struct unpack and two slices were ~1k instructions a message); its twin is
 * protocol.py's py_parse_publish, the one PUBLISH parser.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* frames(records, start, limit, credit, match) -> (frames, credit, next, short)
 * See deliver.py's py_frames. */
static PyObject *
frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *match, *out;
    Py_ssize_t start, i, n;
    unsigned long long limit;
    long long credit;
    int short_ = 0;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "frames(records, start, limit, credit, match)");
        return NULL;
    }
    records = args[0];
    match = args[4];
    if (!PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "frames() takes a list of records");
        return NULL;
    }
    start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    limit = PyLong_AsUnsignedLongLong(args[2]);
    if (limit == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    credit = PyLong_AsLongLong(args[3]);
    if (credit == -1 && PyErr_Occurred())
        return NULL;
    if (match != Py_None && !PyTuple_Check(match) && !PyCallable_Check(match)) {
        PyErr_SetString(PyExc_TypeError, "match must be None, a tuple of prefixes or a callable");
        return NULL;
    }
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    n = PyList_GET_SIZE(records);
    if (start < 0)
        start = 0;
    for (i = start; i < n; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 4) {
            PyErr_SetString(PyExc_TypeError, "a record is a (seq, timestamp, key, body) tuple");
            goto fail;
        }
        PyObject *seqobj = PyTuple_GET_ITEM(rec, 0), *key = PyTuple_GET_ITEM(rec, 2), *body = PyTuple_GET_ITEM(rec, 3);
        if (!PyBytes_Check(key) || !PyBytes_Check(body)) {
            PyErr_SetString(PyExc_TypeError, "record key and body must be bytes");
            goto fail;
        }
        unsigned long long seq = PyLong_AsUnsignedLongLong(seqobj);
        if (seq == (unsigned long long)-1 && PyErr_Occurred())
            goto fail;
        if (seq > limit)
            break;
        Py_ssize_t klen = PyBytes_GET_SIZE(key), blen = PyBytes_GET_SIZE(body);
        const char *k = PyBytes_AS_STRING(key);
        if (match != Py_None) {
            int hit = 0;
            if (PyTuple_Check(match)) {
                Py_ssize_t m = PyTuple_GET_SIZE(match);
                for (Py_ssize_t j = 0; j < m && !hit; j++) {
                    PyObject *prefix = PyTuple_GET_ITEM(match, j);
                    if (!PyBytes_Check(prefix)) {
                        PyErr_SetString(PyExc_TypeError, "prefixes must be bytes");
                        goto fail;
                    }
                    Py_ssize_t plen = PyBytes_GET_SIZE(prefix);
                    hit = plen <= klen && memcmp(PyBytes_AS_STRING(prefix), k, plen) == 0;
                }
            }
            else {
                PyObject *r = PyObject_CallOneArg(match, key);
                if (r == NULL)
                    goto fail;
                hit = PyObject_IsTrue(r);
                Py_DECREF(r);
                if (hit < 0)
                    goto fail;
            }
            if (!hit)
                continue;
        }
        if (klen > 255 || blen > (Py_ssize_t)UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "DELIVER key over 255 bytes or body over 4 GiB");
            goto fail;
        }
        Py_ssize_t size = 16 + klen + blen;
        if (credit < size) {
            short_ = 1;
            break;
        }
        PyObject *frame = PyBytes_FromStringAndSize(NULL, size);
        if (frame == NULL)
            goto fail;
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(frame);
        p[0] = 0xAA;
        p[1] = 0xA5;
        p[2] = 7;
        for (int b = 0; b < 8; b++)
            p[3 + b] = (unsigned char)(seq >> (56 - 8 * b));
        p[11] = (unsigned char)klen;
        memcpy(p + 12, k, klen);
        p[12 + klen] = (unsigned char)(blen >> 24);
        p[13 + klen] = (unsigned char)(blen >> 16);
        p[14 + klen] = (unsigned char)(blen >> 8);
        p[15 + klen] = (unsigned char)blen;
        memcpy(p + 16 + klen, PyBytes_AS_STRING(body), blen);
        if (PyList_Append(out, frame) < 0) {
            Py_DECREF(frame);
            goto fail;
        }
        Py_DECREF(frame);
        credit -= size;
    }
    return Py_BuildValue("NLni", out, credit, i, short_);
fail:
    Py_DECREF(out);
    return NULL;
}

static PyTypeObject *message_type; /* client.Message (a tuple subclass), set by bind() */

static PyObject *
bind(PyObject *self, PyObject *type)
{
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind() takes the Message tuple type");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(message_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

/* parse(frames, start, last) -> (messages, last, size, next, duplicates)
 * See deliver.py's py_parse. */
static PyObject *
parse(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *frames, *out;
    Py_ssize_t i, n, size = 0, dups = 0;
    unsigned long long last = 0;
    int have_last = 0, overflow = 0;
    long long given;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "parse(frames, start, last)");
        return NULL;
    }
    frames = args[0];
    if (!PyList_Check(frames)) {
        PyErr_SetString(PyExc_TypeError, "parse() takes a list of frames");
        return NULL;
    }
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zactors.patterns.zeps._deliver: bind() was not called");
        return NULL;
    }
    i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    given = PyLong_AsLongLongAndOverflow(args[2], &overflow);  /* a negative last: none yet */
    if (given == -1 && PyErr_Occurred())
        return NULL;
    if (overflow > 0) {
        last = PyLong_AsUnsignedLongLong(args[2]);
        if (last == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        have_last = 1;
    }
    else if (overflow == 0 && given >= 0) {
        last = (unsigned long long)given;
        have_last = 1;
    }
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    n = PyList_GET_SIZE(frames);
    if (i < 0)
        i = 0;
    for (; i < n; i++) {
        PyObject *frame = PyList_GET_ITEM(frames, i);
        if (!PyBytes_Check(frame))
            break;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(frame);
        Py_ssize_t len = PyBytes_GET_SIZE(frame);
        if (len < 16 || p[0] != 0xAA || p[1] != 0xA5 || p[2] != 7)
            break;
        Py_ssize_t end = 12 + p[11];
        if (len < end + 4)
            break;
        uint32_t blen = (uint32_t)p[end] << 24 | (uint32_t)p[end + 1] << 16 | (uint32_t)p[end + 2] << 8 | p[end + 3];
        if ((Py_ssize_t)blen != len - end - 4)
            break;
        uint64_t seq = 0;
        for (int b = 0; b < 8; b++)
            seq = seq << 8 | p[3 + b];
        if (have_last && seq <= last) {
            dups++;
            continue;
        }
        PyObject *msg = message_type->tp_alloc(message_type, 3);
        if (msg == NULL)
            goto fail;
        PyObject *s = PyLong_FromUnsignedLongLong(seq);
        PyObject *k = PyBytes_FromStringAndSize((const char *)p + 12, end - 12);
        PyObject *v = PyBytes_FromStringAndSize((const char *)p + end + 4, blen);
        PyTuple_SET_ITEM(msg, 0, s);
        PyTuple_SET_ITEM(msg, 1, k);
        PyTuple_SET_ITEM(msg, 2, v);
        if (s == NULL || k == NULL || v == NULL || PyList_Append(out, msg) < 0) {
            Py_DECREF(msg);
            goto fail;
        }
        PyObject_GC_UnTrack(msg);  /* an int and bytes: never in a cycle, the cyclic GC need not see it */
        Py_DECREF(msg);
        last = seq;
        have_last = 1;
        size += len;
    }
    if (!have_last)
        return Py_BuildValue("NLnnn", out, (long long)-1, size, i, dups);
    return Py_BuildValue("NKnnn", out, last, size, i, dups);
fail:
    Py_DECREF(out);
    return NULL;
}

/* parse_publish(frame) -> (key, body) or None: see protocol.py's py_parse_publish (the twin).
 * PUBLISH: AA A5 06 | u8 key length | key | u32 body length | body (big-endian). */
static PyObject *
parse_publish(PyObject *self, PyObject *frame)
{
    if (!PyBytes_CheckExact(frame)) {
        PyErr_SetString(PyExc_TypeError, "parse_publish() takes bytes");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(frame);
    Py_ssize_t size = PyBytes_GET_SIZE(frame);
    if (size > 7 && b[2] == 6 && b[0] == 0xAA && b[1] == 0xA5) {
        Py_ssize_t end = 4 + b[3];
        if (size >= end + 4) {
            const unsigned char *q = b + end;
            uint32_t blen = (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3];
            if ((Py_ssize_t)blen == size - end - 4) {
                PyObject *key = PyBytes_FromStringAndSize((const char *)b + 4, end - 4);
                PyObject *body = key == NULL ? NULL : PyBytes_FromStringAndSize((const char *)q + 4, blen);
                if (body == NULL) {
                    Py_XDECREF(key);
                    return NULL;
                }
                PyObject *out = PyTuple_New(2);
                if (out == NULL) {
                    Py_DECREF(key);
                    Py_DECREF(body);
                    return NULL;
                }
                PyTuple_SET_ITEM(out, 0, key);
                PyTuple_SET_ITEM(out, 1, body);
                return out;
            }
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse_publish", parse_publish, METH_O, "parse_publish(frame) -> (key, body) or None."},
    {"bind", bind, METH_O, "bind(Message): the message type parse() makes."},
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL,
     "parse(frames, start, last) -> (messages, last, size, next, duplicates)."},
    {"frames", (PyCFunction)(void (*)(void))frames, METH_FASTCALL,
     "frames(records, start, limit, credit, match) -> (frames, credit, next, short)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_deliver",
    "Journal records to ZEPS DELIVER frames in C (see patterns/zeps/deliver.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__deliver(void)
{
    return PyModule_Create(&module);
}
