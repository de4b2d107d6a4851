/*
 * The one internal header of the extension: every file of csrc/ext includes
 * it first.  It brings in Python.h and the tool's exported API, declares what
 * each file adds to the module (module.c's method table lists them all), and
 * holds the error helpers, so that every binding raises the same way.
 */
#ifndef OMPTPY_EXT_H
#define OMPTPY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "omptpy.h"
#include "tool/omptpy_api.h"

/* ---- results and errors ------------------------------------------------------- */

/* OSError for a tool function's -errno result, about `what`; returns NULL (module.c). */
PyObject *omptpy_py_oserror(int rc, const char *what);

/* A new reference to None: the result of a kernel that writes its outputs in
 * place (Py_NewRef(Py_None), which Python 3.9 lacks). */
static inline PyObject *omptpy_py_none(void) {
  Py_INCREF(Py_None);
  return Py_None;
}

/* ---- records.c: the Records type --------------------------------------------- */

int omptpy_py_add_records_type(PyObject *module);
PyObject *omptpy_py_take(PyObject *m, PyObject *args);

/* ---- columns.c: record columns in bulk --------------------------------------- */

/* What indexes the table of a lookup of columns() (the module's KEY_*). */
enum {
  KEY_EVENT,          /* the event number */
  KEY_ENDPOINT,       /* the endpoint byte */
  KEY_EVENT_KIND,     /* event << 8 | kind */
  KEY_EVENT_ENDPOINT, /* event << 8 | endpoint */
  KEYS
};

PyObject *omptpy_py_scan(PyObject *m, PyObject *args);
PyObject *omptpy_py_columns(PyObject *m, PyObject *args);
PyObject *omptpy_py_tick_scale(PyObject *m, PyObject *args);
PyObject *omptpy_py_ticks_to_ns(PyObject *m, PyObject *args);

/* ---- pairing.c: keys, hash tables, begin/end pairing, lookups ------------------ */

PyObject *omptpy_py_pair(PyObject *m, PyObject *args);
PyObject *omptpy_py_find(PyObject *m, PyObject *args);

/* ---- format.c: rows of text ---------------------------------------------------- */

/* How format_rows() writes a column's values (the module's FORMAT_*). */
enum {
  FORMAT_NUMBER, /* in decimal */
  FORMAT_MICROS, /* nanoseconds as microseconds with three decimals: -1234 -> -1.234 */
  FORMAT_HEX,    /* as a JSON string "0x1f" */
  FORMAT_TEXT,   /* a code: table[code]; `null` for a code outside the table */
  FORMAT_KINDS
};

PyObject *omptpy_py_format_rows(PyObject *m, PyObject *args);

/* ---- pystack.c: Python call stacks for the tool's records ------------------------ */

#define OMPTPY_PY_MAX_DEPTH 256
/* Why this build cannot capture Python stacks, or NULL. */
const char *omptpy_py_stacks_unsupported(void);
PyObject *omptpy_py_python_stacks(PyObject *m, PyObject *arg);
PyObject *omptpy_py_stack_tables(PyObject *m, PyObject *args);
PyObject *omptpy_py_time_captures(PyObject *m, PyObject *arg);

#endif /* OMPTPY_EXT_H */
