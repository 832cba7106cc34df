/* zactors.actors._speedups: the kernel's per-message socket calls, in C.
 *
 * pyzmq spends more on its Python-facing layers than libzmq spends moving a
 * message: a copy=False receive (to read the "more" flag) costs ~1 us, a
 * getsockopt ~0.7 us, against ~0.25 us for a plain receive.  These functions
 * do the same libzmq calls without those layers, always non-blocking, with
 * the GIL held (every call returns in microseconds).
 *
 * They call the very libzmq that pyzmq loaded (bind() looks its symbols up
 * through pyzmq's own extension module), so sockets pass between the two
 * freely.  No libzmq header is needed to build: the few declarations below
 * are libzmq's stable ABI.  actors/speedups.py is the only caller; it holds
 * the pure-Python equivalents used when this module was not built.
 *
 * Every function takes (sock, handle): the pyzmq socket, checked not closed
 * (its public _closed flag) before the handle, its `underlying` address,
 * is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>

typedef struct {
    unsigned char _[64];
} __attribute__((aligned(sizeof(void *)))) zmq_msg_t;

#define ZMQ_DONTWAIT 1
#define ZMQ_SNDMORE 2
#define ZMQ_EVENTS 15
#define ZMQ_RCVMORE 13
/* Frames of a refused message one call drops at most (a bounded slice of the loop). */
#define SKIP_BUDGET 4096
/* Limits at or past this mean none (speedups.UNBOUNDED). */
#define UNBOUNDED ((Py_ssize_t)1 << 62)

static int (*msg_init)(zmq_msg_t *);
static int (*msg_recv)(zmq_msg_t *, void *, int);
static int (*msg_close)(zmq_msg_t *);
static void *(*msg_data)(zmq_msg_t *);
static size_t (*msg_size)(const zmq_msg_t *);
static int (*msg_more)(const zmq_msg_t *);
static int (*zsend)(void *, const void *, size_t, int);
static int (*zgetsockopt)(void *, int, void *, size_t *);
static int (*zerrno)(void);

static PyObject *error_factory; /* errno -> a zmq.ZMQError instance */
static PyObject *str_closed, *str_acquire, *str_release, *one;

/* Raise the ZMQError (or subclass) for err; always returns NULL. */
static PyObject *
raise_errno(int err)
{
    PyObject *exc;
    if (error_factory == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "zactors.actors._speedups: bind() was not called");
        return NULL;
    }
    exc = PyObject_CallFunction(error_factory, "i", err);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* The libzmq socket of (sock, handle), or NULL with ENOTSOCK raised when closed. */
static void *
socket_of(PyObject *sock, PyObject *handle)
{
    PyObject *closed;
    int is_closed;
    void *h;

    if (zerrno == NULL) {
        raise_errno(0);
        return NULL;
    }
    closed = PyObject_GetAttr(sock, str_closed);
    if (closed == NULL)
        return NULL;
    is_closed = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    if (is_closed < 0)
        return NULL;
    if (is_closed) {
        raise_errno(ENOTSOCK);
        return NULL;
    }
    h = PyLong_AsVoidPtr(handle);
    if (h == NULL && !PyErr_Occurred())
        raise_errno(ENOTSOCK);
    return h;
}

/* Where a receive stands, for what an interrupted call (EINTR) may do. */
enum position {
    FIRST,    /* nothing taken in this call yet: a signal handler may raise */
    BOUNDARY, /* whole messages taken already: stop here, keep them (the signal runs on return) */
    MIDDLE,   /* inside a message: finish it (the rest is there; the signal runs on return) */
};

/* Receive one frame into *frame (new reference); 1 with *more set, 0 on
 * EAGAIN (or EINTR at a BOUNDARY), -1 with an exception set.  A pending
 * signal is never swallowed: when not checked here, CPython runs its
 * handler as soon as control returns to the interpreter. */
