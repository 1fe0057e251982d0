/* Compiled fast path of prometheus_text.template_values (see that function's doc).
 *
 * A text scrape that has its host's template's shape differs from it only in its value texts.
 * One pass over the body's bytes (ending with a newline: the caller adds one) checks the shape
 * -- the number of lines, every sample line at least as long as its head -- copies every byte
 * that is not a value text into the caller's buffer (the template's digest is computed over
 * those), and reads each value text as the reference grammar does:
 *     token ([ \t]+ -?digits)? [ \t\r]* \n      token = [-+.0-9a-zA-Z]+
 * the token as Python's float() reads it (a decimal number, inf / infinity / nan in any case,
 * each with an optional sign; anything else, hex included, is not a value) and the timestamp as
 * a signed 64-bit integer. Anything else returns None and the caller takes the Python path,
 * which decides (and explains). Runs without the GIL: the body is an immutable bytes object and
 * the output buffers are the caller's own, fresh ones.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static locale_t c_locale; /* strtod_l reads '.' as the decimal point whatever the process locale */

static inline int is_token_char(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+'
        || c == '.';
}

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* The token [p, end) as Python's float() reads it; 0 when float() would refuse it. */
static int read_float(const uint8_t *p, const uint8_t *end, double *out)
{
    char buf[64];
    Py_ssize_t n = end - p;
    const uint8_t *q = p;
    int negative = 0;
    if (q < end && (*q == '+' || *q == '-')) {
        negative = *q == '-';
        q++;
    }
    Py_ssize_t rest = end - q;
    if (rest == 3 || rest == 8) {
        char low[9];
        for (Py_ssize_t i = 0; i < rest; i++) low[i] = (char)(q[i] | 0x20);
        low[rest] = 0;
        if ((rest == 3 && strcmp(low, "inf") == 0) || (rest == 8 && strcmp(low, "infinity") == 0)) {
            *out = negative ? -INFINITY : INFINITY;
            return 1;
        }
        if (rest == 3 && strcmp(low, "nan") == 0) {
            *out = negative ? -NAN : NAN;
            return 1;
        }
    }
    /* digits [. digits] | . digits, then an optional exponent: nothing else */
    const uint8_t *r = q;
    Py_ssize_t before = 0, after = 0;
    while (r < end && is_digit(*r)) { r++; before++; }
    if (r < end && *r == '.') {
        r++;
        while (r < end && is_digit(*r)) { r++; after++; }
    }
    if (before + after == 0) return 0;
    if (r < end && (*r == 'e' || *r == 'E')) {
        r++;
        if (r < end && (*r == '+' || *r == '-')) r++;
        if (r >= end || !is_digit(*r)) return 0;
        while (r < end && is_digit(*r)) r++;
    }
    if (r != end || n >= (Py_ssize_t)sizeof(buf)) return 0; /* a 63-byte number: let Python read it */
    memcpy(buf, p, (size_t)n);
    buf[n] = 0;
    char *stop = NULL;
    double v = strtod_l(buf, &stop, c_locale);
    if (stop != buf + n) return 0;
    *out = v;
    return 1;
}

