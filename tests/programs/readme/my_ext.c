/*
 * The README's my_ext: the C source its setup.py snippet builds (tests/live/
 * test_readme.py).  work(n) runs one parallel loop of n iterations (a sum
 * reduction), the GIL released, and returns the sum.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *work(PyObject *self, PyObject *args) {
    (void)self;
    long n = 100000, total = 0;
    if (!PyArg_ParseTuple(args, "|l", &n)) return NULL;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for reduction(+ : total)
    for (long i = 0; i < n; i++) total += i % 7;
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(total);
}

static PyMethodDef methods[] = {
    {"work", work, METH_VARARGS, "work(n=100000): a parallel loop; returns its sum"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "my_ext", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_my_ext(void) { return PyModule_Create(&module); }
