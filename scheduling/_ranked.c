/* The ranking kernel (scheduling/ranking.py says why it is in C):

       rank(scores, rows, parts, count) -> (rows of the best, numbers)
       text(providers, weighers, numbers, multipliers) -> str or None

   `scores`: the candidates' scores, float64; `rows`: their rows, int64;
   `parts`: a tuple of float64 arrays as long, each weigher's values. The
   `count` highest scores are found in one pass, highest first, equal
   scores in order of position and NaN after every number: the first
   `count` of a stable sort of the negated scores, as
   `scheduling.weighers.combine.best_positions` gives them. Returned: their
   rows (a list of ints), and bytes of native float64 holding their scores,
   then each part's values at them. Arrays that are not contiguous, or of
   another type, raise ValueError (the caller ranks those with numpy); they
   are read through numpy's C API, as the buffer protocol costs more than
   the ranking (numpy describes the array anew for each buffer asked of it).

   `text` writes an answer's ranking as `schemas.ranked.text` does: the
   providers' ids (a tuple of str), the weighers' names already as JSON
   text, and the numbers then the multipliers (bytes) in base64, one str
   made at once; None when an id needs an escape in JSON (the caller
   encodes those). Built by `python -m berth.compile build`, which sets SOURCE_DIGEST to
   this file's SHA-256 so that a stale build is refused. */

#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <numpy/arrayobject.h>

#ifndef RANKED_SOURCE_DIGEST
#define RANKED_SOURCE_DIGEST ""
#endif

/* Positions of the best into `best` (room for `count`); how many there are. */
static Py_ssize_t
best_of(const double *scores, Py_ssize_t n, Py_ssize_t count, Py_ssize_t *best)
{
    Py_ssize_t kept = 0, i = 0;
    if (count <= 0)
        return 0;
    for (; i < n && kept < count; i++) {
        /* filling: each number in order, after every kept score at or above it */
        double v = scores[i];
        if (isnan(v))
            continue;
        Py_ssize_t at = kept++;
        while (at > 0 && v > scores[best[at - 1]]) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = i;
    }
    /* full: only a higher score than the last kept displaces it (an equal
       one comes later); NaN is higher than nothing */
    double last = kept == count ? scores[best[count - 1]] : 0.0;
    for (; i < n; i++) {
#ifdef __SSE2__
        /* four at a time past those that displace nothing (nearly all of a
           thousand): two compares of two, where one at a time took six
           instructions a score */
        while (i + 4 <= n) {
            __m128d bar = _mm_set1_pd(last);
            __m128d above = _mm_or_pd(_mm_cmpgt_pd(_mm_loadu_pd(scores + i), bar),
                                      _mm_cmpgt_pd(_mm_loadu_pd(scores + i + 2), bar));
            if (_mm_movemask_pd(above))
                break; /* one of these four does: each in turn below */
            i += 4;
        }
        if (i >= n)
            break;
#endif
        double v = scores[i];
        if (!(v > last))
            continue;
        Py_ssize_t at = count - 1;
        while (at > 0 && v > scores[best[at - 1]]) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = i;
        last = scores[best[count - 1]];
    }
    /* NaN compares with nothing: a stable sort leaves them last, in order */
    for (i = 0; i < n && kept < count; i++)
        if (isnan(scores[i]))
            best[kept++] = i;
    return kept;
}

/* `obj`'s items, if it is a one-dimensional contiguous array of `n` (any
   number if negative) items of `type`; else ValueError and NULL. */
static const void *
items_of(PyObject *obj, int type, npy_intp n, const char *what)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_ValueError, "%s: not an array", what);
        return NULL;
    }
    PyArrayObject *array = (PyArrayObject *)obj;
    if (PyArray_NDIM(array) != 1 || PyArray_TYPE(array) != type
        || !PyArray_IS_C_CONTIGUOUS(array) || !PyArray_ISNOTSWAPPED(array)
        || (n >= 0 && PyArray_DIM(array, 0) != n)) {
        PyErr_Format(PyExc_ValueError, "%s: not a contiguous array of the scores' type and length",
                     what);
        return NULL;
    }
    return PyArray_DATA(array);
}

static PyObject *
rank(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* called by position (METH_FASTCALL): PyArg_ParseTuple's format
       costs more than the ranking of a hundred scores */
    if (nargs != 4 || !PyTuple_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "rank(scores, rows, parts: tuple, count: int)");
    PyObject *scores_obj = args[0], *rows_obj = args[1], *parts = args[2];
    Py_ssize_t count = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    const double *scores = items_of(scores_obj, NPY_FLOAT64, -1, "scores");
    if (scores == NULL)
        return NULL;
    npy_intp n = PyArray_DIM((PyArrayObject *)scores_obj, 0);
    const npy_int64 *rows = items_of(rows_obj, NPY_INT64, n, "rows");
    if (rows == NULL)
        return NULL;
    Py_ssize_t w = PyTuple_GET_SIZE(parts);
    for (Py_ssize_t p = 0; p < w; p++)
        if (items_of(PyTuple_GET_ITEM(parts, p), NPY_FLOAT64, n, "a part") == NULL)
            return NULL;
    if (count > n)
        count = n; /* no more best than scores: room for them only */
    PyObject *result = NULL, *taken = NULL, *numbers = NULL;
    Py_ssize_t *best = PyMem_Malloc(sizeof(Py_ssize_t) * (count > 0 ? count : 1));
    if (best == NULL)
        return PyErr_NoMemory();
    Py_ssize_t k = best_of(scores, n, count, best);
    taken = PyList_New(k);
    numbers = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(double) * k * (1 + w));
    if (taken == NULL || numbers == NULL)
        goto done;
    double *out = (double *)PyBytes_AS_STRING(numbers);
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *row = PyLong_FromLongLong(rows[best[i]]);
        if (row == NULL)
            goto done;
        PyList_SET_ITEM(taken, i, row);
        out[i] = scores[best[i]];
    }
    for (Py_ssize_t p = 0; p < w; p++) {
        const double *values = PyArray_DATA((PyArrayObject *)PyTuple_GET_ITEM(parts, p));
        double *into = out + k * (1 + p);
        for (Py_ssize_t i = 0; i < k; i++)
            into[i] = values[best[i]];
    }
    result = PyTuple_Pack(2, taken, numbers);
