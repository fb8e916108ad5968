/* The walk of scan_records (freshet.format.record_batch) in C: a batch's records section, record by record,
 * varint by varint, keys, values and headers skipped by their lengths. The broker runs it on every batch
 * produced to a compacted topic (the key check), where the Python walk was most of a stream-processing
 * job's broker CPU.
 *
 * walk(records, count, timestamps) -> (keyless, deltas) | None
 *   keyless: the index of every record without a key; deltas: each record's timestamp delta (None unless
 *   asked for). It raises ValueError with exactly the message the Python walk gives its CorruptBatchError
 *   ("truncated varint", "varint too long", "record header key of negative size N", "record length does not
 *   match its fields"), and returns None for what it leaves to the Python walk: a varint whose value does not
 *   fit 64 bits (Python's ints take it; the walk's answer is the same either way, only slower).
 *
 * Positions are 128-bit: lengths are up to 2^63 each and pos only grows by them, so a batch of lies cannot
 * overflow it, and every comparison is the one Python makes on its unbounded ints.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef __int128 pos_t;

enum { OK = 0, TRUNCATED = 1, TOO_LONG = 2, TOO_BIG = 3 };

/* read_varint: the zigzag varint at *pos, as freshet.format.varint.read_varint reads it (at most 10 bytes). */
static inline int read_varint(const unsigned char *data, pos_t len, pos_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= len)
            return TRUNCATED;
        unsigned b = data[(Py_ssize_t)*pos];
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

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int want_deltas;
    if (!PyArg_ParseTuple(args, "y*np", &view, &count, &want_deltas))
        return NULL;
    const unsigned char *data = view.buf;
    pos_t len = view.len, pos = 0, end;
    PyObject *keyless = PyList_New(0), *deltas = want_deltas ? PyList_New(0) : (Py_INCREF(Py_None), Py_None);
    PyObject *result = NULL;
    const char *error = NULL;
    int64_t header_key_size = 0;
    int status = OK;
    if (keyless == NULL || deltas == NULL)
        goto done;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, ts_delta, ignored, klen, vlen, nheaders;
#define VARINT(target)                                                   \
        if ((status = read_varint(data, len, &pos, &(target))) != OK) \
            goto fail;
        VARINT(length)
        end = pos + length;
        pos += 1; /* attributes: not read */
        VARINT(ts_delta)
        VARINT(ignored) /* offset delta */
        VARINT(klen)
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
        if (vlen > 0)
            pos += vlen;
        VARINT(nheaders)
        for (int64_t h = 0; h < nheaders; h++) {
            int64_t hklen, hvlen;
            VARINT(hklen)
            if (hklen < 0) {
                header_key_size = hklen;
                goto fail;
            }
            pos += hklen;
            VARINT(hvlen)
            if (hvlen > 0)
                pos += hvlen;
        }
        if (pos != end) {
            error = "record length does not match its fields";
            goto fail;
        }
        if (want_deltas) {
            PyObject *d = PyLong_FromLongLong(ts_delta);
            if (d == NULL || PyList_Append(deltas, d) < 0) {
                Py_XDECREF(d);
                goto done;
            }
            Py_DECREF(d);
        }
#undef VARINT
    }
    result = PyTuple_Pack(2, keyless, deltas);
    goto done;
fail:
    if (status == TOO_BIG) {
        result = Py_None;
        Py_INCREF(result);
    } else if (status == TRUNCATED) {
        PyErr_SetString(PyExc_ValueError, "truncated varint");
    } else if (status == TOO_LONG) {
        PyErr_SetString(PyExc_ValueError, "varint too long");
    } else if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
    } else {
        PyErr_Format(PyExc_ValueError, "record header key of negative size %lld", (long long)header_key_size);
    }
done:
    Py_XDECREF(keyless);
    Py_XDECREF(deltas);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "walk(records, count, timestamps) -> (keyless, deltas) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
