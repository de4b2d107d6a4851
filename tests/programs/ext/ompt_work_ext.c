/*
 * A CPython extension module that runs the workloads of ../work.h, for the
 * in-process tests.  Built by tests/conftest.py with clang-19 -fopenmp (LLVM
 * libomp) and, for the libgomp test, with gcc -fopenmp.  EXT_NAME is the
 * module name (default ompt_work_ext).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../work.h"

#ifndef EXT_NAME
#define EXT_NAME ompt_work_ext
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#define INT_WORK(name)                                            \
  static PyObject *py_##name(PyObject *m, PyObject *args) {       \
    (void)m;                                                      \
    int n;                                                        \
    if (!PyArg_ParseTuple(args, "i", &n)) return NULL;            \
    work_##name(n);                                               \
    Py_RETURN_NONE;                                               \
  }
INT_WORK(parallel)
INT_WORK(tasks)
INT_WORK(loops)
INT_WORK(sections)
INT_WORK(single)
INT_WORK(barrier)
INT_WORK(masked)

static PyObject *py_critical(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  return PyLong_FromLong(work_critical(n));
}

static PyObject *py_dispatch(PyObject *m, PyObject *args) {
  (void)m;
  long n;
  if (!PyArg_ParseTuple(args, "l", &n)) return NULL;
  work_dispatch(n);
  Py_RETURN_NONE;
}

static PyObject *py_nested(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  work_nested();
  Py_RETURN_NONE;
}

/* work_parallel with the GIL released, as NumPy, scikit-learn and PyTorch do. */
static PyObject *py_parallel_nogil(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  Py_BEGIN_ALLOW_THREADS work_parallel(n);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* n explicit tasks created outside any parallel region (by the initial task). */
static PyObject *py_serial_tasks(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  for (int i = 0; i < n; i++) {
#pragma omp task
    OPAQUE();
  }
#pragma omp taskwait
  Py_RETURN_NONE;
}

/* Two "operators" sharing one generic parallel loop, as PyTorch's kernels share
 * TensorIteratorBase::for_each: the regions' code address is for_each's for
 * both; only native frames above it tell them apart. */
static volatile int sink;
static void add_one(int i) { sink += i; }
static void mul_one(int i) { sink *= i; }
__attribute__((noinline)) static void for_each(int n, void (*body)(int)) {
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < n; i++) body(i);
}
__attribute__((noinline)) static void add_kernel(int n) {
  for_each(n, add_one);
  OPAQUE(); /* no tail call: this frame stays on the stack */
}
__attribute__((noinline)) static void mul_kernel(int n) {
  for_each(n, mul_one);
  OPAQUE();
}

static PyObject *py_op(PyObject *m, PyObject *args) {
  (void)m;
  const char *name;
  int n;
  if (!PyArg_ParseTuple(args, "si", &name, &n)) return NULL;
  int add = strcmp(name, "add") == 0;
  if (!add && strcmp(name, "mul") != 0) return PyErr_Format(PyExc_ValueError, "no op %s", name);
  Py_BEGIN_ALLOW_THREADS if (add) add_kernel(n);
  else mul_kernel(n);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* Initialises the OpenMP runtime (any omp_* call does). */
static PyObject *py_max_threads(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyLong_FromLong(omp_get_max_threads());
}

static PyMethodDef methods[] = {
    {"parallel", py_parallel, METH_VARARGS, "n regions of 2 threads"},
    {"tasks", py_tasks, METH_VARARGS, "one region, n explicit tasks from a single"},
    {"loops", py_loops, METH_VARARGS, "static then dynamic,1 loop of n iterations"},
    {"sections", py_sections, METH_VARARGS, "n regions with 3 sections"},
    {"single", py_single, METH_VARARGS, "n regions with a single"},
    {"barrier", py_barrier, METH_VARARGS, "one region, n explicit barriers"},
    {"masked", py_masked, METH_VARARGS, "n regions with a masked construct"},
    {"critical", py_critical, METH_VARARGS, "one region, n critical + n lock per thread"},
    {"dispatch", py_dispatch, METH_VARARGS, "one region, dynamic,1 loop of n iterations"},
    {"nested", py_nested, METH_NOARGS, "2 threads each opening 2 threads"},
    {"parallel_nogil", py_parallel_nogil, METH_VARARGS, "parallel(n) without the GIL"},
    {"serial_tasks", py_serial_tasks, METH_VARARGS, "n explicit tasks outside any region"},
    {"op", py_op, METH_VARARGS, "op(\"add\" or \"mul\", n): a kernel's loop through for_each"},
    {"max_threads", py_max_threads, METH_NOARGS, "omp_get_max_threads()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, STR(EXT_NAME), NULL, -1, methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC CAT(PyInit_, EXT_NAME)(void) { return PyModule_Create(&moduledef); }