static int
recv_frame(void *h, PyObject **frame, int *more, enum position where)
{
    zmq_msg_t msg;
    int err;

    for (;;) {
        msg_init(&msg);
        if (msg_recv(&msg, h, ZMQ_DONTWAIT) >= 0)
            break;
        err = zerrno();
        msg_close(&msg);
        if (err == EAGAIN)
            return 0;
        if (err != EINTR) {
            raise_errno(err);
            return -1;
        }
        if (where == BOUNDARY)
            return 0;
        if (where == FIRST && PyErr_CheckSignals() < 0)
            return -1;
    }
    *frame = PyBytes_FromStringAndSize((const char *)msg_data(&msg), (Py_ssize_t)msg_size(&msg));
    *more = msg_more(&msg);
    msg_close(&msg);
    return *frame == NULL ? -1 : 1;
}

/* Drop frames of the message under way, SKIP_BUDGET at most: 0 once its last
 * frame is gone, 1 with frames left (the next call goes on), -1 with an
 * exception set. */
static int
skip_frames(void *h)
{
    zmq_msg_t msg;
    int err, more, n;

    for (n = 0; n < SKIP_BUDGET; n++) {
        msg_init(&msg);
        if (msg_recv(&msg, h, ZMQ_DONTWAIT) < 0) {
            err = zerrno();
            msg_close(&msg);
            if (err == EINTR) /* inside a message: finish it; the signal runs on return */
                continue;
            raise_errno(err);
            return -1;
        }
        more = msg_more(&msg);
        msg_close(&msg);
        if (!more)
            return 0;
    }
    return 1;
}

PyDoc_STRVAR(recv_message_doc,
"recv_message(sock, handle[, max_frames, max_bytes]) -> list of bytes, None, or a bool\n\n"
"One whole message, its frames as bytes; None when none is waiting.  With\n"
"limits, a message of more frames or bytes in all is dropped instead, never\n"
"held: False when one is refused (count it), True when a call only went on\n"
"dropping the rest of one (at most 4096 frames a call).");

static PyObject *
recv_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h;
    PyObject *frames, *frame;
    int more = 0, rc, bounded = nargs == 4;
    Py_ssize_t max_frames = 0, max_bytes = 0, count = 1, total;

    if (nargs != 2 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "recv_message(sock, handle[, max_frames, max_bytes])");
        return NULL;
    }
    if ((h = socket_of(args[0], args[1])) == NULL)
        return NULL;
    if (bounded) {
        max_frames = PyLong_AsSsize_t(args[2]);
        if (max_frames == -1 && PyErr_Occurred())
            return NULL;
        max_bytes = PyLong_AsSsize_t(args[3]);
        if (max_bytes == -1 && PyErr_Occurred())
            return NULL;
    }
    if (bounded && max_frames >= UNBOUNDED && max_bytes >= UNBOUNDED)
        bounded = 0; /* a socket without limits (a pipe): no RCVMORE to read */
    if (bounded) {
        int rcvmore = 0;
        size_t size = sizeof(rcvmore);
        if (zgetsockopt(h, ZMQ_RCVMORE, &rcvmore, &size) < 0)
            return raise_errno(zerrno());
        if (rcvmore) { /* the rest of a message refused by an earlier call */
            rc = skip_frames(h);
            if (rc < 0)
                return NULL;
            Py_RETURN_TRUE;
        }
    }
    rc = recv_frame(h, &frame, &more, FIRST);
    if (rc <= 0) {
        if (rc == 0)
            Py_RETURN_NONE;
        return NULL;
    }
    total = PyBytes_GET_SIZE(frame);
    frames = PyList_New(1);
    if (frames == NULL) {
        Py_DECREF(frame);
        return NULL;
    }
    PyList_SET_ITEM(frames, 0, frame);
    while (more) {
        if (bounded && (count >= max_frames || total > max_bytes)) {
            Py_DECREF(frames);
            if (skip_frames(h) < 0)
                return NULL;
            Py_RETURN_FALSE;
        }
        /* The rest of a message is there already: libzmq delivers whole messages. */
        rc = recv_frame(h, &frame, &more, MIDDLE);
        if (rc <= 0) {
            if (rc == 0)
                raise_errno(EAGAIN);
            Py_DECREF(frames);
            return NULL;
        }
        count++;
        total += PyBytes_GET_SIZE(frame);
        rc = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (rc < 0) {
            Py_DECREF(frames);
            return NULL;
        }
    }
    if (bounded && total > max_bytes) {
        Py_DECREF(frames);
        Py_RETURN_FALSE;
    }
    return frames;
}