done:
    Py_XDECREF(taken);
    Py_XDECREF(numbers);
    PyMem_Free(best);
    return result;
}

static const char BASE64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* `n` bytes in base64 with '=' padding, as binascii.b2a_base64 writes
   them, into `out` (room for (n + 2) / 3 * 4). */
static void
base64_of(const unsigned char *in, Py_ssize_t n, char *out)
{
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3, out += 4) {
        unsigned int v = ((unsigned int)in[i] << 16) | ((unsigned int)in[i + 1] << 8) | in[i + 2];
        out[0] = BASE64[v >> 18];
        out[1] = BASE64[(v >> 12) & 63];
        out[2] = BASE64[(v >> 6) & 63];
        out[3] = BASE64[v & 63];
    }
    if (i < n) {
        unsigned int v = ((unsigned int)in[i] << 16) | (i + 1 < n ? (unsigned int)in[i + 1] << 8 : 0);
        out[0] = BASE64[v >> 18];
        out[1] = BASE64[(v >> 12) & 63];
        out[2] = i + 1 < n ? BASE64[(v >> 6) & 63] : '=';
        out[3] = '=';
    }
}

/* The ASCII characters JSON writes as they are: 0x20-0x7e but '"' and '\\'
   (filled by the module's init). */
static char PLAIN[128];

/* Whether JSON writes `s` as it is: printable ASCII without quotes or
   backslashes (as provider ids are). */
static int
plain(PyObject *s)
{
    if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s))
        return 0;
    const unsigned char *c = PyUnicode_1BYTE_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PLAIN[c[i]])
            return 0;
    return 1;
}

#define OPEN "{\"providers\": ["
#define WEIGHERS "], \"weighers\": "
#define NUMBERS ", \"numbers\": \""
#define CLOSE "\"}"
#define PUT(literal) (memcpy(at, (literal), sizeof(literal) - 1), at += sizeof(literal) - 1)

static PyObject *
text(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[0]) || !PyUnicode_Check(args[1])
        || !PyBytes_Check(args[2]) || !PyBytes_Check(args[3]))
        return PyErr_Format(PyExc_TypeError,
                            "text(providers: tuple, weighers: str, numbers: bytes, "
                            "multipliers: bytes)");
    PyObject *ids = args[0], *names = args[1], *result = NULL;
    const char *numbers = PyBytes_AS_STRING(args[2]), *tail = PyBytes_AS_STRING(args[3]);
    Py_ssize_t numbers_length = PyBytes_GET_SIZE(args[2]), tail_length = PyBytes_GET_SIZE(args[3]);
    unsigned char *joined = NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(ids), length = k > 1 ? 2 * (k - 1) : 0; /* the ", " */
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *id = PyTuple_GET_ITEM(ids, i);
        if (!plain(id))
            goto escaped;
        length += PyUnicode_GET_LENGTH(id) + 2;
    }
    if (!PyUnicode_IS_ASCII(names))
        goto escaped;
    Py_ssize_t bytes = numbers_length + tail_length, names_length = PyUnicode_GET_LENGTH(names);
    length += sizeof(OPEN) - 1 + sizeof(WEIGHERS) - 1 + names_length + sizeof(NUMBERS) - 1
              + (bytes + 2) / 3 * 4 + sizeof(CLOSE) - 1;
    /* the numbers and the multipliers as one run of bytes, each group of
       three encoded alike across the seam */
    joined = PyMem_Malloc(bytes > 0 ? bytes : 1);
    result = joined == NULL ? PyErr_NoMemory() : PyUnicode_New(length, 127);
    if (result == NULL)
        goto done;
    memcpy(joined, numbers, numbers_length);
    memcpy(joined + numbers_length, tail, tail_length);
    char *at = (char *)PyUnicode_1BYTE_DATA(result);
    PUT(OPEN);
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *id = PyTuple_GET_ITEM(ids, i);
        if (i > 0)
            PUT(", ");
        *at++ = '"';
        memcpy(at, PyUnicode_1BYTE_DATA(id), PyUnicode_GET_LENGTH(id));
        at += PyUnicode_GET_LENGTH(id);
        *at++ = '"';
    }
    PUT(WEIGHERS);
    memcpy(at, PyUnicode_1BYTE_DATA(names), names_length);
    at += names_length;
    PUT(NUMBERS);
    base64_of(joined, bytes, at);
    at += (bytes + 2) / 3 * 4;
    PUT(CLOSE);
    goto done;
escaped:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(joined);
    return result;
}

static PyMethodDef methods[] = {
    {"rank", (PyCFunction)(void (*)(void))rank, METH_FASTCALL,
     "rank(scores, rows, parts, count) -> (rows of the best, their numbers as bytes)"},
    {"text", (PyCFunction)(void (*)(void))text, METH_FASTCALL,
     "text(providers, weighers, numbers, multipliers) -> the ranking's JSON text, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "scheduling._ranked", "The ranking kernel.", -1, methods,
};

PyMODINIT_FUNC
PyInit__ranked(void)
{
    import_array();
    for (int c = 0x20; c < 0x7f; c++)
        PLAIN[c] = c != '"' && c != '\\';
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", RANKED_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
