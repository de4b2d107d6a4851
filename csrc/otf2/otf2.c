/*
 * ompt_py._otf2: writes an OTF2 archive through libotf2 (README.md).  One
 * function, write(), called by ompt_py/io/otf2.py with the definitions as
 * lists and the events as arrays; the events are written without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <otf2/otf2.h>
#include <stdint.h>
#include <string.h>

#define ARCHIVE_NAME "traces"
#define EVENT_CHUNK (1 << 20)
#define DEF_CHUNK (4 << 20)

static OTF2_FlushType pre_flush(void *user, OTF2_FileType file, OTF2_LocationRef location,
                                void *caller, bool final) {
  (void)user, (void)file, (void)location, (void)caller, (void)final;
  return OTF2_FLUSH;
}

static OTF2_TimeStamp post_flush(void *user, OTF2_FileType file, OTF2_LocationRef location) {
  (void)user, (void)file, (void)location;
  return 0;
}

static OTF2_FlushCallbacks flush_callbacks = {pre_flush, post_flush};

/* A contiguous array of `n` items of `itemsize` bytes (n < 0: any, set); an
 * itemsize of 0: of 2 or 4 bytes (the buffer's), or of 8 bytes with -8. */
static const void *get_array(PyObject *obj, Py_buffer *buf, Py_ssize_t itemsize, Py_ssize_t *n,
                             const char *what) {
  if (PyObject_GetBuffer(obj, buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
  Py_ssize_t size = buf->itemsize;
  int fits = itemsize > 0    ? size == itemsize
             : itemsize == 0 ? size == 2 || size == 4
                             : size == 4 || size == 8;
  if (!fits || (*n >= 0 && buf->len != *n * size)) {
    PyErr_Format(PyExc_ValueError, "_otf2.write: %s: %zd items of %s bytes", what, *n,
                 itemsize > 0 ? (itemsize == 8 ? "8" : "4") : itemsize == 0 ? "2 or 4" : "4 or 8");
    return NULL;
  }
  *n = buf->len / size;
  return buf->buf;
}

/* Item i of an array of `size`-byte unsigned (4, 8: seq) or signed (2, 4: track) items. */
static inline int64_t item(const void *array, Py_ssize_t size, int is_signed, Py_ssize_t i) {
  switch (size) {
    case 2: return ((const int16_t *)array)[i];
    case 4: return is_signed ? (int64_t)((const int32_t *)array)[i]
                             : (int64_t)((const uint32_t *)array)[i];
    default: return ((const int64_t *)array)[i];
  }
}

/* OSError for a libotf2 error; returns -1. */
static int failed(OTF2_ErrorCode rc, const char *what) {
  if (rc == OTF2_SUCCESS) return 0;
  PyErr_Format(PyExc_OSError, "libotf2: %s: %s (%s)", what, OTF2_Error_GetDescription(rc),
               OTF2_Error_GetName(rc));
  return -1;
}

typedef struct {
  Py_ssize_t location;
  Py_buffer time_buf, *value_bufs;
  const int64_t *time;
  const int64_t **values;
  Py_ssize_t n;
} metric_series;

/* The definitions: strings, regions, the system tree node, groups, locations
 * (with their event counts), the metric's members and class. */
static int write_definitions(OTF2_Archive *archive, PyObject *strings, PyObject *regions,
                             PyObject *groups, PyObject *locations, const uint64_t *counts,
                             PyObject *members, uint64_t offset, uint64_t length) {
  OTF2_GlobalDefWriter *defs = OTF2_Archive_GetGlobalDefWriter(archive);
  if (!defs) return failed(OTF2_ERROR_MEM_ALLOC_FAILED, "global definitions");
  if (failed(OTF2_GlobalDefWriter_WriteClockProperties(defs, 1000000000, offset, length,
                                                       OTF2_UNDEFINED_TIMESTAMP),
             "clock"))
    return -1;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(strings); i++) {
    const char *text = PyUnicode_AsUTF8(PyList_GET_ITEM(strings, i));
    if (!text || failed(OTF2_GlobalDefWriter_WriteString(defs, (OTF2_StringRef)i, text), "string"))
      return -1;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(regions); i++) {
    unsigned int name, role, paradigm;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(regions, i), "III", &name, &role, &paradigm) ||
        failed(OTF2_GlobalDefWriter_WriteRegion(defs, (OTF2_RegionRef)i, name, name, name,
                                                (OTF2_RegionRole)role, (OTF2_Paradigm)paradigm,
                                                OTF2_REGION_FLAG_NONE, OTF2_UNDEFINED_STRING, 0,
                                                0),
               "region"))
      return -1;
  }
  /* strings[0] names the machine, strings[1] its class */
  if (failed(OTF2_GlobalDefWriter_WriteSystemTreeNode(defs, 0, 0, 1, OTF2_UNDEFINED_SYSTEM_TREE_NODE),
             "system tree node"))
    return -1;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(groups); i++) {
    unsigned int name, type;
    int creator;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(groups, i), "IIi", &name, &type, &creator) ||
        failed(OTF2_GlobalDefWriter_WriteLocationGroup(
                   defs, (OTF2_LocationGroupRef)i, name, (OTF2_LocationGroupType)type, 0,
                   creator < 0 ? OTF2_UNDEFINED_LOCATION_GROUP : (OTF2_LocationGroupRef)creator),
               "location group"))
      return -1;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(locations); i++) {
    unsigned int name, type, group;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(locations, i), "III", &name, &type, &group) ||
        failed(OTF2_GlobalDefWriter_WriteLocation(defs, (OTF2_LocationRef)i, name,
                                                  (OTF2_LocationType)type, counts[i], group),
               "location"))
      return -1;
  }
  Py_ssize_t nmembers = PyList_GET_SIZE(members);
  OTF2_MetricMemberRef refs[256];
  for (Py_ssize_t i = 0; i < nmembers && i < 256; i++) {
    unsigned int name, unit;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(members, i), "II", &name, &unit) ||
        failed(OTF2_GlobalDefWriter_WriteMetricMember(
                   defs, (OTF2_MetricMemberRef)i, name, name, OTF2_METRIC_TYPE_OTHER,
                   OTF2_METRIC_ABSOLUTE_POINT, OTF2_TYPE_INT64, OTF2_BASE_DECIMAL, 0, unit),
               "metric member"))
      return -1;
    refs[i] = (OTF2_MetricMemberRef)i;
  }
  if (nmembers &&
      failed(OTF2_GlobalDefWriter_WriteMetricClass(defs, 0, (uint8_t)nmembers, refs,
                                                   OTF2_METRIC_SYNCHRONOUS_STRICT,
                                                   OTF2_RECORDER_KIND_ABSTRACT),
             "metric class"))
    return -1;
  return failed(OTF2_Archive_CloseGlobalDefWriter(archive, defs), "global definitions");
}

