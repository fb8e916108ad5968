/* Kafka record batches (magic v2) decoded straight into Arrow column buffers.
 *
 * The columnar range reader (freshet.client.columnar) fetches record sets itself and hands their bytes
 * here: a Columns object appends each record's key, value, offset, timestamp, timestamp type and headers
 * to growing buffers laid out as Arrow's binary / int64 / list<struct<string, binary>> arrays, and
 * ``take()`` gives those buffers to Python, which wraps them as pyarrow arrays without touching a
 * record. No Python object is made per record.
 *
 * Python keeps what needs a decision per batch (decompression, control batches, aborted transactions);
 * ``add_batches`` runs over the plain batches (uncompressed, not transactional) of a record set in one
 * call and stops at the first batch that needs Python, ``add_records`` takes the records section of one
 * batch Python has prepared. Every length is checked against the buffer: a malformed record set raises
 * ValueError and leaves the columns as they were before the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len, cap;
} growbuf;

static int gb_reserve(growbuf *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int gb_put(growbuf *b, const void *src, size_t n) {
    if (gb_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void gb_free(growbuf *b) {
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* A binary (or string) column: int32 offsets, data, and a validity bitmap. */
typedef struct {
    growbuf offsets, data, validity;
    Py_ssize_t count, nulls;
} bincol;

static int bc_init(bincol *c) {
    int32_t zero = 0;
    c->count = c->nulls = 0;
    return gb_put(&c->offsets, &zero, 4);
}

static int bc_append(bincol *c, const char *src, int64_t n) {
    /* n < 0: null */
    if ((c->count & 7) == 0) {
        char z = 0;
        if (gb_put(&c->validity, &z, 1) < 0)
            return -1;
    }
    if (n >= 0) {
        if (c->data.len + (size_t)n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "column data over 2 GiB");
            return -1;
        }
        if (gb_put(&c->data, src, (size_t)n) < 0)
            return -1;
        c->validity.data[c->count >> 3] |= (char)(1 << (c->count & 7));
    } else {
        c->nulls++;
    }
    int32_t end = (int32_t)c->data.len;
    if (gb_put(&c->offsets, &end, 4) < 0)
        return -1;
    c->count++;
    return 0;
}

/* Undo appends back to ``count`` entries (a malformed record set leaves nothing half-added). */
static void bc_truncate(bincol *c, Py_ssize_t count) {
    if (count >= c->count)
        return;
    int32_t end = ((int32_t *)c->offsets.data)[count];
    c->data.len = (size_t)end;
    c->offsets.len = (size_t)(count + 1) * 4;
    for (Py_ssize_t i = count; i < c->count; i++)
        if (!(c->validity.data[i >> 3] & (1 << (i & 7))))
            c->nulls--;
    c->validity.len = (size_t)((count + 7) >> 3);
    if (count & 7)
        c->validity.data[count >> 3] &= (char)((1 << (count & 7)) - 1);
    c->count = count;
}

static void bc_free(bincol *c) {
    gb_free(&c->offsets);
    gb_free(&c->data);
    gb_free(&c->validity);
}

typedef struct {
    PyObject_HEAD
    int with_headers;
    Py_ssize_t count;
    bincol keys, values, header_keys, header_values;
    growbuf offsets, timestamps, timestamp_types, header_offsets; /* int64, int64 (us), int32, int32 */
} Columns;

static void columns_free(Columns *self) {
    bc_free(&self->keys);
    bc_free(&self->values);
    bc_free(&self->header_keys);
    bc_free(&self->header_values);
    gb_free(&self->offsets);
    gb_free(&self->timestamps);
    gb_free(&self->timestamp_types);
    gb_free(&self->header_offsets);
}

static int columns_reset(Columns *self) {
    int32_t zero = 0;
    columns_free(self);
    self->count = 0;
    if (bc_init(&self->keys) < 0 || bc_init(&self->values) < 0 || bc_init(&self->header_keys) < 0 ||
        bc_init(&self->header_values) < 0 || gb_put(&self->header_offsets, &zero, 4) < 0)
        return -1;
    return 0;
}

static void columns_truncate(Columns *self, Py_ssize_t count, Py_ssize_t header_count) {
    bc_truncate(&self->keys, count);
    bc_truncate(&self->values, count);
    bc_truncate(&self->header_keys, header_count);
    bc_truncate(&self->header_values, header_count);
    self->offsets.len = (size_t)count * 8;
    self->timestamps.len = (size_t)count * 8;
    self->timestamp_types.len = (size_t)count * 4;
    self->header_offsets.len = (size_t)(count + 1) * 4;
    self->count = count;
}

static int Columns_init(Columns *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"headers", NULL};
    int with_headers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &with_headers))
        return -1;
    self->with_headers = with_headers;
    return columns_reset(self);
}