/* -?digits [p, end) as int64; 0 when it does not fit. */
static int read_int64(const uint8_t *p, const uint8_t *end, int64_t *out)
{
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end) return 0;
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; p < end; p++) {
        if (!is_digit(*p)) return 0;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* The value text [p, nl) of one sample line (nl: its newline): its value and timestamp. */
static int read_rest(const uint8_t *p, const uint8_t *nl, double *value, int64_t *ts, int *has_ts)
{
    const uint8_t *q = p;
    while (q < nl && is_token_char(*q)) q++;
    if (q == p || !read_float(p, q, value)) return 0;
    *has_ts = 0;
    const uint8_t *blank = q;
    while (q < nl && (*q == ' ' || *q == '\t')) q++;
    if (q > blank && q < nl && (*q == '-' || is_digit(*q))) {
        const uint8_t *t = q;
        if (*q == '-') q++;
        const uint8_t *digits = q;
        while (q < nl && is_digit(*q)) q++;
        if (q > digits) {
            if (!read_int64(t, q, ts)) return 0;
            *has_ts = 1;
        } else {
            return 0; /* a lone '-' */
        }
    }
    while (q < nl && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    return q == nl;
}

/* raw ends with '\n' (the caller appends one where the body has none). */
static int split(const uint8_t *raw, Py_ssize_t len, Py_ssize_t lines, const int32_t *sample_lines,
                 const int32_t *head_len, Py_ssize_t n, uint8_t *kept, Py_ssize_t *kept_len, double *values,
                 int64_t *stamps, int64_t default_ts, int *any_ts)
{
    Py_ssize_t line = 0, j = 0, k = 0;
    const uint8_t *p = raw, *end = raw + len, *copy_from = raw;
    *any_ts = 0;
    if (len == 0 || raw[len - 1] != '\n') return 0;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p)); /* found: raw ends with one */
        if (j < n && sample_lines[j] == line) {
            if (j && sample_lines[j] <= sample_lines[j - 1]) return 0;
            if (head_len[j] < 0 || head_len[j] >= nl - p) return 0; /* a line shorter than its head */
            const uint8_t *value_at = p + head_len[j];
            memcpy(kept + k, copy_from, (size_t)(value_at - copy_from));
            k += value_at - copy_from;
            int has_ts = 0;
            int64_t ts = default_ts;
            if (!read_rest(value_at, nl, &values[j], &ts, &has_ts)) return 0;
            stamps[j] = has_ts ? ts : default_ts;
            *any_ts |= has_ts;
            copy_from = nl + 1; /* the value text's newline goes with it */
            j++;
        }
        line++;
        p = nl + 1;
    }
    memcpy(kept + k, copy_from, (size_t)(end - copy_from));
    k += end - copy_from;
    if (line != lines || j != n) return 0;
    *kept_len = k;
    return 1;
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, const char *name)
{
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->itemsize != itemsize && itemsize != 1) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes expected", name, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(split_doc,
"split(raw, lines, sample_lines, head_len, kept, values, stamps, default_ts)\n"
"-> (kept_bytes, any_timestamp) or None\n\n"
"raw: the body (bytes); lines, sample_lines (int32), head_len (int32): the template's shape.\n"
"Fills kept (a bytearray of at least len(raw) + 1) with the bytes that are not value texts,\n"
"values (float64) and stamps (int64; default_ts where a line has none) per sample; None when\n"
"the body does not have the shape or a value text is not in the plain form.");

static PyObject *py_split(PyObject *self, PyObject *args)
{
    Py_buffer raw, lines_at, heads, kept, values, stamps;
    Py_ssize_t lines;
    long long default_ts;
    PyObject *o_lines, *o_heads, *o_kept, *o_values, *o_stamps;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nOOOOOL", &raw, &lines, &o_lines, &o_heads, &o_kept, &o_values, &o_stamps,
                          &default_ts))
        return NULL;
    int got = 0;
    if (get_buffer(o_lines, &lines_at, 4, 0, "sample_lines") < 0) goto done;
    got = 1;
    if (get_buffer(o_heads, &heads, 4, 0, "head_len") < 0) goto done;
    got = 2;
    if (get_buffer(o_kept, &kept, 1, 1, "kept") < 0) goto done;
    got = 3;
    if (get_buffer(o_values, &values, 8, 1, "values") < 0) goto done;
    got = 4;
    if (get_buffer(o_stamps, &stamps, 8, 1, "stamps") < 0) goto done;
    got = 5;
    Py_ssize_t n = lines_at.len / 4;
    if (heads.len / 4 != n || values.len / 8 < n || stamps.len / 8 < n || kept.len < raw.len + 1) {
        PyErr_SetString(PyExc_ValueError, "split: buffer sizes do not fit the template and the body");
        goto done;
    }
    Py_ssize_t kept_len = 0;
    int ok, any_ts = 0;
    Py_BEGIN_ALLOW_THREADS
    ok = split((const uint8_t *)raw.buf, raw.len, lines, (const int32_t *)lines_at.buf, (const int32_t *)heads.buf,
               n, (uint8_t *)kept.buf, &kept_len, (double *)values.buf, (int64_t *)stamps.buf, (int64_t)default_ts,
               &any_ts);
    Py_END_ALLOW_THREADS
    if (ok) {
        result = Py_BuildValue("(nO)", kept_len, any_ts ? Py_True : Py_False);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    if (got > 4) PyBuffer_Release(&stamps);
    if (got > 3) PyBuffer_Release(&values);
    if (got > 2) PyBuffer_Release(&kept);
    if (got > 1) PyBuffer_Release(&heads);
    if (got > 0) PyBuffer_Release(&lines_at);
    PyBuffer_Release(&raw);
    return result;
}

static PyMethodDef methods[] = {
    {"split", py_split, METH_VARARGS, split_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_textscan",
    "Compiled read of a text scrape through its host's template (prometheus_text.template_values).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__textscan(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c_locale) {
        PyErr_SetString(PyExc_ImportError, "_textscan: no C locale");
        return NULL;
    }
    return PyModule_Create(&module);
}