PyDoc_STRVAR(write_doc,
             "write(directory, strings, regions, groups, locations, seq, begin, end, track, "
             "region, members, metrics, offset, length, properties, /)\n--\n\n"
             "An OTF2 archive in `directory` (traces.otf2, traces.def, traces/): strings (the "
             "StringRef is the index; 0 and 1 name the system tree node and its class), "
             "regions [(name, role, paradigm)], location groups [(name, type, creating group "
             "or -1)], locations [(name, type, group)]; the Enter (seq 2i) and Leave (2i + 1) "
             "events of slice i of region region[i] (int32) on location track[i] (int16 or "
             "int32) at begin[i] and end[i] (int64 ns) in the order of seq (uint32 or int64: "
             "each location's in time order); metric members [(name, unit)] and per series (location, times, "
             "[values per member]) a Metric event per time; the clock from offset, length ns; "
             "the archive's properties [(name, value)] (names NAMESPACE::NAME).");

static PyObject *py_write(PyObject *m, PyObject *args) {
  (void)m;
  const char *directory;
  PyObject *strings, *regions, *groups, *locations, *objs[5], *members, *metrics, *properties;
  unsigned long long offset, length;
  Py_buffer bufs[5] = {{0}};
  Py_ssize_t n = -1, nseq = -1, nlocations;
  metric_series *series = NULL;
  Py_ssize_t nseries = 0;
  uint64_t *counts = NULL;
  OTF2_EvtWriter **writers = NULL;
  OTF2_Archive *archive = NULL;
  PyObject *result = NULL;
  if (!PyArg_ParseTuple(args, "sO!O!O!O!OOOOOO!O!KKO!", &directory, &PyList_Type, &strings,
                        &PyList_Type, &regions, &PyList_Type, &groups, &PyList_Type, &locations,
                        &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &PyList_Type, &members,
                        &PyList_Type, &metrics, &offset, &length, &PyList_Type, &properties))
    return NULL;
  const void *seq = get_array(objs[0], &bufs[0], -8, &nseq, "seq");
  const int64_t *begin = seq ? get_array(objs[1], &bufs[1], 8, &n, "begin") : NULL;
  const int64_t *end = begin ? get_array(objs[2], &bufs[2], 8, &n, "end") : NULL;
  const void *track = end ? get_array(objs[3], &bufs[3], 0, &n, "track") : NULL;
  const int32_t *region = track ? get_array(objs[4], &bufs[4], 4, &n, "region") : NULL;
  if (!region) goto done;
  Py_ssize_t seq_size = bufs[0].itemsize, track_size = bufs[3].itemsize;
  nlocations = PyList_GET_SIZE(locations);
  for (Py_ssize_t i = 0; i < n; i++) {
    int64_t at = item(track, track_size, 1, i);
    if (at < 0 || at >= nlocations || region[i] < 0 || region[i] >= PyList_GET_SIZE(regions)) {
      PyErr_SetString(PyExc_ValueError, "_otf2.write: a slice's location or region is not defined");
      goto done;
    }
  }
  for (Py_ssize_t k = 0; k < nseq; k++) {
    int64_t e = item(seq, seq_size, 0, k);
    if (e < 0 || e / 2 >= n) {
      PyErr_SetString(PyExc_ValueError, "_otf2.write: seq names a slice that is not there");
      goto done;
    }
  }
  nseries = PyList_GET_SIZE(metrics);
  Py_ssize_t nmembers = PyList_GET_SIZE(members);
  if (nmembers > 255 || PyList_GET_SIZE(strings) < 2) {
    PyErr_SetString(PyExc_ValueError, "_otf2.write: at most 255 metric members, 2 strings or more");
    goto done;
  }
  series = PyMem_Calloc((size_t)nseries + 1, sizeof *series);
  counts = PyMem_Calloc((size_t)nlocations + 1, sizeof *counts);
  writers = PyMem_Calloc((size_t)nlocations + 1, sizeof *writers);
  if (!series || !counts || !writers) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t s = 0; s < nseries; s++) {
    metric_series *ms = &series[s];
    PyObject *time, *values;
    ms->n = -1;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(metrics, s), "nOO!", &ms->location, &time,
                          &PyList_Type, &values))
      goto done;
    if (ms->location < 0 || ms->location >= nlocations || PyList_GET_SIZE(values) != nmembers) {
      PyErr_SetString(PyExc_ValueError, "_otf2.write: a metric series of another location or "
                                        "number of members");
      goto done;
    }
    ms->value_bufs = PyMem_Calloc((size_t)nmembers + 1, sizeof *ms->value_bufs);
    ms->values = PyMem_Calloc((size_t)nmembers + 1, sizeof *ms->values);
    if (!ms->value_bufs || !ms->values) {
      PyErr_NoMemory();
      goto done;
    }
    ms->time = get_array(time, &ms->time_buf, 8, &ms->n, "metric times");
    if (!ms->time) goto done;
    for (Py_ssize_t k = 0; k < nmembers; k++)
      if (!(ms->values[k] = get_array(PyList_GET_ITEM(values, k), &ms->value_bufs[k], 8, &ms->n,
                                      "metric values")))
        goto done;
  }
  archive = OTF2_Archive_Open(directory, ARCHIVE_NAME, OTF2_FILEMODE_WRITE, EVENT_CHUNK,
                              DEF_CHUNK, OTF2_SUBSTRATE_POSIX, OTF2_COMPRESSION_NONE);
  if (!archive) {
    PyErr_Format(PyExc_OSError, "libotf2: cannot create an archive in %s", directory);
    goto done;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(properties); i++) {
    const char *name, *value;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(properties, i), "ss", &name, &value) ||
        failed(OTF2_Archive_SetProperty(archive, name, value, true), name))
      goto done;
  }
  if (failed(OTF2_Archive_SetCreator(archive, "ompt-py"), "creator") ||
      failed(OTF2_Archive_SetFlushCallbacks(archive, &flush_callbacks, NULL), "flush") ||
      failed(OTF2_Archive_SetSerialCollectiveCallbacks(archive), "collectives") ||
      failed(OTF2_Archive_OpenEvtFiles(archive), "event files"))
    goto done;
  for (Py_ssize_t i = 0; i < nlocations; i++)
    if (!(writers[i] = OTF2_Archive_GetEvtWriter(archive, (OTF2_LocationRef)i))) {
      failed(OTF2_ERROR_MEM_ALLOC_FAILED, "event writer");
      goto done;
    }
  OTF2_ErrorCode rc = OTF2_SUCCESS;
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t k = 0; k < nseq && rc == OTF2_SUCCESS; k++) {
    int64_t e = item(seq, seq_size, 0, k), i = e / 2, at = item(track, track_size, 1, i);
    counts[at]++;
    rc = e & 1 ? OTF2_EvtWriter_Leave(writers[at], NULL, (OTF2_TimeStamp)end[i],
                                      (OTF2_RegionRef)region[i])
               : OTF2_EvtWriter_Enter(writers[at], NULL, (OTF2_TimeStamp)begin[i],
                                      (OTF2_RegionRef)region[i]);
  }
  OTF2_Type types[256];
  OTF2_MetricValue values[256];
  for (Py_ssize_t k = 0; k < nmembers; k++) types[k] = OTF2_TYPE_INT64;
  for (Py_ssize_t s = 0; s < nseries && rc == OTF2_SUCCESS; s++) {
    metric_series *ms = &series[s];
    for (Py_ssize_t j = 0; j < ms->n && rc == OTF2_SUCCESS; j++) {
      for (Py_ssize_t k = 0; k < nmembers; k++) values[k].signed_int = ms->values[k][j];
      counts[ms->location]++;
      rc = OTF2_EvtWriter_Metric(writers[ms->location], NULL, (OTF2_TimeStamp)ms->time[j], 0,
                                 (uint8_t)nmembers, types, values);
    }
  }
  Py_END_ALLOW_THREADS;
  if (failed(rc, "event"))
    goto done;
  for (Py_ssize_t i = 0; i < nlocations; i++) {
    OTF2_EvtWriter *w = writers[i];
    writers[i] = NULL;
    if (failed(OTF2_Archive_CloseEvtWriter(archive, w), "event writer")) goto done;
  }
  if (failed(OTF2_Archive_CloseEvtFiles(archive), "event files") ||
      failed(OTF2_Archive_OpenDefFiles(archive), "definition files"))
    goto done;
  for (Py_ssize_t i = 0; i < nlocations; i++) {
    OTF2_DefWriter *local = OTF2_Archive_GetDefWriter(archive, (OTF2_LocationRef)i);
    if (!local || failed(OTF2_Archive_CloseDefWriter(archive, local), "local definitions"))
      goto done;
  }
  if (failed(OTF2_Archive_CloseDefFiles(archive), "definition files") ||
      write_definitions(archive, strings, regions, groups, locations, counts, members, offset,
                        length) < 0)
    goto done;
  rc = OTF2_Archive_Close(archive);
  archive = NULL;
  if (failed(rc, "close")) goto done;
  Py_INCREF(Py_None);
  result = Py_None;
