/* zactors.actors._journal: the journal's per-record framing and decoding, in C.
 *
 * Journal.append spent ~2 us per 100-byte record in Python (three struct
 * packs, a join, a CRC call, two buffer appends); a replay decoded every
 * record with a dozen bytecodes.  frame() and decode() do the same work in
 * one call each; actors/journal_codec.py is the only caller and holds the
 * pure-Python twins (used when this module is not built, or with
 * ZACTORS_PURE_PYTHON=1), which behave identically.  The record layout is
 * the journal's file format (actors/journal.py), all little-endian:
 *
 *   u32 length | u32 crc32c | u64 seq | f64 timestamp | u32 klen | key | u32 blen | body
 *
 * CRC-32C uses the SSE4.2 instruction when the CPU has it, else a
 * slicing-by-8 table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define REC_HEAD 28          /* length, crc, seq, timestamp, klen */
#define MIN_LENGTH 24        /* seq + timestamp + klen + blen: a record with empty key and body */
#define MAX_RECORD (1u << 30)

/* -- CRC-32C ----------------------------------------------------------------------- */
static uint32_t table[8][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t
crc_soft(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff]
            ^ table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff]
            ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t
crc_hard(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#define HAVE_HARD 1
#endif

static uint32_t (*crc32c)(uint32_t, const unsigned char *, size_t) = crc_soft;

/* -- little-endian fields ------------------------------------------------------------ */
static inline uint32_t
get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t
get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static inline void
put32(unsigned char *p, uint32_t v)
{
    p[0] = v;
    p[1] = v >> 8;
    p[2] = v >> 16;
    p[3] = v >> 24;
}

static inline void
put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static PyTypeObject *record_type; /* journal.Record (a tuple subclass), set by bind() */

static PyObject *
bind(PyObject *self, PyObject *type)
{
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind() takes the Record tuple type");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(record_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

static PyObject *
crc(PyObject *self, PyObject *args)
{
    Py_buffer data;
    unsigned int value = 0;
    uint32_t out;
    if (!PyArg_ParseTuple(args, "y*|I:crc", &data, &value))
        return NULL;
    out = crc32c(value, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(out);
}

/* Record(seq, timestamp, key, body); the references to seq, key and body are new ones. */
static PyObject *
make_record(PyObject *seq, double ts, PyObject *key, PyObject *body)
{
    PyObject *rec, *t;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zactors.actors._journal: bind() was not called");
        return NULL;
    }
    t = PyFloat_FromDouble(ts);
    if (t == NULL)
        return NULL;
    rec = record_type->tp_alloc(record_type, 4);
    if (rec == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    Py_INCREF(seq);
    Py_INCREF(key);
    Py_INCREF(body);
    PyTuple_SET_ITEM(rec, 0, seq);
    PyTuple_SET_ITEM(rec, 1, t);
    PyTuple_SET_ITEM(rec, 2, key);
    PyTuple_SET_ITEM(rec, 3, body);
    /* ints, a float and bytes: it can never be part of a cycle, so the cyclic GC need not
     * track it (CPython untracks such tuples itself, but only once a collection visits them) */
    PyObject_GC_UnTrack(rec);
    return rec;
}

/* frame(buf, seq, timestamp, key, body) -> Record: append one framed record to the bytearray buf. */
static PyObject *
frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *buf, *key, *body;
    unsigned long long seq;
    double ts;
    Py_ssize_t klen, blen, old, length;
    unsigned char *p;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "frame(buf, seq, timestamp, key, body)");
        return NULL;
    }
    buf = args[0];
    key = args[3];
    body = args[4];
    if (!PyByteArray_CheckExact(buf) || !PyBytes_CheckExact(key) || !PyBytes_CheckExact(body)
        || !PyLong_CheckExact(args[1]) || !PyFloat_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "frame() takes a bytearray, an int, a float, then bytes key and body");
        return NULL;
    }
    seq = PyLong_AsUnsignedLongLong(args[1]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    ts = PyFloat_AsDouble(args[2]);
    if (ts == -1.0 && PyErr_Occurred())
        return NULL;
    klen = PyBytes_GET_SIZE(key);
    blen = PyBytes_GET_SIZE(body);
    if ((size_t)klen + (size_t)blen > MAX_RECORD || klen > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "journal record too large");
        return NULL;
    }
    length = MIN_LENGTH + klen + blen;
    old = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, old + 8 + length) < 0)
        return NULL;
    p = (unsigned char *)PyByteArray_AS_STRING(buf) + old;
    put64(p + 8, seq);
    memcpy(p + 16, &ts, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    {
        uint64_t w;
        memcpy(&w, p + 16, 8);
        put64(p + 16, w);
    }
#endif
    put32(p + 24, (uint32_t)klen);
    memcpy(p + 28, PyBytes_AS_STRING(key), klen);
    put32(p + 28 + klen, (uint32_t)blen);
    memcpy(p + 32 + klen, PyBytes_AS_STRING(body), blen);
    put32(p, (uint32_t)length);
    put32(p + 4, crc32c(0, p + 8, (size_t)length));
    return make_record(args[1], ts, key, body);
}

/* decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at) -> (at, total, status)
 * See journal_codec.py's py_decode: the two behave identically. */
static PyObject *
decode(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t at, max_out, verify_at;
    long long budget, total = 0;
    unsigned long long from_seq, to_seq;
    PyObject *out;
    int status = 0;
    if (!PyArg_ParseTuple(args, "y*nO!KKnLn:decode", &view, &at, &PyList_Type, &out, &from_seq, &to_seq,
                          &max_out, &budget, &verify_at))
        return NULL;
    if (record_type == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "zactors.actors._journal: bind() was not called");
        return NULL;
    }
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len;
    if (at < 0)
        at = 0;
    while (at + REC_HEAD <= n) {
        const unsigned char *r = b + at;
        uint32_t length = get32(r);
        Py_ssize_t stop = at + 8 + (Py_ssize_t)length;
        if (length < MIN_LENGTH || length > MIN_LENGTH + MAX_RECORD) {
            status = 2;
            break;
        }
        if (stop > n)
            break;
        /* checked before the sequence is believed: a flipped sequence must not make a
         * record look skippable (or past the end) and vanish without an error */
        if (stop > verify_at && crc32c(0, r + 8, length) != get32(r + 4)) {
            status = 2;
            break;
        }
        uint64_t seq = get64(r + 8);
        if (seq >= from_seq) {
            if (seq > to_seq) {
                status = 1;
                break;
            }
            uint32_t klen = get32(r + 24);
            if (klen > length - MIN_LENGTH || get32(r + REC_HEAD + klen) != length - MIN_LENGTH - klen) {
                status = 2;
                break;
            }
            Py_ssize_t size = (Py_ssize_t)length - MIN_LENGTH;
            if (total + size > budget && PyList_GET_SIZE(out)) {
                status = 1;
                break;
            }
            uint64_t tsbits = get64(r + 16);
            double ts;
            memcpy(&ts, &tsbits, 8);
            PyObject *rec = record_type->tp_alloc(record_type, 4);
            if (rec == NULL)
                goto fail;
            PyObject *s = PyLong_FromUnsignedLongLong(seq);
            PyObject *t = PyFloat_FromDouble(ts);
            PyObject *k = PyBytes_FromStringAndSize((const char *)r + REC_HEAD, klen);
            PyObject *v = PyBytes_FromStringAndSize((const char *)r + REC_HEAD + klen + 4, size - klen);
            PyTuple_SET_ITEM(rec, 0, s);
            PyTuple_SET_ITEM(rec, 1, t);
            PyTuple_SET_ITEM(rec, 2, k);
            PyTuple_SET_ITEM(rec, 3, v);
            if (s == NULL || t == NULL || k == NULL || v == NULL || PyList_Append(out, rec) < 0) {
                Py_DECREF(rec);
                goto fail;
            }
            PyObject_GC_UnTrack(rec);  /* never in a cycle (see make_record) */
            Py_DECREF(rec);
            total += size;
            if (PyList_GET_SIZE(out) >= max_out) {
                at = stop;
                status = 1;
                break;
            }
        }
        at = stop;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nLi", at, total, status);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

/* columns(buf, from_seq, to_seq) -> (used, scanned, first_seq, status, count,
 *                                     seqs, stamps, key_offsets, keys, body_offsets, bodies)
 * The complete records at the start of buf as Arrow column buffers: the Spark reader's
 * fast path (patterns/zeps/spark/segments.py holds the numpy twin).  Every record walked
 * is CRC-checked and must follow the one before it in sequence; the records with
 * from_seq <= seq <= to_seq are gathered: seqs (int64), stamps (int64 microseconds),
 * and for keys and bodies int32 offsets (count + 1) and the values back to back.  Stops
 * at the first incomplete record (status 0), at a record past to_seq (1), at a corrupt
 * one (2: bad length, CRC or key length) or at a sequence break (3); ``used`` is the
 * offset where it stopped, ``scanned`` the records before it, ``first_seq`` the
 * sequence of the record at offset 0 (0 when none).  buf must be under 2 GiB. */
static PyObject *
columns(PyObject *self, PyObject *args)
{
    Py_buffer view;
    unsigned long long from_seq, to_seq;
    if (!PyArg_ParseTuple(args, "y*KK:columns", &view, &from_seq, &to_seq))
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, at = 0, scanned = 0, count = 0, kbytes = 0, bbytes = 0;
    Py_ssize_t lo = -1;                         /* offset of the first record gathered */
    uint64_t first = 0, expect = 0;
    int status = 0;
    PyObject *result = NULL;
    if (n >= ((Py_ssize_t)1 << 31)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "columns() takes a buffer under 2 GiB");
        return NULL;
    }
    /* pass 1: walk, check and measure */
    while (at + REC_HEAD <= n) {
        const unsigned char *r = b + at;
        uint32_t length = get32(r);
        if (length < MIN_LENGTH || length > MIN_LENGTH + MAX_RECORD) {
            status = 2;
            break;
        }
        Py_ssize_t stop = at + 8 + (Py_ssize_t)length;
        if (stop > n)
            break;
        if (crc32c(0, r + 8, length) != get32(r + 4)) {
            status = 2;
            break;
        }
        uint64_t seq = get64(r + 8);
        if (scanned == 0)
            first = seq;
        else if (seq != expect) {
            status = 3;
            break;
        }
        if (seq > to_seq) {
            status = 1;
            break;
        }
        uint32_t klen = get32(r + 24);
        if (klen > length - MIN_LENGTH || get32(r + REC_HEAD + klen) != length - MIN_LENGTH - klen) {
            status = 2;
            break;
        }
        if (seq >= from_seq) {
            if (lo < 0)
                lo = at;
            count++;
            kbytes += klen;
            bbytes += (Py_ssize_t)length - MIN_LENGTH - klen;
        }
        expect = seq + 1;
        scanned++;
        at = stop;
    }
    /* pass 2: fill the column buffers */
    PyObject *seqs = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *stamps = PyBytes_FromStringAndSize(NULL, count * 8);
    PyObject *koffs = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    PyObject *keys = PyBytes_FromStringAndSize(NULL, kbytes);
    PyObject *boffs = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    PyObject *bodies = PyBytes_FromStringAndSize(NULL, bbytes);
    if (seqs && stamps && koffs && keys && boffs && bodies) {
        int64_t *sq = (int64_t *)PyBytes_AS_STRING(seqs), *st = (int64_t *)PyBytes_AS_STRING(stamps);
        int32_t *ko = (int32_t *)PyBytes_AS_STRING(koffs), *bo = (int32_t *)PyBytes_AS_STRING(boffs);
        char *kd = PyBytes_AS_STRING(keys), *bd = PyBytes_AS_STRING(bodies);
        int32_t kat = 0, bat = 0;
        Py_ssize_t p = lo;
        ko[0] = bo[0] = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const unsigned char *r = b + p;
            uint32_t length = get32(r), klen = get32(r + 24), blen = length - MIN_LENGTH - klen;
            uint64_t tsbits = get64(r + 16);
            double ts;
            memcpy(&ts, &tsbits, 8);
            sq[i] = (int64_t)get64(r + 8);
            st[i] = (int64_t)(ts * 1e6);
            memcpy(kd + kat, r + REC_HEAD, klen);
            memcpy(bd + bat, r + REC_HEAD + klen + 4, blen);
            kat += (int32_t)klen;
            bat += (int32_t)blen;
            ko[i + 1] = kat;
            bo[i + 1] = bat;
            p += 8 + (Py_ssize_t)length;
        }
        result = Py_BuildValue("nnKinNNNNNN", at, scanned, (unsigned long long)first, status, count,
                               seqs, stamps, koffs, keys, boffs, bodies);
        seqs = stamps = koffs = keys = boffs = bodies = NULL;     /* stolen by N */
    }
    Py_XDECREF(seqs);
    Py_XDECREF(stamps);
    Py_XDECREF(koffs);
    Py_XDECREF(keys);
    Py_XDECREF(boffs);
    Py_XDECREF(bodies);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(Record): the record type decode() makes."},
    {"crc", crc, METH_VARARGS, "crc(data, value=0): CRC-32C of data, continuing from value."},
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame(buf, seq, timestamp, key, body) -> Record: append one framed record to the bytearray buf."},
    {"decode", decode, METH_VARARGS,
     "decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at) -> (at, total, status)."},
    {"columns", columns, METH_VARARGS,
     "columns(buf, from_seq, to_seq) -> (used, scanned, first_seq, status, count, seqs, stamps,"
     " key_offsets, keys, body_offsets, bodies): records as Arrow column buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_journal",
    "The journal's record framing and decoding in C (see actors/journal_codec.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__journal(void)
{
    crc_init();
#ifdef HAVE_HARD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc32c = crc_hard;
#endif
    return PyModule_Create(&module);
}