PyDoc_STRVAR(recv_singles_doc,
"recv_singles(sock, handle, limit) -> (messages, discarded)\n\n"
"Up to limit single-part messages as a list of bytes; multipart messages\n"
"are read whole and dropped, and counted in discarded.  Messages taken\n"
"before an error are returned; the error comes again on the next call.");

static PyObject *
recv_singles(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h;
    PyObject *messages, *frame;
    Py_ssize_t limit, taken = 0, discarded = 0;
    int more, rc;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "recv_singles(sock, handle, limit)");
        return NULL;
    }
    limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if ((h = socket_of(args[0], args[1])) == NULL)
        return NULL;
    messages = PyList_New(0);
    if (messages == NULL)
        return NULL;
    while (taken < limit) {
        rc = recv_frame(h, &frame, &more, taken == 0 && discarded == 0 ? FIRST : BOUNDARY);
        if (rc == 0)
            break;
        if (rc < 0)
            goto error;
        if (more) {
            Py_DECREF(frame);
            while (more) {
                rc = recv_frame(h, &frame, &more, MIDDLE);
                if (rc <= 0)
                    goto error;
                Py_DECREF(frame);
            }
            discarded++;
            continue;
        }
        rc = PyList_Append(messages, frame);
        Py_DECREF(frame);
        if (rc < 0)
            goto error;
        taken++;
    }
    return Py_BuildValue("(Nn)", messages, discarded);

error:
    if (taken == 0 && discarded == 0) {
        Py_DECREF(messages);
        return NULL;
    }
    if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
        /* never swallowed, though what was taken is lost with it */
        Py_DECREF(messages);
        return NULL;
    }
    /* Never lose what was taken: hand it over now; a socket error comes again. */
    PyErr_Clear();
    return Py_BuildValue("(Nn)", messages, discarded);
}

PyDoc_STRVAR(send_message_doc,
"send_message(sock, handle, frames)\n\n"
"Queue all frames (bytes-like, contiguous) as one message; zmq.Again, with\n"
"nothing queued, when the peer cannot take it now.  Every frame's buffer is\n"
"taken before the first is sent: a frame that is not bytes-like (TypeError)\n"
"or not contiguous (BufferError) fails the call with nothing sent.");

/* Frames per message held on the stack; longer messages take a heap array. */
#define STACK_FRAMES 16

/* Queue frames (a sequence) as one message on h: 0 when queued, 1 on EAGAIN
 * (nothing queued, no exception set), -1 with an exception set. */
static int
send_frames(void *h, PyObject *frames)
{
    PyObject *seq;
    Py_ssize_t i, n, taken = 0;
    Py_buffer stack_views[STACK_FRAMES], *views = stack_views;
    int flags, err, rc = -1;

    seq = PySequence_Fast(frames, "send_message: frames must be a sequence");
    if (seq == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > STACK_FRAMES && (views = PyMem_New(Py_buffer, n)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Take every frame's buffer first: one that fails after the first frame
     * went out would leave half a message in the socket, glued to the next. */
    for (taken = 0; taken < n; taken++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, taken);
        Py_buffer *view = &views[taken];
        if (PyBytes_CheckExact(item)) {
            view->buf = PyBytes_AS_STRING(item);
            view->len = PyBytes_GET_SIZE(item);
            view->obj = NULL;
        } else if (PyObject_GetBuffer(item, view, PyBUF_SIMPLE) < 0) {
            if (PyErr_ExceptionMatches(PyExc_TypeError) && !PyObject_CheckBuffer(item)) {
                PyErr_Format(PyExc_TypeError, "a frame must be bytes-like, not %.200s", Py_TYPE(item)->tp_name);
            }
            goto done;  /* a BufferError says why: not contiguous */
        }
    }
    for (i = 0; i < n; i++) {
        flags = ZMQ_DONTWAIT | (i < n - 1 ? ZMQ_SNDMORE : 0);
        for (;;) {
            if (zsend(h, views[i].buf, (size_t)views[i].len, flags) >= 0)
                break;
            err = zerrno();
            if (err == EAGAIN && i == 0) {  /* libzmq takes a message's later frames once it took the first */
                rc = 1;
                goto done;
            }
            if (err != EINTR) {
                raise_errno(err);
                goto done;
            }
            /* Interrupted.  Before the first frame nothing is queued: let a
             * signal handler raise now.  Within the message, finish it: the
             * signal stays pending and runs as soon as we return. */
            if (i == 0 && PyErr_CheckSignals() < 0)
                goto done;
        }
    }
    rc = 0;

done:
    for (i = 0; i < taken; i++) {
        if (views[i].obj != NULL)
            PyBuffer_Release(&views[i]);
    }
    if (views != stack_views)
        PyMem_Free(views);
    Py_DECREF(seq);
    return rc;
}

static PyObject *
send_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h;
    int rc;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_message(sock, handle, frames)");
        return NULL;
    }
    if ((h = socket_of(args[0], args[1])) == NULL)
        return NULL;
    rc = send_frames(h, args[2]);
    if (rc < 0)
        return NULL;
    if (rc == 1)
        return raise_errno(EAGAIN);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(send_locked_doc,
"send_locked(lock, sock, handle, frames, counts) -> bool\n\n"
"send_message holding lock (a _thread lock) if it is free now: True once the\n"
"message is queued (and counts[0], a list's item, incremented under the lock);\n"
"False, nothing queued, when another thread holds the lock or the peer cannot\n"
"take the message now.  The lock is taken, used and released without letting\n"
"another thread run in between (the GIL stays held), so threads sharing a socket\n"
"this way never wait for each other's lock.  Other errors raise, as send_message.");

