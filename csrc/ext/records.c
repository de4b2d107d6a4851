/*
 * The Records type: what take() hands over from the tool's memory sink, a
 * writable buffer of 64-byte records.  Records cross as one buffer per
 * take(), without a copy: numpy wraps the tool's mapping, which is unmapped
 * when the last view of it goes away.
 */
#include "ext.h"

typedef struct {
  PyObject_HEAD
  void *base;
  size_t nrecs;
  size_t mapped;
} RecordsObject;

static int records_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  RecordsObject *r = (RecordsObject *)self;
  static char empty[1];
  void *p = r->base ? r->base : empty;
  return PyBuffer_FillInfo(view, self, p, (Py_ssize_t)(r->nrecs * sizeof(omptpy_record)), 0,
                           flags);
}

static void records_dealloc(PyObject *self) {
  RecordsObject *r = (RecordsObject *)self;
  if (r->base) omptpy_release(r->base, r->mapped);
  Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t records_len(PyObject *self) { return (Py_ssize_t)((RecordsObject *)self)->nrecs; }

static PyBufferProcs records_as_buffer = {records_getbuffer, NULL};
static PySequenceMethods records_as_sequence = {.sq_length = records_len};

static PyTypeObject RecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ompt_py._core.Records",
    .tp_basicsize = sizeof(RecordsObject),
    .tp_dealloc = records_dealloc,
    .tp_as_buffer = &records_as_buffer,
    .tp_as_sequence = &records_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records taken from the tool's memory sink (a writable buffer of 64-byte records).",
};

PyObject *omptpy_py_take(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  RecordsObject *r = PyObject_New(RecordsObject, &RecordsType);
  if (!r) return NULL;
  /* Without the GIL: the zero-copy take() hands the last records to the
   * handlers' queue, which may wait for their dispatcher (block=True). */
  void *base;
  size_t nrecs, mapped;
  Py_BEGIN_ALLOW_THREADS base = omptpy_take(&nrecs, &mapped);
  Py_END_ALLOW_THREADS r->base = base;
  r->nrecs = nrecs;
  r->mapped = mapped;
  return (PyObject *)r;
}

int omptpy_py_add_records_type(PyObject *module) {
  if (PyType_Ready(&RecordsType) < 0) return -1;
  Py_INCREF(&RecordsType);
  if (PyModule_AddObject(module, "Records", (PyObject *)&RecordsType) < 0) {
    Py_DECREF(&RecordsType);
    return -1;
  }
  return 0;
}
