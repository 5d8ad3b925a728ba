/* The ranking kernel (scheduling/ranking.py says why it is in C):

       rank(scores, rows, parts, count) -> (rows of the best, numbers)

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
   Built by `python -m berth.compile build`, which sets SOURCE_DIGEST to
   this file's SHA-256 so that a stale build is refused. */

#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <math.h>
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
rank(PyObject *module, PyObject *args)
{
    PyObject *scores_obj, *rows_obj, *parts;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OOO!n:rank", &scores_obj, &rows_obj, &PyTuple_Type, &parts,
                          &count))
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

static PyMethodDef methods[] = {
    {"rank", rank, METH_VARARGS,
     "rank(scores, rows, parts, count) -> (rows of the best, their numbers as bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "scheduling._ranked", "The ranking kernel.", -1, methods,
};

PyMODINIT_FUNC
PyInit__ranked(void)
{
    import_array();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_DIGEST", RANKED_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