static PyObject *
send_locked(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *got, *counts, *count, *exc_type, *exc_value, *exc_tb;
    void *h;
    int rc = -1;

    if (nargs != 5 || !PyList_CheckExact(args[4]) || PyList_GET_SIZE(args[4]) < 1) {
        PyErr_SetString(PyExc_TypeError, "send_locked(lock, sock, handle, frames, counts: a list)");
        return NULL;
    }
    got = PyObject_CallMethodOneArg(args[0], str_acquire, Py_False);
    if (got == NULL)
        return NULL;
    Py_DECREF(got);
    if (got != Py_True)
        Py_RETURN_FALSE;
    if ((h = socket_of(args[1], args[2])) != NULL)
        rc = send_frames(h, args[3]);
    if (rc == 0) {
        counts = args[4];
        count = PyNumber_Add(PyList_GET_ITEM(counts, 0), one);
        if (count == NULL)
            rc = -1;
        else
            PyList_SetItem(counts, 0, count);  /* steals count */
    }
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    got = PyObject_CallMethodNoArgs(args[0], str_release);
    if (got == NULL) {  /* cannot happen to a lock we hold; never hide it */
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        return NULL;
    }
    Py_DECREF(got);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    if (rc < 0)
        return NULL;
    return PyBool_FromLong(rc == 0);
}

PyDoc_STRVAR(send_each_doc,
"send_each(sock, handle, prefix, frames) -> int\n\n"
"Queue [prefix, frame] as one message for each bytes frame in the list frames,\n"
"in order, until one cannot be queued now (EAGAIN, an unroutable ROUTER peer,\n"
"any error): the count queued, the rest untouched for the caller to handle.\n"
"prefix and frames must be bytes.  An EINTR before the first message runs the\n"
"signal handlers (which may raise); after it, the batch goes on.");

static PyObject *
send_each(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h;
    PyObject *prefix, *list;
    Py_ssize_t i, n;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "send_each(sock, handle, prefix, frames)");
        return NULL;
    }
    if ((h = socket_of(args[0], args[1])) == NULL)
        return NULL;
    prefix = args[2];
    list = args[3];
    if (!PyBytes_CheckExact(prefix) || !PyList_CheckExact(list)) {
        PyErr_SetString(PyExc_TypeError, "send_each takes a bytes prefix and a list of bytes");
        return NULL;
    }
    n = PyList_GET_SIZE(list);
    for (i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(list, i))) {
            PyErr_SetString(PyExc_TypeError, "send_each: every frame must be bytes");
            return NULL;
        }
    }
    const char *pbuf = PyBytes_AS_STRING(prefix);
    size_t plen = (size_t)PyBytes_GET_SIZE(prefix);
    for (i = 0; i < n; i++) {
        PyObject *frame = PyList_GET_ITEM(list, i);
        int rc;
        for (;;) {     /* the prefix: nothing of this message is queued until it goes */
            rc = zsend(h, pbuf, plen, ZMQ_DONTWAIT | ZMQ_SNDMORE);
            if (rc >= 0)
                break;
            if (zerrno() != EINTR)
                return PyLong_FromSsize_t(i);
            if (i == 0 && PyErr_CheckSignals() < 0)
                return NULL;
        }
        for (;;) {     /* the frame: the message is under way, finish it */
            rc = zsend(h, PyBytes_AS_STRING(frame), (size_t)PyBytes_GET_SIZE(frame), ZMQ_DONTWAIT);
            if (rc >= 0 || zerrno() != EINTR)
                break;
        }
        if (rc < 0)    /* libzmq takes a message's later frames once it took the first */
            return PyLong_FromSsize_t(i);
    }
    return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(events_doc, "events(sock, handle) -> int\n\nThe socket's ZMQ_EVENTS (asked again after an EINTR, once the signal's handler ran).");

