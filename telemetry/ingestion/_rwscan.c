/* Compiled fast path of remote_write.scan_write_request (see that module's doc).
 *
 * One sequential pass over a decompressed remote-write WriteRequest in the plain layout
 * (every TimeSeries field: its label fields, then its sample fields; each Sample: an optional
 * value 0x09 + 8 bytes, then an optional timestamp 0x10 + varint of 1..7 bytes), filling the
 * caller's arrays with what the numpy scanner computes: per series the byte range of its label
 * fields, the two 64-bit hash lanes of those bytes and its sample count; per sample its
 * timestamp and the value's exact bits. Anything else -- another field, another order, a
 * series without samples, a length that does not reach exactly where it should -- returns
 * None and the caller takes the reference decoder. The hash is remote_write.label_hash's,
 * bit for bit (tests compare the two). The pass runs without the GIL: the body is an
 * immutable bytes object and the output arrays are the caller's own, fresh ones.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Words and values are read with memcpy as little-endian: on any other host the build fails
 * (the extension is optional) and the numpy scanner, which states its byte order, runs instead. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "_rwscan reads little-endian words: not built on this host"
#endif

static inline uint64_t fmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t load_le(const uint8_t *p, Py_ssize_t avail)
{
    /* little-endian word of the next min(avail, 8) bytes, zeros past them */
    uint64_t w = 0;
    if (avail >= 8) {
        memcpy(&w, p, 8); /* little-endian host: see the check above */
    } else {
        for (Py_ssize_t i = avail - 1; i >= 0; i--) w = (w << 8) | p[i];
    }
    return w;
}

/* Varint of at most max_bytes bytes at *p (not past end); 0 on failure. */
static inline int read_varint(const uint8_t **p, const uint8_t *end, int max_bytes, uint64_t *out)
{
    uint64_t v = 0;
    const uint8_t *q = *p;
    for (int k = 0; k < max_bytes; k++) {
        if (q >= end) return 0;
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *p = q;
            *out = v;
            return 1;
        }
    }
    return 0;
}

typedef struct {
    const uint64_t *ka, *kb; /* position keys (remote_write._position_keys) */
    Py_ssize_t nkeys;
    uint64_t seed0, seed1;
} keys_t;

static inline uint64_t key_at(const keys_t *k, Py_ssize_t i, int lane)
{
    if (i < k->nkeys) return lane ? k->kb[i] : k->ka[i];
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ULL;
    return lane ? fmix(x ^ k->seed1 ^ 0x5555555555555555ULL) : fmix(x ^ k->seed0);
}

static void hash_range(const uint8_t *s, Py_ssize_t len, const keys_t *k, uint64_t *h1, uint64_t *h2)
{
    uint64_t a = 0, b = 0;
    Py_ssize_t i = 0;
    for (Py_ssize_t off = 0; off < len; off += 8, i++) {
        uint64_t w = load_le(s + off, len - off);
        a += fmix(w ^ key_at(k, i, 0));
        b += fmix(w ^ key_at(k, i, 1));
    }
    uint64_t ln = (uint64_t)len;
    *h1 = fmix(a ^ fmix(ln ^ k->seed0));
    *h2 = fmix(b ^ fmix(ln + k->seed1));
}

