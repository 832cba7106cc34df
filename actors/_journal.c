/* zactors.actors._journal: the journal's per-record framing and decoding, in C.
 *
 * Journal.append spent ~2 us per 100-byte record in Python (three struct
 * packs, a join, a CRC call, two buffer appends); a replay decoded every
 * record with a dozen bytecodes.  frame() and decode() do the same work in
 * one call each; actors/journal_codec.py is the only caller and holds the
 * pure-Python twins (used when this module is not built, or with
 * ZACTORS_PURE_PYTHON=1), which behave identically.  Appender (below) is the
 * base class of the journal writer: its per-record state, and the common
 * append in one C call (the Python around frame() cost ~1 us a record).  The record layout is
 * the journal's file format (actors/journal/__init__.py), all little-endian:
 *
 *   u32 length | u32 crc32c | u64 seq | f64 timestamp | u32 klen_flags | key | u32 blen | body
 *   [| producer id | u64 producer seq | u8 producer id length]     (format 2: when flagged)
 *
 * klen_flags holds the key length in bits 0-30; bit 31 (format 2) says the record ends with
 * the producer trailer.  walk() is the one record walker: decode() and columns() both use it.
 *
 * CRC-32C uses the SSE4.2 instruction when the CPU has it, else a
 * slicing-by-8 table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <time.h>
#include <stdint.h>
#include <string.h>

#define REC_HEAD 28          /* length, crc, seq, timestamp, klen */
#define MIN_LENGTH 24        /* seq + timestamp + klen + blen: a record with empty key and body */
#define MAX_RECORD (1u << 30)
#define FLAG_PRODUCER 0x80000000u
#define KLEN_MASK 0x7fffffffu
#define MAX_PRODUCER 255

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

/* -- the one record walker ----------------------------------------------------------- */
typedef struct {
    Py_ssize_t stop;             /* offset after the record */
    uint64_t seq;
    double ts;
    const unsigned char *key, *body, *pid;
    uint32_t klen, blen, plen;   /* plen 0 and pid NULL: no producer */
    uint64_t pseq;
} rec_t;

/* Check the record at b + at (n bytes in b): 0 valid (*r filled), 1 incomplete (runs past n,
 * or no full head), 2 corrupt (bad length, CRC, or key/body/producer lengths).  The CRC is
 * checked (when the record ends past verify_at) before any field is believed: a flipped
 * sequence must not make a record look skippable and vanish without an error. */
static inline int
walk(const unsigned char *b, Py_ssize_t n, Py_ssize_t at, Py_ssize_t verify_at, rec_t *r)
{
    if (at + REC_HEAD > n)
        return 1;
    const unsigned char *p = b + at;
    uint32_t length = get32(p);
    if (length < MIN_LENGTH || length > MIN_LENGTH + MAX_RECORD + 9 + MAX_PRODUCER)
        return 2;
    Py_ssize_t stop = at + 8 + (Py_ssize_t)length;
    if (stop > n)
        return 1;
    if (stop > verify_at && crc32c(0, p + 8, length) != get32(p + 4))
        return 2;
    uint32_t kf = get32(p + 24), klen = kf & KLEN_MASK, room = length - MIN_LENGTH, tail = 0;
    if (kf & FLAG_PRODUCER) {
        if (room < 9)
            return 2;
        tail = 9 + (uint32_t)b[stop - 1];
        if (tail > room)
            return 2;
        r->plen = tail - 9;
        r->pid = b + stop - tail;
        r->pseq = get64(b + stop - 9);
    } else {
        r->plen = 0;
        r->pid = NULL;
        r->pseq = 0;
    }
    if (klen > room - tail || get32(p + REC_HEAD + klen) != room - tail - klen)
        return 2;
    uint64_t tsbits = get64(p + 16);
    r->stop = stop;
    r->seq = get64(p + 8);
    memcpy(&r->ts, &tsbits, 8);
    r->key = p + REC_HEAD;
    r->klen = klen;
    r->body = p + REC_HEAD + klen + 4;
    r->blen = room - tail - klen;
    return 0;
}