static PyObject *
events(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *h;
    int value = 0;
    size_t size = sizeof(value);

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "events(sock, handle)");
        return NULL;
    }
    if ((h = socket_of(args[0], args[1])) == NULL)
        return NULL;
    while (zgetsockopt(h, ZMQ_EVENTS, &value, &size) < 0) {
        int err = zerrno();
        if (err != EINTR)   /* a signal (SIGCHLD of a stopped child, say): run its handler, ask again */
            return raise_errno(err);
        if (PyErr_CheckSignals() < 0)
            return NULL;
        size = sizeof(value);
    }
    return PyLong_FromLong(value);
}

PyDoc_STRVAR(bind_doc,
"bind(path, error_factory)\n\n"
"Use the libzmq that the loaded library at path (pyzmq's extension module)\n"
"links; error_factory(errno) makes the exception to raise.");

static PyObject *
bind(PyObject *self, PyObject *args)
{
    const char *path;
    PyObject *factory;
    void *lib;

    if (!PyArg_ParseTuple(args, "sO:bind", &path, &factory))
        return NULL;
    lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        PyErr_Format(PyExc_ImportError, "%s is not loaded: %s", path, dlerror());
        return NULL;
    }
#define LOOKUP(var, name)                                                         \
    if ((*(void **)&var = dlsym(lib, name)) == NULL) {                            \
        PyErr_Format(PyExc_ImportError, "%s: no symbol %s", path, name);          \
        return NULL;                                                              \
    }
    LOOKUP(msg_init, "zmq_msg_init");
    LOOKUP(msg_recv, "zmq_msg_recv");
    LOOKUP(msg_close, "zmq_msg_close");
    LOOKUP(msg_data, "zmq_msg_data");
    LOOKUP(msg_size, "zmq_msg_size");
    LOOKUP(msg_more, "zmq_msg_more");
    LOOKUP(zsend, "zmq_send");
    LOOKUP(zgetsockopt, "zmq_getsockopt");
    LOOKUP(zerrno, "zmq_errno");
#undef LOOKUP
    /* The handle stays open: pyzmq keeps the library loaded anyway. */
    Py_INCREF(factory);
    Py_XSETREF(error_factory, factory);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"recv_message", (PyCFunction)(void (*)(void))recv_message, METH_FASTCALL, recv_message_doc},
    {"recv_singles", (PyCFunction)(void (*)(void))recv_singles, METH_FASTCALL, recv_singles_doc},
    {"send_message", (PyCFunction)(void (*)(void))send_message, METH_FASTCALL, send_message_doc},
    {"send_locked", (PyCFunction)(void (*)(void))send_locked, METH_FASTCALL, send_locked_doc},
    {"send_each", (PyCFunction)(void (*)(void))send_each, METH_FASTCALL, send_each_doc},
    {"events", (PyCFunction)(void (*)(void))events, METH_FASTCALL, events_doc},
    {"bind", bind, METH_VARARGS, bind_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "zactors' per-message libzmq calls in C (see actors/speedups.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    str_closed = PyUnicode_InternFromString("_closed");
    str_acquire = PyUnicode_InternFromString("acquire");
    str_release = PyUnicode_InternFromString("release");
    one = PyLong_FromLong(1);
    if (str_closed == NULL || str_acquire == NULL || str_release == NULL || one == NULL)
        return NULL;
    return PyModule_Create(&module);
}