/* 1: scanned (counts in *n_series, *n_samples); 0: not the plain layout (or an array too small). */
static int scan(const uint8_t *buf, Py_ssize_t n, const keys_t *keys,
                int64_t *lstart, int64_t *lend, uint64_t *h1, uint64_t *h2, int64_t *counts,
                Py_ssize_t cap_series, int64_t *ts, uint64_t *vals, Py_ssize_t cap_samples,
                Py_ssize_t *n_series, Py_ssize_t *n_samples)
{
    const uint8_t *p = buf, *end = buf + n;
    Py_ssize_t si = 0, mi = 0;
    if (n < 16) return 0;
    while (p < end) {
        uint64_t len;
        if (*p++ != 0x0A) return 0;
        if (!read_varint(&p, end, 3, &len)) return 0; /* series above 2 MiB: not the plain case */
        if ((uint64_t)(end - p) < len) return 0;
        const uint8_t *series_end = p + len, *labels = p;
        while (p < series_end && *p == 0x0A) { /* label fields */
            uint64_t l;
            p++;
            if (!read_varint(&p, series_end, 5, &l)) return 0;
            if ((uint64_t)(series_end - p) < l) return 0;
            p += l;
        }
        const uint8_t *labels_end = p;
        if (labels_end - labels < 16) return 0; /* even a bare __name__ label is longer */
        Py_ssize_t first = mi;
        while (p < series_end) { /* sample fields */
            if (*p++ != 0x12) return 0;
            if (p >= series_end) return 0;
            uint8_t size = *p++;
            if (size == 0 || size > 20) return 0;
            if (series_end - p < size) return 0;
            const uint8_t *q = p, *e = p + size;
            uint64_t v = 0, t = 0;
            if (*q == 0x09) {
                if (e - q < 9) return 0;
                memcpy(&v, q + 1, 8); /* exact bits (little-endian host) */
                q += 9;
            }
            if (q < e) {
                if (*q++ != 0x10) return 0;
                if (!read_varint(&q, e, 7, &t)) return 0; /* negative or far-future: reference path */
                if (q != e) return 0;
            }
            if (mi >= cap_samples) return 0;
            ts[mi] = (int64_t)t;
            vals[mi] = v;
            mi++;
            p = e;
        }
        if (mi == first) return 0; /* a series without samples */
        if (si >= cap_series) return 0;
        lstart[si] = labels - buf;
        lend[si] = labels_end - buf;
        counts[si] = mi - first;
        hash_range(labels, labels_end - labels, keys, &h1[si], &h2[si]);
        si++;
    }
    *n_series = si;
    *n_samples = mi;
    return 1;
}

static int get_writable(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s: expected items of %zd bytes", what, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(raw, ka, kb, seed0, seed1, label_start, label_end, h1, h2, counts, timestamps, values)\n"
"-> (n_series, n_samples) or None\n\n"
"Fill the given int64/uint64 arrays (series arrays first, then sample arrays) from a\n"
"decompressed WriteRequest in the plain layout; None when it is not one or an array is\n"
"too small. ka, kb: uint64 position keys of the two hash lanes.");

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer raw, ka, kb, out[7];
    unsigned long long seed0, seed1;
    PyObject *objs[7];
    int got = 0, ok = 0;
    Py_ssize_t n_series = 0, n_samples = 0;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*KKOOOOOOO", &raw, &ka, &kb, &seed0, &seed1,
                          &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6]))
        return NULL;
    static const char *names[7] = {"label_start", "label_end", "h1", "h2", "counts", "timestamps", "values"};
    for (; got < 7; got++) {
        if (get_writable(objs[got], &out[got], 8, names[got]) < 0) goto done;
    }
    Py_ssize_t cap_series = out[0].len / 8;
    for (int i = 1; i < 5; i++) if (out[i].len / 8 < cap_series) cap_series = out[i].len / 8;
    Py_ssize_t cap_samples = out[5].len / 8 < out[6].len / 8 ? out[5].len / 8 : out[6].len / 8;
    keys_t keys = {(const uint64_t *)ka.buf, (const uint64_t *)kb.buf,
                   (ka.len < kb.len ? ka.len : kb.len) / 8, (uint64_t)seed0, (uint64_t)seed1};
    Py_BEGIN_ALLOW_THREADS
    ok = scan((const uint8_t *)raw.buf, raw.len, &keys,
              (int64_t *)out[0].buf, (int64_t *)out[1].buf, (uint64_t *)out[2].buf, (uint64_t *)out[3].buf,
              (int64_t *)out[4].buf, cap_series, (int64_t *)out[5].buf, (uint64_t *)out[6].buf, cap_samples,
              &n_series, &n_samples);
    Py_END_ALLOW_THREADS
    if (ok) {
        result = Py_BuildValue("(nn)", n_series, n_samples);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&out[i]);
    PyBuffer_Release(&raw);
    PyBuffer_Release(&ka);
    PyBuffer_Release(&kb);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rwscan",
    "Compiled scanner of plainly encoded remote-write requests (remote_write.scan_write_request).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__rwscan(void)
{
    return PyModule_Create(&module);
}