/* Record(seq, timestamp, key, body), plus (producer, pseq) when pid is not NULL; the
 * references to the items are new ones (seq, key, body, pid and pseq are stolen). */
static PyObject *
new_record(PyObject *seq, double ts, PyObject *key, PyObject *body, PyObject *pid, PyObject *pseq)
{
    PyObject *rec, *t = PyFloat_FromDouble(ts);
    Py_ssize_t size = pid == NULL ? 4 : 6;
    if (t == NULL || seq == NULL || key == NULL || body == NULL || (size == 6 && pseq == NULL)
        || (rec = record_type->tp_alloc(record_type, size)) == NULL) {
        Py_XDECREF(t);
        Py_XDECREF(seq);
        Py_XDECREF(key);
        Py_XDECREF(body);
        Py_XDECREF(pid);
        Py_XDECREF(pseq);
        return NULL;
    }
    PyTuple_SET_ITEM(rec, 0, seq);
    PyTuple_SET_ITEM(rec, 1, t);
    PyTuple_SET_ITEM(rec, 2, key);
    PyTuple_SET_ITEM(rec, 3, body);
    if (size == 6) {
        PyTuple_SET_ITEM(rec, 4, pid);
        PyTuple_SET_ITEM(rec, 5, pseq);
    }
    /* ints, a float and bytes: it can never be part of a cycle, so the cyclic GC need not
     * track it (CPython untracks such tuples itself, but only once a collection visits them) */
    PyObject_GC_UnTrack(rec);
    return rec;
}

/* Append one framed record to the bytearray buf (with the producer trailer when pid is not
 * NULL: bytes of at most 255).  Key and body are bytes of at most MAX_RECORD together. */
static int
frame_into(PyObject *buf, uint64_t seq, double ts, PyObject *key, PyObject *body, PyObject *pid, uint64_t pseq)
{
    Py_ssize_t klen = PyBytes_GET_SIZE(key), blen = PyBytes_GET_SIZE(body);
    Py_ssize_t tail = pid == NULL ? 0 : 9 + PyBytes_GET_SIZE(pid);
    Py_ssize_t length = MIN_LENGTH + klen + blen + tail, old = PyByteArray_GET_SIZE(buf);
    unsigned char *p;
    if (PyByteArray_Resize(buf, old + 8 + length) < 0)
        return -1;
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
    put32(p + 24, (uint32_t)klen | (pid != NULL ? FLAG_PRODUCER : 0));
    memcpy(p + 28, PyBytes_AS_STRING(key), klen);
    put32(p + 28 + klen, (uint32_t)blen);
    memcpy(p + 32 + klen, PyBytes_AS_STRING(body), blen);
    if (pid != NULL) {
        unsigned char *t = p + 32 + klen + blen;
        Py_ssize_t plen = PyBytes_GET_SIZE(pid);
        memcpy(t, PyBytes_AS_STRING(pid), plen);
        put64(t + plen, pseq);
        t[plen + 8] = (unsigned char)plen;
    }
    put32(p, (uint32_t)length);
    put32(p + 4, crc32c(0, p + 8, (size_t)length));
    return 0;
}

/* frame(buf, seq, timestamp, key, body[, producer, pseq]) -> Record: append one framed record
 * to the bytearray buf (with the producer trailer when producer, bytes of at most 255, is
 * given).  The Record returned is always (seq, timestamp, key, body): the tail cache's. */
