/*
 * A CPython extension for the scripting-callback tests (tests/test_handlers.py,
 * test_native.py, test_control.py), built by tests/conftest.py with clang-19
 * -fopenmp and -I <ompt_py.include_dir()>.  Some functions keep the GIL while
 * OpenMP threads run (as many extensions do), others release it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#include <omptpy_region.h>

#include "../work.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* tasks_nogil(n): work_tasks(n) (one region, n explicit tasks) without the GIL. */
static PyObject *py_tasks_nogil(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  Py_BEGIN_ALLOW_THREADS work_tasks(n);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* steady(seconds, period_us): without the GIL, one region with a few tasks every
 * period_us for `seconds`: events keep coming at a steady pace.  Returns the
 * number of regions. */
static PyObject *py_steady(PyObject *m, PyObject *args) {
  (void)m;
  double seconds;
  long period_us;
  if (!PyArg_ParseTuple(args, "dl", &seconds, &period_us)) return NULL;
  long regions = 0;
  Py_BEGIN_ALLOW_THREADS double end = now_s() + seconds;
  while (now_s() < end) {
    work_tasks(4);
    regions++;
    struct timespec pause = {0, period_us * 1000L};
    nanosleep(&pause, NULL);
  }
  Py_END_ALLOW_THREADS return PyLong_FromLong(regions);
}

/* busy_with_gil(iterations): keeps the GIL while both threads of a region run
 * dynamic,1 loops of 1000 iterations (one dispatch event each) until
 * `iterations` (rounded up to a thousand) are done: a count, not a time, so
 * that a busy machine makes as many events.  Returns the iterations. */
static PyObject *py_busy_with_gil(PyObject *m, PyObject *args) {
  (void)m;
  long iterations;
  if (!PyArg_ParseTuple(args, "l", &iterations)) return NULL;
  long total = 0, rounds = (iterations + 999) / 1000;
#pragma omp parallel num_threads(2) reduction(+ : total)
  for (long r = 0; r < rounds; r++) {
#pragma omp for schedule(dynamic, 1)
    for (int i = 0; i < 1000; i++) {
      OPAQUE();
      total++;
    }
  }
  return PyLong_FromLong(total);
}

/* control(command, modifier, with_arg): omp_control_tool from C; the arg is
 * the address of a static string when with_arg. */
static const char CONTROL_ARG[] = "ompt-py test argument";

static PyObject *py_control(PyObject *m, PyObject *args) {
  (void)m;
  int command, modifier, with_arg = 0;
  if (!PyArg_ParseTuple(args, "ii|p", &command, &modifier, &with_arg)) return NULL;
  return PyLong_FromLong(omp_control_tool(command, modifier, with_arg ? (void *)CONTROL_ARG : NULL));
}

static PyObject *py_control_arg(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)CONTROL_ARG);
}

/* pause_resume(): three regions of 2 threads; omp_control_tool pauses before
 * the second and starts again before the third, all in C.  Returns the three
 * results (pause, start, flush). */
static PyObject *py_pause_resume(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  work_parallel(1);
  int paused = omp_control_tool(omp_control_tool_pause, 0, NULL);
  work_parallel(1);
  int started = omp_control_tool(omp_control_tool_start, 0, NULL);
  work_parallel(1);
  int flushed = omp_control_tool(omp_control_tool_flush, 0, NULL);
  return Py_BuildValue("(iii)", paused, started, flushed);
}

/* c_regions(n): n times: region "c_outer" around a parallel region of 2 threads
 * in which each thread marks "c_inner" (nested twice: "c_leaf" inside). */
static PyObject *py_c_regions(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  for (int i = 0; i < n; i++) {
    ompt_py_region_begin("c_outer");
#pragma omp parallel num_threads(2)
    {
      ompt_py_region_begin("c_inner");
      ompt_py_region_begin("c_leaf");
      OPAQUE();
      ompt_py_region_end("c_leaf");
      ompt_py_region_end("c_inner");
    }
    ompt_py_region_end("c_outer");
  }
  Py_RETURN_NONE;
}

/* error_directive(): an OpenMP error directive (a warning) with a message. */
static PyObject *py_error_directive(PyObject *m, PyObject *args) {
  (void)m, (void)args;
#pragma omp error at(execution) severity(warning) message("from scripting_ext")
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"tasks_nogil", py_tasks_nogil, METH_VARARGS, "work_tasks(n) without the GIL"},
    {"steady", py_steady, METH_VARARGS, "steady(seconds, period_us): a region every period"},
    {"busy_with_gil", py_busy_with_gil, METH_VARARGS,
     "busy_with_gil(iterations): dispatch events on 2 threads while holding the GIL"},
    {"control", py_control, METH_VARARGS, "omp_control_tool(command, modifier, arg?)"},
    {"control_arg", py_control_arg, METH_NOARGS, "the address control() passes as arg"},
    {"pause_resume", py_pause_resume, METH_NOARGS, "regions around pause and start, in C"},
    {"c_regions", py_c_regions, METH_VARARGS, "region markers from C (omptpy_region.h)"},
    {"error_directive", py_error_directive, METH_NOARGS, "#pragma omp error, a warning"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "scripting_ext", NULL, -1, methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_scripting_ext(void) { return PyModule_Create(&moduledef); }
