/*
 * CPython extension module for the runtime-fallback tests (tests/test_fallback.py),
 * built with gcc -fopenmp (links libgomp): the workloads of gomp_work.h.  EXT_NAME
 * is the module name (default gomp_work).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gomp_work.h"

#ifndef EXT_NAME
#define EXT_NAME gomp_work
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

static PyObject *py_parallel(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  return PyLong_FromLong(gw_parallel(n));
}

static PyObject *py_dynamic(PyObject *m, PyObject *args) {
  (void)m;
  long n;
  if (!PyArg_ParseTuple(args, "l", &n)) return NULL;
  double *out = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!out) return PyErr_NoMemory();
  uint64_t h = gw_dynamic(n, out);
  free(out);
  return PyLong_FromUnsignedLongLong(h);
}

static PyObject *py_static(PyObject *m, PyObject *args) {
  (void)m;
  long n;
  if (!PyArg_ParseTuple(args, "l", &n)) return NULL;
  return PyLong_FromUnsignedLongLong(gw_static(n));
}

static PyObject *py_barrier(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  return PyLong_FromLong(gw_barrier(n));
}

static PyObject *py_runtime(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyUnicode_DecodeFSDefault(gw_runtime());
}

static PyMethodDef methods[] = {
    {"parallel", py_parallel, METH_VARARGS, "n regions of 2 threads; returns 5n"},
    {"dynamic", py_dynamic, METH_VARARGS, "one region, dynamic,1 loop of n iterations; checksum"},
    {"static", py_static, METH_VARARGS, "one region, static loop of n iterations; checksum"},
    {"barrier", py_barrier, METH_VARARGS, "one region, n explicit barriers; returns 2n"},
    {"runtime", py_runtime, METH_NOARGS, "file of the library serving GOMP_parallel"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, STR(EXT_NAME), NULL, -1, methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC CAT(PyInit_, EXT_NAME)(void) { return PyModule_Create(&moduledef); }