static PyObject *
frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *buf, *key, *body, *pid = NULL;
    unsigned long long seq, pseq = 0;
    double ts;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zactors.actors._journal: bind() was not called");
        return NULL;
    }
    if (nargs != 5 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "frame(buf, seq, timestamp, key, body[, producer, pseq])");
        return NULL;
    }
    buf = args[0];
    key = args[3];
    body = args[4];
    if (!PyByteArray_CheckExact(buf) || !PyBytes_CheckExact(key) || !PyBytes_CheckExact(body)
        || !PyLong_CheckExact(args[1]) || !PyFloat_CheckExact(args[2])
        || (nargs == 7 && (!PyBytes_CheckExact(args[5]) || !PyLong_CheckExact(args[6])))) {
        PyErr_SetString(PyExc_TypeError, "frame() takes a bytearray, an int, a float, then bytes key and body"
                                         " (and bytes producer, int pseq)");
        return NULL;
    }
    seq = PyLong_AsUnsignedLongLong(args[1]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    ts = PyFloat_AsDouble(args[2]);
    if (ts == -1.0 && PyErr_Occurred())
        return NULL;
    if (nargs == 7) {
        pid = args[5];
        if (PyBytes_GET_SIZE(pid) > MAX_PRODUCER) {
            PyErr_SetString(PyExc_ValueError, "journal producer id longer than 255 bytes");
            return NULL;
        }
        pseq = PyLong_AsUnsignedLongLong(args[6]);
        if (pseq == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    if ((size_t)PyBytes_GET_SIZE(key) + (size_t)PyBytes_GET_SIZE(body) > MAX_RECORD) {
        PyErr_SetString(PyExc_ValueError, "journal record too large");
        return NULL;
    }
    if (frame_into(buf, seq, ts, key, body, pid, pseq) < 0)
        return NULL;
    Py_INCREF(args[1]);
    Py_INCREF(key);
    Py_INCREF(body);
    return new_record(args[1], ts, key, body, NULL, NULL);
}

/* decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at[, producers]) -> (at, total, status)
 * See journal_codec.py's py_decode: the two behave identically. */
static PyObject *
decode(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t at, max_out, verify_at;
    long long budget, total = 0;
    unsigned long long from_seq, to_seq;
    PyObject *out;
    int status = 0, producers = 0, w;
    rec_t r;
    if (!PyArg_ParseTuple(args, "y*nO!KKnLn|p:decode", &view, &at, &PyList_Type, &out, &from_seq, &to_seq,
                          &max_out, &budget, &verify_at, &producers))
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
    while ((w = walk(b, n, at, verify_at, &r)) == 0) {
        if (r.seq >= from_seq) {
            if (r.seq > to_seq) {
                status = 1;
                break;
            }
            Py_ssize_t size = (Py_ssize_t)r.klen + r.blen;
            if (total + size > budget && PyList_GET_SIZE(out)) {
                status = 1;
                break;
            }
            PyObject *pid = NULL, *pseq = NULL;
            if (producers && r.pid != NULL) {
                pid = PyBytes_FromStringAndSize((const char *)r.pid, r.plen);
                pseq = PyLong_FromUnsignedLongLong(r.pseq);
                if (pid == NULL) {
                    Py_XDECREF(pseq);
                    goto fail;
                }
            }
            PyObject *rec = new_record(PyLong_FromUnsignedLongLong(r.seq), r.ts,
                                       PyBytes_FromStringAndSize((const char *)r.key, r.klen),
                                       PyBytes_FromStringAndSize((const char *)r.body, r.blen), pid, pseq);
            if (rec == NULL)
                goto fail;
            if (PyList_Append(out, rec) < 0) {
                Py_DECREF(rec);
                goto fail;
            }
            Py_DECREF(rec);
            total += size;
            if (PyList_GET_SIZE(out) >= max_out) {
                at = r.stop;
                status = 1;
                break;
            }
        }
        at = r.stop;
    }
    if (w == 2)
        status = 2;
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
 * is checked by walk() and must follow the one before it in sequence; the records with
 * from_seq <= seq <= to_seq are gathered: seqs (int64), stamps (int64 microseconds),
 * and for keys and bodies int32 offsets (count + 1) and the values back to back (a
 * producer trailer is not part of the body).  Stops at the first incomplete record
 * (status 0), at a record past to_seq (1), at a corrupt one (2: bad length, CRC or
 * key/body lengths) or at a sequence break (3); ``used`` is the offset where it stopped,
 * ``scanned`` the records before it, ``first_seq`` the sequence of the record at offset 0
 * (0 when none).  buf must be under 2 GiB. */
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
    int status = 0, w;
    rec_t r;
    PyObject *result = NULL;
    if (n >= ((Py_ssize_t)1 << 31)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "columns() takes a buffer under 2 GiB");
        return NULL;
    }
    /* pass 1: walk, check and measure */
    while ((w = walk(b, n, at, 0, &r)) == 0) {
        if (scanned == 0)
            first = r.seq;
        else if (r.seq != expect) {
            status = 3;
            break;
        }
        if (r.seq > to_seq) {
            status = 1;
            break;
        }
        if (r.seq >= from_seq) {
            if (lo < 0)
                lo = at;
            count++;
            kbytes += r.klen;
            bbytes += r.blen;
        }
        expect = r.seq + 1;
        scanned++;
        at = r.stop;
    }
    if (w == 2)
        status = 2;
    /* pass 2: fill the column buffers (the records gathered were checked in pass 1) */
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
            walk(b, n, p, n, &r);               /* verify_at n: its CRC was checked in pass 1 */
            sq[i] = (int64_t)r.seq;
            st[i] = (int64_t)(r.ts * 1e6);
            memcpy(kd + kat, r.key, r.klen);
            memcpy(bd + bat, r.body, r.blen);
            kat += (int32_t)r.klen;
            bat += (int32_t)r.blen;
            ko[i + 1] = kat;
            bo[i + 1] = bat;
            p = r.stop;
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

/* -- Lock: the writer's lock, which Appender.append_record takes without a Python call ----------
 *
 * A plain non-reentrant lock (acquire, release, locked, a context manager), as threading.Lock
 * but without its timeout and its interruption by signals: the writer holds it for microseconds,
 * never across I/O.  Taking a threading.Lock from C costs two Python calls (~650 instructions);
 * this costs two C calls.  A blocked acquire releases the GIL while it waits. */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char locked;
} Lock;

static PyTypeObject *lock_type;

static void
lock_take(Lock *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    self->locked = 1;
}

static void
lock_give(Lock *self)
{
    self->locked = 0;
    PyThread_release_lock(self->lock);
}

static PyObject *
lock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Lock *self;
    if ((args != NULL && PyTuple_GET_SIZE(args)) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    self = (Lock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void
lock_dealloc(Lock *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->lock != NULL) {
        if (self->locked)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
lock_acquire(Lock *self, PyObject *unused)
{
    lock_take(self);
    Py_RETURN_TRUE;
}

static PyObject *
lock_release(Lock *self, PyObject *unused)
{
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    lock_give(self);
    Py_RETURN_NONE;
}

static PyObject *
lock_exit(Lock *self, PyObject *const *args, Py_ssize_t nargs)
{
    return lock_release(self, NULL);
}

static PyObject *
lock_locked(Lock *self, PyObject *unused)
{
    return PyBool_FromLong(self->locked);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)lock_acquire, METH_NOARGS, "acquire() -> True: wait for the lock (the GIL released)."},
    {"release", (PyCFunction)lock_release, METH_NOARGS, "release(): RuntimeError when not held."},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "locked() -> bool."},
    {"__enter__", (PyCFunction)lock_acquire, METH_NOARGS, "acquire()."},
    {"__exit__", (PyCFunction)(void (*)(void))lock_exit, METH_FASTCALL, "release()."},
    {NULL},
};

static PyType_Slot lock_slots[] = {
    {Py_tp_doc, "The journal writer's lock: threading.Lock without timeouts, cheap to take from C."},
    {Py_tp_new, lock_new},
    {Py_tp_dealloc, lock_dealloc},
    {Py_tp_methods, lock_methods},
    {0, NULL},
};

static PyType_Spec lock_spec = {
    "zactors.actors._journal.Lock", sizeof(Lock), 0, Py_TPFLAGS_DEFAULT, lock_slots,
};

/* -- Appender: the writer's per-record state, and its append in one call ---------------------
 *
 * The base class of the writer (actors/journal/writer.py: class Journal(Appender)).  It holds
 * what an append reads and changes, as the writer's own attributes (members below, the same
 * names the pure-Python twin, journal_codec.PyAppender, declares as slots), so that the writer's
 * Python code (segment rolls, write(), recovery, reads) keeps using them as before.
 * append_record() does the common case in C under the writer's lock: bytes key and body, no
 * producer, a float timestamp or none, room in the segment and the buffer, no refusal.  Anything
 * else calls the writer's general path, self._append_record(...) (Python, the twin), with the
 * same arguments: one behaviour, the bytes on disk identical. */
#define INDEX_INTERVAL 4096     /* format.INDEX_INTERVAL: bytes of segment between index entries */
#define MEM_OVERHEAD 160        /* writer._MEM_OVERHEAD: bytes counted per cached Record */
#define OVERHEAD 32             /* framing bytes of a record without a producer */

typedef struct {
    PyObject_HEAD
    long long next_seq;
    double last_ts;
    Py_ssize_t tail_end, pending_bytes, segment_bytes, buffer_bytes, index_at, cache_bytes, evict_at;
    PyObject *refuse;           /* why appends are refused (an exception), or None */
    PyObject *pending;          /* [[segment, bytearray, last_seq], ...]: appends go to the last */
    PyObject *cache;            /* the tail cache: [Record, ...] */
    Lock *lock;                 /* the writer's _lock */
} Appender;

static PyObject *str_append_record, *str_evict, *str_idx_seq, *str_idx_ts, *str_idx_off;

static int
appender_traverse(Appender *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->refuse);
    Py_VISIT(self->pending);
    Py_VISIT(self->cache);
    Py_VISIT(self->lock);
    return 0;
}