static void Columns_dealloc(Columns *self) {
    columns_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Kafka's zigzag varint (up to 64 bits). 0 on success, -1 when the buffer ends or it is too long. */
static inline int read_varlong(const unsigned char **p, const unsigned char *end, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    while (1) {
        if (*p >= end || shift > 63)
            return -1;
        unsigned char b = *(*p)++;
        result |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
    return 0;
}

/* A length-prefixed field (key, value, header key or value): where it starts and its length, -1 for null
 * where null is allowed. 0 on success, -1 when the length is bad or runs past ``end``. */
static inline int read_field(const unsigned char **p, const unsigned char *end, int nullable,
                             const unsigned char **start, int64_t *n) {
    if (read_varlong(p, end, n) < 0 || *n < (nullable ? -1 : 0) || *n > end - *p)
        return -1;
    *start = *p;
    if (*n > 0)
        *p += *n;
    return 0;
}

static int corrupt(const char *what, int64_t base_offset) {
    PyErr_Format(PyExc_ValueError, "corrupt record batch at offset %lld: %s", (long long)base_offset, what);
    return -1;
}

/* Append the records of one batch's (uncompressed) records section whose offsets fall in [lo, hi).
 * Returns the number appended, or -1 with an exception set (nothing appended then). */
static Py_ssize_t decode_records(Columns *self, const unsigned char *p, const unsigned char *end, int32_t count,
                                 int64_t base_offset, int64_t base_ts, int64_t log_append_ts, int64_t lo, int64_t hi) {
    Py_ssize_t start_count = self->count, start_headers = self->header_keys.count;
    int32_t ts_type = log_append_ts >= 0 ? 1 : 0;
    int64_t previous_delta = -1;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, nheaders;
        if (read_varlong(&p, end, &length) < 0 || length < 0 || length > end - p) {
            corrupt("record length runs past the batch", base_offset);
            goto fail;
        }
        const unsigned char *rec_end = p + length;
        if (length < 1) {
            corrupt("empty record", base_offset);
            goto fail;
        }
        p++; /* attributes */
        const unsigned char *key, *value;
        if (read_varlong(&p, rec_end, &ts_delta) < 0 || read_varlong(&p, rec_end, &off_delta) < 0 ||
            read_field(&p, rec_end, 1, &key, &klen) < 0 || read_field(&p, rec_end, 1, &value, &vlen) < 0) {
            corrupt("bad record fields", base_offset);
            goto fail;
        }
        if (read_varlong(&p, rec_end, &nheaders) < 0 || nheaders < 0 || nheaders > rec_end - p) {
            corrupt("bad header count", base_offset);
            goto fail;
        }
        if (off_delta <= previous_delta) {
            corrupt("offsets do not rise within the batch", base_offset);
            goto fail;
        }
        previous_delta = off_delta;
        int64_t offset = base_offset + off_delta;
        int keep = offset >= lo && offset < hi;
        for (int64_t h = 0; h < nheaders; h++) {
            int64_t hklen, hvlen;
            const unsigned char *hk, *hv;
            if (read_field(&p, rec_end, 0, &hk, &hklen) < 0 || read_field(&p, rec_end, 1, &hv, &hvlen) < 0) {
                corrupt("bad record header", base_offset);
                goto fail;
            }
            if (keep && self->with_headers &&
                (bc_append(&self->header_keys, (const char *)hk, hklen) < 0 ||
                 bc_append(&self->header_values, (const char *)hv, hvlen) < 0))
                goto fail;
        }
        if (p != rec_end) {
            corrupt("record length does not match its fields", base_offset);
            goto fail;
        }
        if (offset >= hi)
            break; /* offsets rise within a batch: nothing further is wanted */
        if (!keep)
            continue;
        int64_t ts_us = (log_append_ts >= 0 ? log_append_ts : base_ts + ts_delta) * 1000;
        int32_t nh = (int32_t)self->header_keys.count;
        if (bc_append(&self->keys, (const char *)key, klen) < 0 ||
            bc_append(&self->values, (const char *)value, vlen) < 0 || gb_put(&self->offsets, &offset, 8) < 0 ||
            gb_put(&self->timestamps, &ts_us, 8) < 0 || gb_put(&self->timestamp_types, &ts_type, 4) < 0 ||
            gb_put(&self->header_offsets, &nh, 4) < 0)
            goto fail;
        self->count++;
    }
    return self->count - start_count;
fail:
    columns_truncate(self, start_count, start_headers);
    return -1;
}

static int get_buffer(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static PyObject *Columns_add_records(Columns *self, PyObject *args) {
    PyObject *payload;
    int count;
    long long base_offset, base_ts, log_append_ts, lo, hi;
    if (!PyArg_ParseTuple(args, "OiLLLLL", &payload, &count, &base_offset, &base_ts, &log_append_ts, &lo, &hi))
        return NULL;
    Py_buffer view;
    if (get_buffer(payload, &view) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t added = decode_records(self, p, p + view.len, count, base_offset, base_ts, log_append_ts, lo, hi);
    PyBuffer_Release(&view);
    if (added < 0)
        return NULL;
    return PyLong_FromSsize_t(added);
}

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

#define HEADER_SIZE 61

/* add_batches(buf, pos, lo, hi) -> (pos, next_offset)
 *
 * Runs over whole v2 batches from ``pos`` that are uncompressed and not transactional, appending their
 * records in [lo, hi). Stops at the end of the whole batches in ``buf`` (a fetch may end with a partial
 * one), at a batch Python must look at (compressed, transactional or control, or another magic), or once a
 * batch reaches ``hi``. Returns where it stopped and the offset after the last batch it went through
 * (-1 if none): a batch's last offset covers records a compaction removed. A malformed batch raises
 * ValueError and takes back everything this call added. */
static PyObject *Columns_add_batches(Columns *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos;
    long long lo, hi;
    if (!PyArg_ParseTuple(args, "OnLL", &obj, &pos, &lo, &hi))
        return NULL;
    Py_buffer view;
    if (get_buffer(obj, &view) < 0)
        return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t len = view.len;
    int64_t next_offset = -1;
    Py_ssize_t start_count = self->count, start_headers = self->header_keys.count;
    if (pos < 0)
        pos = 0;
    while (len - pos >= HEADER_SIZE) {
        const unsigned char *h = buf + pos;
        int64_t base_offset = be64(h);
        int32_t batch_length = be32(h + 8);
        if (batch_length < HEADER_SIZE - 12) {
            columns_truncate(self, start_count, start_headers);
            PyBuffer_Release(&view);
            corrupt("batch length shorter than its header", base_offset);
            return NULL;
        }
        Py_ssize_t size = (Py_ssize_t)batch_length + 12;
        if (size > len - pos)
            break; /* a partial batch at the end of a fetch */
        int magic = h[16];
        int attributes = (h[21] << 8) | h[22];
        if (magic != 2 || (attributes & 0x07) || (attributes & 0x30))
            break; /* compressed, transactional, control or an old format: Python's */
        int32_t last_offset_delta = be32(h + 23);
        int64_t base_ts = be64(h + 27), max_ts = be64(h + 35);
        int32_t records = be32(h + 57);
        if (base_offset + last_offset_delta >= lo) {
            Py_ssize_t added = decode_records(self, h + HEADER_SIZE, h + size, records, base_offset, base_ts,
                                              (attributes & 0x08) ? max_ts : -1, lo, hi);
            if (added < 0) {
                columns_truncate(self, start_count, start_headers); /* the whole call, not just this batch */
                PyBuffer_Release(&view);
                return NULL;
            }
        }
        pos += size;
        next_offset = base_offset + last_offset_delta + 1;
        if (next_offset >= hi)
            break;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nL", pos, (long long)next_offset);
}

static PyObject *bytes_of(growbuf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static PyObject *bincol_tuple(bincol *c) {
    /* (offsets, data, validity or None, null count) */
    PyObject *validity;
    if (c->nulls) {
        validity = bytes_of(&c->validity);
    } else {
        validity = Py_None;
        Py_INCREF(validity);
    }
    return Py_BuildValue("NNNn", bytes_of(&c->offsets), bytes_of(&c->data), validity, c->nulls);
}

/* take() -> dict of the buffers of the records added since the last take(); the columns start empty again. */
static PyObject *Columns_take(Columns *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = Py_BuildValue(
        "{s:n,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N}", "count", self->count, "keys", bincol_tuple(&self->keys),
        "values", bincol_tuple(&self->values), "offsets", bytes_of(&self->offsets), "timestamps",
        bytes_of(&self->timestamps), "timestamp_types", bytes_of(&self->timestamp_types), "header_offsets",
        bytes_of(&self->header_offsets), "header_keys", bincol_tuple(&self->header_keys), "header_values",
        bincol_tuple(&self->header_values));
    if (!out)
        return NULL;
    if (columns_reset(self) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *Columns_get_count(Columns *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->count);
}

static PyObject *Columns_get_nbytes(Columns *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSize_t(self->keys.data.len + self->values.data.len + self->header_values.data.len +
                             self->header_keys.data.len);
}

static PyMethodDef Columns_methods[] = {
    {"add_records", (PyCFunction)Columns_add_records, METH_VARARGS,
     "add_records(payload, count, base_offset, base_timestamp, log_append_timestamp, lo, hi) -> records added\n"
     "The records section of one batch (decompressed); log_append_timestamp is the batch's max timestamp when\n"
     "the batch carries log-append time, else -1. Only offsets in [lo, hi) are kept."},
    {"add_batches", (PyCFunction)Columns_add_batches, METH_VARARGS,
     "add_batches(record_set, pos, lo, hi) -> (pos, next_offset): the plain batches from pos on."},
    {"take", (PyCFunction)Columns_take, METH_NOARGS, "take() -> dict of Arrow buffers; the columns are emptied."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"count", (getter)Columns_get_count, NULL, "records held", NULL},
    {"nbytes", (getter)Columns_get_nbytes, NULL, "bytes of keys, values and headers held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "freshet.client._recordset.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns(headers=False): records of Kafka record batches, as Arrow buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Columns_init,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordset", "Kafka record batches decoded into Arrow column buffers.", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__recordset(void) {
    if (PyType_Ready(&ColumnsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