done:
  if (archive) {
    for (Py_ssize_t i = 0; writers && i < nlocations; i++)
      if (writers[i]) OTF2_Archive_CloseEvtWriter(archive, writers[i]);
    OTF2_Archive_Close(archive);
  }
  for (Py_ssize_t s = 0; series && s < nseries; s++) {
    for (Py_ssize_t k = 0; series[s].value_bufs && k < nmembers; k++)
      if (series[s].value_bufs[k].obj) PyBuffer_Release(&series[s].value_bufs[k]);
    if (series[s].time_buf.obj) PyBuffer_Release(&series[s].time_buf);
    PyMem_Free(series[s].value_bufs);
    PyMem_Free(series[s].values);
  }
  PyMem_Free(series);
  PyMem_Free(counts);
  PyMem_Free(writers);
  for (int b = 0; b < 5; b++)
    if (bufs[b].obj) PyBuffer_Release(&bufs[b]);
  return result;
}

static PyMethodDef methods[] = {
    {"write", py_write, METH_VARARGS, write_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "ompt_py._otf2",
    "OTF2 archives written through libotf2 (ompt_py.io.otf2).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__otf2(void) {
  PyObject *m = PyModule_Create(&moduledef);
  if (m && PyModule_AddStringConstant(m, "OTF2_VERSION", OTF2_VERSION) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
