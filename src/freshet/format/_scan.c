/* The record walk of scan_records (freshet.format.record_batch) in C: a batch's records section, record by record,
 * varint by varint, keys, values and headers skipped by their lengths. The broker runs it on every produced batch
 * (the records' structure, as Kafka's LogValidator checks it; the compacted-topic key check; the timestamp bounds),
 * so it must cost little next to the rest of a produce.
 *
 * check(records, count, timestamps) -> (keyless, deltas, max_delta) | None
 *   keyless: the index of every record without a key; deltas: each record's timestamp delta (None unless asked
 *   for); max_delta: the largest timestamp delta (None for no record). It raises ValueError(message, index) with
 *   exactly the message and record index the Python walk gives its MalformedRecordError (index None: the batch as
 *   a whole), and returns None for what it leaves to the Python walk: a varint whose value does not fit 64 bits
 *   (Python's ints take it; the walk's answer is the same either way, only slower).
 *
 * Every length is checked against what is left of its record (or of the batch) before pos moves by it, so pos
 * stays within a few bytes of the records' end and 64-bit positions cannot overflow: every comparison is the one
 * Python makes on its unbounded ints.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int64_t pos_t;

enum { OK = 0, TRUNCATED = 1, TOO_LONG = 2, TOO_BIG = 3, MALFORMED = 4 };

/* read_varint: the zigzag varint at *pos, as freshet.format.varint.read_varint reads it (at most 10 bytes). */
static inline int read_varint(const unsigned char *data, pos_t len, pos_t *pos, int64_t *out)
{
    if (*pos < len && data[*pos] < 0x80) { /* one byte: most of a record's varints */
        unsigned b = data[*pos];
        *pos += 1;
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        return OK;
    }
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= len)
            return TRUNCATED;
        unsigned b = data[*pos];
        *pos += 1;
        if (shift == 63 && (b & 0x7F) > 1)
            return TOO_BIG; /* more than 64 bits: Python's int holds it, we do not */
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return OK;
        }
        shift += 7;
        if (shift > 63)
            return TOO_LONG;
    }
}

static PyObject *check(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int want_deltas;
    if (!PyArg_ParseTuple(args, "y*np", &view, &count, &want_deltas))
        return NULL;
    const unsigned char *data = view.buf;
    pos_t len = view.len, pos = 0, start = 0, end = 0;
    PyObject *keyless = PyList_New(0), *deltas = want_deltas ? PyList_New(0) : (Py_INCREF(Py_None), Py_None);
    PyObject *result = NULL;
    char message[160];
    int status = OK;
    int64_t max_delta = 0;
    Py_ssize_t index = 0;
    if (keyless == NULL || deltas == NULL)
        goto done;
    for (index = 0; index < count; index++) {
        int64_t length, ts_delta, offset_delta, klen, vlen, nheaders;
#define VARINT(target)                                                   \
        if ((status = read_varint(data, len, &pos, &(target))) != OK) \
            goto fail;
#define MALFORMED_IF(condition, ...)                                     \
        if (condition) {                                                 \
            snprintf(message, sizeof message, __VA_ARGS__);              \
            status = MALFORMED;                                          \
            goto fail;                                                   \
        }
        VARINT(length)
        start = pos;
        MALFORMED_IF(length < 0 || length > len - pos, "record %zd: its length %lld overruns the %lld bytes left in "
                     "the batch", index, (long long)length, (long long)(len - pos))
        end = pos + length;
        pos += 1; /* attributes: not read (Kafka has none in a record) */
        VARINT(ts_delta)
        VARINT(offset_delta)
        MALFORMED_IF(offset_delta != index, "record %zd: offset delta %lld, expected %zd", index,
                     (long long)offset_delta, index)
        VARINT(klen)
        MALFORMED_IF(klen < -1, "record %zd: key of negative size %lld", index, (long long)klen)
        MALFORMED_IF(klen > end - pos, "record %zd: key of %lld bytes overruns its record", index, (long long)klen)
        if (klen < 0) {
            PyObject *i = PyLong_FromSsize_t(index);
            if (i == NULL || PyList_Append(keyless, i) < 0) {
                Py_XDECREF(i);
                goto done;
            }
            Py_DECREF(i);
        } else {
            pos += klen;
        }
        VARINT(vlen)
        MALFORMED_IF(vlen < -1, "record %zd: value of negative size %lld", index, (long long)vlen)
        MALFORMED_IF(vlen > end - pos, "record %zd: value of %lld bytes overruns its record", index, (long long)vlen)
        if (vlen > 0)
            pos += vlen;
        VARINT(nheaders)
        MALFORMED_IF(nheaders < 0 || nheaders > end - pos, "record %zd: header count %lld does not fit its record",
                     index, (long long)nheaders)
        for (int64_t h = 0; h < nheaders; h++) {
            int64_t hklen, hvlen;
            VARINT(hklen)
            MALFORMED_IF(hklen < 0, "record %zd: header key of negative size %lld", index, (long long)hklen)
            MALFORMED_IF(hklen > end - pos, "record %zd: header key of %lld bytes overruns its record", index,
                         (long long)hklen)
            pos += hklen;
            VARINT(hvlen)
            MALFORMED_IF(hvlen < -1, "record %zd: header value of negative size %lld", index, (long long)hvlen)
            MALFORMED_IF(hvlen > end - pos, "record %zd: header value of %lld bytes overruns its record", index,
                         (long long)hvlen)
            if (hvlen > 0)
                pos += hvlen;
        }
        MALFORMED_IF(pos != end, "record %zd: its fields take %lld bytes, its length says %lld", index,
                     (long long)(pos - start), (long long)length)
        if (index == 0 || ts_delta > max_delta)
            max_delta = ts_delta;
        if (want_deltas) {
            PyObject *d = PyLong_FromLongLong(ts_delta);
            if (d == NULL || PyList_Append(deltas, d) < 0) {
                Py_XDECREF(d);
                goto done;
            }
            Py_DECREF(d);
        }
#undef VARINT
#undef MALFORMED_IF
    }
    if (pos != len) {
        snprintf(message, sizeof message, "%lld bytes after the last of the batch's %zd records",
                 (long long)(len - pos), count);
        PyObject *exc_args = Py_BuildValue("(sO)", message, Py_None);
        if (exc_args != NULL) {
            PyErr_SetObject(PyExc_ValueError, exc_args);
            Py_DECREF(exc_args);
        }
        goto done;
    }
    if (count > 0)
        result = Py_BuildValue("(OOL)", keyless, deltas, (long long)max_delta);
    else
        result = Py_BuildValue("(OOO)", keyless, deltas, Py_None);
    goto done;
fail:
    if (status == TOO_BIG) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (status == TRUNCATED)
        snprintf(message, sizeof message, "record %zd runs past the end of the batch", index);
    else if (status == TOO_LONG)
        snprintf(message, sizeof message, "record %zd: varint too long", index);
    {
        PyObject *exc_args = Py_BuildValue("(sn)", message, index);
        if (exc_args != NULL) {
            PyErr_SetObject(PyExc_ValueError, exc_args);
            Py_DECREF(exc_args);
        }
    }
done:
    Py_XDECREF(keyless);
    Py_XDECREF(deltas);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS, "check(records, count, timestamps) -> (keyless, deltas, max_delta) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