static int
appender_clear(Appender *self)
{
    Py_CLEAR(self->refuse);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->cache);
    Py_CLEAR(self->lock);
    return 0;
}

static void
appender_dealloc(Appender *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
appender_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Appender *self = (Appender *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = (Lock *)PyObject_CallNoArgs((PyObject *)lock_type);
    if (self->lock == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *
appender_get_lock(Appender *self, void *closure)
{
    PyObject *lock = self->lock != NULL ? (PyObject *)self->lock : Py_None;
    Py_INCREF(lock);
    return lock;
}

/* time.time(), computed as CPython computes it (the same float) */
static int
now(double *out)
{
    struct timespec t;
    if (clock_gettime(CLOCK_REALTIME, &t) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    long long ns = (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
    *out = ns % 1000000000LL == 0 ? (double)(ns / 1000000000LL) : (double)ns / 1e9;
    return 0;
}

/* self._append_record(*args, **kwargs): the writer's general path */
static PyObject *
general(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *stack[8];
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    if (total > 7) {
        PyErr_SetString(PyExc_TypeError, "append_record() takes at most 4 arguments");
        return NULL;
    }
    stack[0] = (PyObject *)self;
    memcpy(stack + 1, args, total * sizeof(PyObject *));
    return PyObject_VectorcallMethod(str_append_record, stack, nargs + 1, kwnames);
}

/* seg.<name>.append(value), value a new reference (or NULL: an error) */
static int
append_index(PyObject *seg, PyObject *name, PyObject *value)
{
    PyObject *list = value == NULL ? NULL : PyObject_GetAttr(seg, name);
    int rc = -1;
    if (list != NULL) {
        if (PyList_Check(list))
            rc = PyList_Append(list, value);
        else
            PyErr_Format(PyExc_TypeError, "segment %U is not a list", name);
    }
    Py_XDECREF(list);
    Py_XDECREF(value);
    return rc;
}

/* The locked part of the fast path: 1 when the general path must do it (nothing changed), 0 done
 * (*out the Record), -1 an error. */
static int
append_locked(Appender *self, PyObject *key, PyObject *body, double ts, PyObject **out)
{
    PyObject *chunk, *seqobj, *rec;
    Py_ssize_t klen = PyBytes_GET_SIZE(key), blen = PyBytes_GET_SIZE(body);
    Py_ssize_t size = klen + blen + OVERHEAD, pos = self->tail_end;
    if ((self->refuse != NULL && self->refuse != Py_None) || self->pending == NULL || self->cache == NULL
        || !PyList_CheckExact(self->pending) || PyList_GET_SIZE(self->pending) < 1 || !PyList_CheckExact(self->cache)
        || pos + size > self->segment_bytes || self->pending_bytes + size > self->buffer_bytes)
        return 1;
    chunk = PyList_GET_ITEM(self->pending, PyList_GET_SIZE(self->pending) - 1);
    if (!PyList_CheckExact(chunk) || PyList_GET_SIZE(chunk) != 3 || !PyByteArray_CheckExact(PyList_GET_ITEM(chunk, 1)))
        return 1;
    if (ts < self->last_ts)
        ts = self->last_ts;
    long long seq = self->next_seq;
    seqobj = PyLong_FromLongLong(seq);
    if (seqobj == NULL)
        return -1;
    Py_INCREF(seqobj);
    Py_INCREF(key);
    Py_INCREF(body);
    rec = new_record(seqobj, ts, key, body, NULL, NULL);
    if (rec == NULL) {
        Py_DECREF(seqobj);
        return -1;
    }
    if (frame_into(PyList_GET_ITEM(chunk, 1), (uint64_t)seq, ts, key, body, NULL, 0) < 0) {
        Py_DECREF(seqobj);
        Py_DECREF(rec);
        return -1;
    }
    PyList_SetItem(chunk, 2, seqobj);           /* steals seqobj */
    self->tail_end = pos + size;                /* the record is in the buffer: the state follows now */
    self->pending_bytes += size;
    self->next_seq = seq + 1;
    self->last_ts = ts;
    if (pos >= self->index_at) {                /* a sparse index entry every INDEX_INTERVAL bytes */
        PyObject *seg = PyList_GET_ITEM(chunk, 0);
        Py_INCREF(seqobj);
        if (append_index(seg, str_idx_seq, seqobj) < 0 || append_index(seg, str_idx_ts, PyFloat_FromDouble(ts)) < 0
            || append_index(seg, str_idx_off, PyLong_FromSsize_t(pos)) < 0) {
            Py_DECREF(rec);
            return -1;
        }
        self->index_at = pos + INDEX_INTERVAL;
    }
    if (PyList_Append(self->cache, rec) < 0) {
        Py_DECREF(rec);
        return -1;
    }
    self->cache_bytes += klen + blen + MEM_OVERHEAD;
    if (self->cache_bytes > self->evict_at) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, str_evict);
        if (r == NULL) {
            Py_DECREF(rec);
            return -1;
        }
        Py_DECREF(r);
    }
    *out = rec;
    return 0;
}

/* append_record(key, body, timestamp=None, producer=None) -> Record */
static PyObject *
appender_append_record(Appender *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *key, *body, *rec = NULL;
    double ts;
    int rc;
    if (kwnames != NULL || nargs < 2 || nargs > 4 || (nargs == 4 && args[3] != Py_None) || self->lock == NULL
        || record_type == NULL)
        return general(self, args, nargs, kwnames);
    key = args[0];
    body = args[1];
    if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(body)
        || (size_t)PyBytes_GET_SIZE(key) + (size_t)PyBytes_GET_SIZE(body) > MAX_RECORD)
        return general(self, args, nargs, kwnames);
    if (nargs >= 3 && args[2] != Py_None) {
        if (!PyFloat_CheckExact(args[2]) || !isfinite(PyFloat_AS_DOUBLE(args[2])))
            return general(self, args, nargs, kwnames);
        ts = PyFloat_AS_DOUBLE(args[2]);
    }
    else if (now(&ts) < 0)
        return NULL;
    lock_take(self->lock);
    rc = append_locked(self, key, body, ts, &rec);
    lock_give(self->lock);
    if (rc < 0)
        return NULL;
    if (rc > 0)
        return general(self, args, nargs, kwnames);
    return rec;
}

static PyMemberDef appender_members[] = {
    {"_next_seq", T_LONGLONG, offsetof(Appender, next_seq), 0, "the next sequence to append"},
    {"_last_ts", T_DOUBLE, offsetof(Appender, last_ts), 0, "the last record's timestamp"},
    {"_tail_end", T_PYSSIZET, offsetof(Appender, tail_end), 0, "the offset of the next record in its segment"},
    {"_pending_bytes", T_PYSSIZET, offsetof(Appender, pending_bytes), 0, "bytes appended, not yet written"},
    {"segment_bytes", T_PYSSIZET, offsetof(Appender, segment_bytes), 0, "roll to a new segment past this size"},
    {"buffer_bytes", T_PYSSIZET, offsetof(Appender, buffer_bytes), 0, "unwritten bytes at which appends are refused"},
    {"_index_at", T_PYSSIZET, offsetof(Appender, index_at), 0, "the offset from which the next index entry is due"},
    {"_cache_bytes", T_PYSSIZET, offsetof(Appender, cache_bytes), 0, "bytes counted for the tail cache"},
    {"_evict_at", T_PYSSIZET, offsetof(Appender, evict_at), 0, "cache bytes past which _evict() runs"},
    {"_refuse", T_OBJECT, offsetof(Appender, refuse), 0, "why appends are refused, or None"},
    {"_pending", T_OBJECT, offsetof(Appender, pending), 0, "the unwritten chunks [[segment, bytearray, last_seq]]"},
    {"_cache", T_OBJECT, offsetof(Appender, cache), 0, "the tail cache"},
    {NULL},
};

static PyGetSetDef appender_getset[] = {
    {"_lock", (getter)appender_get_lock, NULL, "the writer's lock (a Lock)", NULL},
    {NULL},
};

static PyMethodDef appender_methods[] = {
    {"append_record", (PyCFunction)(void (*)(void))appender_append_record, METH_FASTCALL | METH_KEYWORDS,
     "append_record(key, body, timestamp=None, producer=None) -> Record (see the writer's _append_record)."},
    {NULL},
};

static PyType_Slot appender_slots[] = {
    {Py_tp_doc, "The journal writer's per-record state and its append (the base of journal.Journal)."},
    {Py_tp_new, appender_new},
    {Py_tp_dealloc, appender_dealloc},
    {Py_tp_traverse, appender_traverse},
    {Py_tp_clear, appender_clear},
    {Py_tp_members, appender_members},
    {Py_tp_getset, appender_getset},
    {Py_tp_methods, appender_methods},
    {0, NULL},
};

static PyType_Spec appender_spec = {
    "zactors.actors._journal.Appender", sizeof(Appender), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, appender_slots,
};

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(Record): the record type decode() makes."},
    {"crc", crc, METH_VARARGS, "crc(data, value=0): CRC-32C of data, continuing from value."},
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame(buf, seq, timestamp, key, body[, producer, pseq]) -> Record: append one framed record to buf."},
    {"decode", decode, METH_VARARGS,
     "decode(buf, at, out, from_seq, to_seq, max_out, budget, verify_at[, producers]) -> (at, total, status)."},
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
    PyObject *m = PyModule_Create(&module), *type;
    if (m == NULL)
        return NULL;
    if ((str_append_record = PyUnicode_InternFromString("_append_record")) == NULL
        || (str_evict = PyUnicode_InternFromString("_evict")) == NULL
        || (str_idx_seq = PyUnicode_InternFromString("idx_seq")) == NULL
        || (str_idx_ts = PyUnicode_InternFromString("idx_ts")) == NULL
        || (str_idx_off = PyUnicode_InternFromString("idx_off")) == NULL
        || (lock_type = (PyTypeObject *)PyType_FromSpec(&lock_spec)) == NULL
        || PyModule_AddObject(m, "Lock", Py_NewRef((PyObject *)lock_type)) < 0
        || (type = PyType_FromSpec(&appender_spec)) == NULL || PyModule_AddObject(m, "Appender", type) < 0
        || PyModule_AddIntConstant(m, "INDEX_INTERVAL", INDEX_INTERVAL) < 0
        || PyModule_AddIntConstant(m, "MEM_OVERHEAD", MEM_OVERHEAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
