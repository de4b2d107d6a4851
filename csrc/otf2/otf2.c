/*
 * ompt_py._otf2: writes an OTF2 archive through libotf2 (README.md).  One
 * type, Archive, used by ompt_py/io/otf2.py: opened on a directory, it takes
 * the events a part at a time (the slices' Enter and Leave events as arrays,
 * then each metric series), written without the GIL, and the definitions as
 * lists when it closes; so the caller frees the arrays of one part before it
 * makes the next.  One function, definitions: an archive of definitions and
 * mapping tables only, into which a dataset's parts' event files are moved.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <otf2/otf2.h>
#include <stdint.h>
#include <string.h>

#define ARCHIVE_NAME "traces"
#define EVENT_CHUNK (1 << 20)
#define DEF_CHUNK (4 << 20)
#define MAX_MEMBERS 255
/* The event chunks held in all (and one per writer that holds none): libotf2's
 * own pool keeps up to 128 MiB of chunks per location before it writes any. */
#define CHUNKS_HELD 16

/* libotf2 writes a buffer out when it may have no more chunks: the events are
 * the archive's own, so the buffer flush is no event of the program's (no
 * post-flush callback: no BufferFlush record in the trace). */
static OTF2_FlushType pre_flush(void *user, OTF2_FileType file, OTF2_LocationRef location,
                                void *caller, bool final) {
  (void)user, (void)file, (void)location, (void)caller, (void)final;
  return OTF2_FLUSH;
}

static OTF2_FlushCallbacks flush_callbacks = {pre_flush, NULL};

/* A contiguous array of `n` items of `itemsize` bytes (n < 0: any, set); an
 * itemsize of 0: of 2 or 4 bytes (the buffer's), or of 4 or 8 bytes with -8. */
static const void *get_array(PyObject *obj, Py_buffer *buf, Py_ssize_t itemsize, Py_ssize_t *n,
                             const char *what) {
  if (PyObject_GetBuffer(obj, buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
  Py_ssize_t size = buf->itemsize;
  int fits = itemsize > 0    ? size == itemsize
             : itemsize == 0 ? size == 2 || size == 4
                             : size == 4 || size == 8;
  if (!fits || (*n >= 0 && buf->len != *n * size)) {
    PyErr_Format(PyExc_ValueError, "_otf2: %s: %zd items of %s bytes", what, *n,
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

/* The definitions: strings, regions, the system tree nodes, groups, locations
 * (with their event counts: `counts`, or NULL: each location's fourth item), the
 * metric's members and class. */
static int write_definitions(OTF2_Archive *archive, PyObject *strings, PyObject *regions,
                             PyObject *nodes, PyObject *groups, PyObject *locations,
                             const uint64_t *counts, PyObject *members, uint64_t offset,
                             uint64_t length) {
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
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
    unsigned int name, class_name;
    int parent;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(nodes, i), "IIi", &name, &class_name, &parent))
      return -1;
    if (parent >= i) {
      PyErr_SetString(PyExc_ValueError,
                      "_otf2: Archive.close: a system tree node's parent is not defined before it");
      return -1;
    }
    if (failed(OTF2_GlobalDefWriter_WriteSystemTreeNode(
                   defs, (OTF2_SystemTreeNodeRef)i, name, class_name,
                   parent < 0 ? OTF2_UNDEFINED_SYSTEM_TREE_NODE : (OTF2_SystemTreeNodeRef)parent),
               "system tree node"))
      return -1;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(groups); i++) {
    unsigned int name, type, node;
    int creator;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(groups, i), "IIiI", &name, &type, &creator, &node))
      return -1;
    if (node >= PyList_GET_SIZE(nodes)) {
      PyErr_SetString(PyExc_ValueError,
                      "_otf2: Archive.close: a location group's system tree node is not defined");
      return -1;
    }
    if (failed(OTF2_GlobalDefWriter_WriteLocationGroup(
                   defs, (OTF2_LocationGroupRef)i, name, (OTF2_LocationGroupType)type,
                   (OTF2_SystemTreeNodeRef)node,
                   creator < 0 ? OTF2_UNDEFINED_LOCATION_GROUP : (OTF2_LocationGroupRef)creator),
               "location group"))
      return -1;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(locations); i++) {
    unsigned int name, type, group;
    unsigned long long events = 0;
    PyObject *location = PyList_GET_ITEM(locations, i);
    if (!(counts ? PyArg_ParseTuple(location, "III", &name, &type, &group)
                 : PyArg_ParseTuple(location, "IIIK", &name, &type, &group, &events)) ||
        failed(OTF2_GlobalDefWriter_WriteLocation(defs, (OTF2_LocationRef)i, name,
                                                  (OTF2_LocationType)type,
                                                  counts ? counts[i] : events, group),
               "location"))
      return -1;
  }
  Py_ssize_t nmembers = PyList_GET_SIZE(members);
  OTF2_MetricMemberRef refs[MAX_MEMBERS];
  for (Py_ssize_t i = 0; i < nmembers && i < MAX_MEMBERS; i++) {
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

/* The archive's properties [(name, value)]. */
static int set_properties(OTF2_Archive *archive, PyObject *properties) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(properties); i++) {
    const char *name, *value;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(properties, i), "ss", &name, &value) ||
        failed(OTF2_Archive_SetProperty(archive, name, value, true), name))
      return -1;
  }
  return 0;
}

/* An archive opened for writing in `directory` (NULL with an OSError). */
static OTF2_Archive *open_archive(const char *directory) {
  OTF2_Archive *archive = OTF2_Archive_Open(directory, ARCHIVE_NAME, OTF2_FILEMODE_WRITE,
                                            EVENT_CHUNK, DEF_CHUNK, OTF2_SUBSTRATE_POSIX,
                                            OTF2_COMPRESSION_NONE);
  if (!archive) {
    PyErr_Format(PyExc_OSError, "libotf2: cannot create an archive in %s", directory);
    return NULL;
  }
  if (failed(OTF2_Archive_SetCreator(archive, "ompt-py"), "creator") ||
      failed(OTF2_Archive_SetFlushCallbacks(archive, &flush_callbacks, NULL), "flush") ||
      failed(OTF2_Archive_SetSerialCollectiveCallbacks(archive), "collectives")) {
    OTF2_Archive_Close(archive);
    return NULL;
  }
  return archive;
}

/* ---- Archive ---------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  OTF2_Archive *archive;               /* NULL: closed */
  OTF2_EvtWriter **writers;            /* per location, made at its first event */
  uint64_t *counts;                    /* the events of each location */
  Py_ssize_t room;                     /* of writers and counts */
  Py_ssize_t locations, regions;       /* 1 + the largest of an event (0: none) */
  Py_ssize_t members;                  /* of the Metric events (-1: none yet) */
  Py_ssize_t chunks;                   /* event chunks held (chunk_allocate) */
  int busy;                            /* writing, without the GIL */
} ArchiveObject;

/* The chunks of one of libotf2's buffers. */
typedef struct {
  Py_ssize_t n, room;
  void **at;
} chunk_list;

/* libotf2's memory callbacks: a chunk for a buffer, or NULL (the buffer is then
 * written out, its chunks freed, and one asked for again) when it holds some
 * and CHUNKS_HELD event chunks are held in all. */
static void *chunk_allocate(void *user, OTF2_FileType file, OTF2_LocationRef location,
                            void **buffer, uint64_t size) {
  (void)location;
  ArchiveObject *self = user;
  chunk_list *mine = *buffer;
  if (!mine && !(mine = *buffer = calloc(1, sizeof *mine))) return NULL;
  int events = file == OTF2_FILETYPE_EVENTS;
  if (events && mine->n && self->chunks >= CHUNKS_HELD) return NULL;
  if (mine->n == mine->room) {
    Py_ssize_t room = mine->room ? 2 * mine->room : 4;
    void **at = realloc(mine->at, (size_t)room * sizeof *at);
    if (!at) return NULL;
    mine->at = at;
    mine->room = room;
  }
  void *chunk = malloc(size);
  if (chunk) {
    mine->at[mine->n++] = chunk;
    self->chunks += events;
  }
  return chunk;
}

static void chunk_free_all(void *user, OTF2_FileType file, OTF2_LocationRef location,
                           void **buffer, bool final) {
  (void)location;
  ArchiveObject *self = user;
  chunk_list *mine = *buffer;
  if (!mine) return;
  for (Py_ssize_t i = 0; i < mine->n; i++) free(mine->at[i]);
  if (file == OTF2_FILETYPE_EVENTS) self->chunks -= mine->n;
  mine->n = 0;
  if (final) {
    free(mine->at);
    free(mine);
    *buffer = NULL;
  }
}

static OTF2_MemoryCallbacks memory_callbacks = {chunk_allocate, chunk_free_all};

/* Closes what is open of the archive (left as it is on disk) and forgets it. */
static void abandon(ArchiveObject *self) {
  if (self->archive) {
    for (Py_ssize_t i = 0; i < self->room; i++)
      if (self->writers[i]) OTF2_Archive_CloseEvtWriter(self->archive, self->writers[i]);
    OTF2_Archive_Close(self->archive);
    self->archive = NULL;
  }
  PyMem_Free(self->writers);
  PyMem_Free(self->counts);
  self->writers = NULL;
  self->counts = NULL;
  self->room = 0;
}

/* -1 with an exception unless the archive is open and no other thread writes it. */
static int usable(ArchiveObject *self) {
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "_otf2.Archive: another thread is writing it");
    return -1;
  }
  if (!self->archive) {
    PyErr_SetString(PyExc_ValueError, "_otf2.Archive: closed");
    return -1;
  }
  return 0;
}

/* The event writers of locations 0 .. n - 1, made (with the GIL: may raise). */
static int writers_upto(ArchiveObject *self, Py_ssize_t n) {
  if (n > self->room) {
    OTF2_EvtWriter **writers = PyMem_Realloc(self->writers, (size_t)n * sizeof *writers);
    if (writers) self->writers = writers;
    uint64_t *counts = PyMem_Realloc(self->counts, (size_t)n * sizeof *counts);
    if (counts) self->counts = counts;
    if (!writers || !counts) {
      PyErr_NoMemory();
      return -1;
    }
    memset(writers + self->room, 0, (size_t)(n - self->room) * sizeof *writers);
    memset(counts + self->room, 0, (size_t)(n - self->room) * sizeof *counts);
    self->room = n;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (!self->writers[i] &&
        !(self->writers[i] = OTF2_Archive_GetEvtWriter(self->archive, (OTF2_LocationRef)i)))
      return failed(OTF2_ERROR_MEM_ALLOC_FAILED, "event writer");
  return 0;
}

static PyObject *archive_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  const char *directory;
  static char *kwlist[] = {"directory", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "s:Archive", kwlist, &directory)) return NULL;
  ArchiveObject *self = (ArchiveObject *)type->tp_alloc(type, 0);
  if (!self) return NULL;
  self->members = -1;
  if (!(self->archive = open_archive(directory)) ||
      failed(OTF2_Archive_SetMemoryCallbacks(self->archive, &memory_callbacks, self), "memory") ||
      failed(OTF2_Archive_OpenEvtFiles(self->archive), "event files")) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

static void archive_dealloc(ArchiveObject *self) {
  abandon(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(slices_doc,
             "slices(seq, begin, end, track, region, /)\n--\n\n"
             "The Enter (seq 2i) and Leave (2i + 1) events of slice i of region region[i] "
             "(int16 or int32) on location track[i] (int16 or int32) at begin[i] and end[i] "
             "(int64 ns), in the order of seq (uint32 or int64: each location's in time "
             "order, after its events of the calls before).");

static PyObject *archive_slices(ArchiveObject *self, PyObject *args) {
  PyObject *objs[5];
  Py_buffer bufs[5] = {{0}};
  Py_ssize_t n = -1, nseq = -1;
  PyObject *result = NULL;
  if (usable(self) < 0 ||
      !PyArg_ParseTuple(args, "OOOOO:slices", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
    return NULL;
  const void *seq = get_array(objs[0], &bufs[0], -8, &nseq, "slices seq");
  const int64_t *begin = seq ? get_array(objs[1], &bufs[1], 8, &n, "slices begin") : NULL;
  const int64_t *end = begin ? get_array(objs[2], &bufs[2], 8, &n, "slices end") : NULL;
  const void *track = end ? get_array(objs[3], &bufs[3], 0, &n, "slices track") : NULL;
  const void *region = track ? get_array(objs[4], &bufs[4], 0, &n, "slices region") : NULL;
  if (!region) goto done;
  Py_ssize_t seq_size = bufs[0].itemsize, track_size = bufs[3].itemsize;
  Py_ssize_t region_size = bufs[4].itemsize, locations = self->locations;
  Py_ssize_t regions = self->regions;
  for (Py_ssize_t i = 0; i < n; i++) {
    int64_t at = item(track, track_size, 1, i), r = item(region, region_size, 1, i);
    if (at < 0 || r < 0) {
      PyErr_SetString(PyExc_ValueError, "_otf2: slices: a location or region below 0");
      goto done;
    }
    if (at >= locations) locations = at + 1;
    if (r >= regions) regions = r + 1;
  }
  for (Py_ssize_t k = 0; k < nseq; k++) {
    int64_t e = item(seq, seq_size, 0, k);
    if (e < 0 || e / 2 >= n) {
      PyErr_SetString(PyExc_ValueError, "_otf2: slices: seq names a slice that is not there");
      goto done;
    }
  }
  if (writers_upto(self, locations) < 0) goto done;
  self->locations = locations;
  self->regions = regions;
  OTF2_EvtWriter **writers = self->writers;
  uint64_t *counts = self->counts;
  OTF2_ErrorCode rc = OTF2_SUCCESS;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t k = 0; k < nseq && rc == OTF2_SUCCESS; k++) {
    int64_t e = item(seq, seq_size, 0, k), i = e / 2, at = item(track, track_size, 1, i);
    OTF2_RegionRef r = (OTF2_RegionRef)item(region, region_size, 1, i);
    counts[at]++;
    rc = e & 1 ? OTF2_EvtWriter_Leave(writers[at], NULL, (OTF2_TimeStamp)end[i], r)
               : OTF2_EvtWriter_Enter(writers[at], NULL, (OTF2_TimeStamp)begin[i], r);
  }
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  if (failed(rc, "event")) goto done;
  Py_INCREF(Py_None);
  result = Py_None;
done:
  for (int b = 0; b < 5; b++)
    if (bufs[b].obj) PyBuffer_Release(&bufs[b]);
  return result;
}

PyDoc_STRVAR(metrics_doc,
             "metrics(location, time, values, /)\n--\n\n"
             "A Metric event of the metric class (its members: values, a list of as many "
             "int64 arrays as time, the same number of members in every call, at most 255) "
             "on `location` at each time (int64 ns, after its events of the calls before).");

static PyObject *archive_metrics(ArchiveObject *self, PyObject *args) {
  Py_ssize_t location, n = -1;
  PyObject *time_obj, *values_list, *result = NULL;
  Py_buffer time_buf = {0}, value_bufs[MAX_MEMBERS];
  const int64_t *values[MAX_MEMBERS];
  Py_ssize_t nmembers = 0;
  if (usable(self) < 0 || !PyArg_ParseTuple(args, "nOO!:metrics", &location, &time_obj,
                                            &PyList_Type, &values_list))
    return NULL;
  nmembers = PyList_GET_SIZE(values_list);
  if (location < 0 || nmembers < 1 || nmembers > MAX_MEMBERS ||
      (self->members >= 0 && nmembers != self->members)) {
    PyErr_SetString(PyExc_ValueError, "_otf2: metrics: a location below 0, or not 1 to 255 "
                                      "members, or not as many as before");
    return NULL;
  }
  memset(value_bufs, 0, (size_t)nmembers * sizeof *value_bufs);
  const int64_t *time = get_array(time_obj, &time_buf, 8, &n, "metrics time");
  for (Py_ssize_t k = 0; time && k < nmembers; k++)
    if (!(values[k] = get_array(PyList_GET_ITEM(values_list, k), &value_bufs[k], 8, &n,
                                "metrics values")))
      goto done;
  if (!time || writers_upto(self, location + 1) < 0) goto done;
  if (location >= self->locations) self->locations = location + 1;
  self->members = nmembers;
  OTF2_EvtWriter *writer = self->writers[location];
  OTF2_Type types[MAX_MEMBERS];
  OTF2_MetricValue row[MAX_MEMBERS];
  for (Py_ssize_t k = 0; k < nmembers; k++) types[k] = OTF2_TYPE_INT64;
  OTF2_ErrorCode rc = OTF2_SUCCESS;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t j = 0; j < n && rc == OTF2_SUCCESS; j++) {
    for (Py_ssize_t k = 0; k < nmembers; k++) row[k].signed_int = values[k][j];
    rc = OTF2_EvtWriter_Metric(writer, NULL, (OTF2_TimeStamp)time[j], 0, (uint8_t)nmembers,
                               types, row);
  }
  Py_END_ALLOW_THREADS;
  self->busy = 0;
  self->counts[location] += (uint64_t)n;
  if (failed(rc, "event")) goto done;
  Py_INCREF(Py_None);
  result = Py_None;
done:
  for (Py_ssize_t k = 0; k < nmembers; k++)
    if (value_bufs[k].obj) PyBuffer_Release(&value_bufs[k]);
  if (time_buf.obj) PyBuffer_Release(&time_buf);
  return result;
}

PyDoc_STRVAR(close_doc,
             "close(strings, regions, nodes, groups, locations, members, offset, length, "
             "properties, /)\n--\n\n"
             "Writes the definitions and closes the archive: strings (the StringRef is the "
             "index), regions [(name, role, paradigm)], system tree nodes [(name, class, "
             "parent or -1)], location groups [(name, type, creating group or -1, node)], "
             "locations [(name, type, group)] (every one of an event among them), metric "
             "members [(name, unit)] (as many as the Metric events have); the clock from "
             "offset, length ns; the archive's properties [(name, value)] (names "
             "NAMESPACE::NAME).  Returns the number of events of each location.  On an error "
             "the archive is closed as it is.");

static PyObject *archive_close(ArchiveObject *self, PyObject *args) {
  PyObject *strings, *regions, *nodes, *groups, *locations, *members, *properties;
  unsigned long long offset, length;
  if (usable(self) < 0 ||
      !PyArg_ParseTuple(args, "O!O!O!O!O!O!KKO!:close", &PyList_Type, &strings, &PyList_Type,
                        &regions, &PyList_Type, &nodes, &PyList_Type, &groups, &PyList_Type,
                        &locations, &PyList_Type, &members, &offset, &length, &PyList_Type,
                        &properties))
    return NULL;
  OTF2_Archive *archive = self->archive;
  Py_ssize_t nlocations = PyList_GET_SIZE(locations);
  if (self->locations > nlocations || self->regions > PyList_GET_SIZE(regions)) {
    PyErr_SetString(PyExc_ValueError, "_otf2: close: an event's location or region is not "
                                      "defined");
    goto fail;
  }
  if (PyList_GET_SIZE(members) > MAX_MEMBERS ||
      (self->members >= 0 && self->members != PyList_GET_SIZE(members))) {
    PyErr_SetString(PyExc_ValueError, "_otf2: close: not the metric members of the events "
                                      "(at most 255)");
    goto fail;
  }
  if (set_properties(archive, properties) < 0) goto fail;
  if (writers_upto(self, nlocations) < 0) goto fail; /* an event file for every location */
  for (Py_ssize_t i = 0; i < self->room; i++) {
    OTF2_EvtWriter *w = self->writers[i];
    self->writers[i] = NULL;
    if (failed(OTF2_Archive_CloseEvtWriter(archive, w), "event writer")) goto fail;
  }
  if (failed(OTF2_Archive_CloseEvtFiles(archive), "event files") ||
      failed(OTF2_Archive_OpenDefFiles(archive), "definition files"))
    goto fail;
  for (Py_ssize_t i = 0; i < nlocations; i++) {
    OTF2_DefWriter *local = OTF2_Archive_GetDefWriter(archive, (OTF2_LocationRef)i);
    if (!local || failed(OTF2_Archive_CloseDefWriter(archive, local), "local definitions"))
      goto fail;
  }
  if (failed(OTF2_Archive_CloseDefFiles(archive), "definition files") ||
      write_definitions(archive, strings, regions, nodes, groups, locations, self->counts,
                        members, offset, length) < 0)
    goto fail;
  PyObject *counts = PyList_New(nlocations);
  for (Py_ssize_t i = 0; counts && i < nlocations; i++) {
    PyObject *count = PyLong_FromUnsignedLongLong(self->counts[i]);
    if (!count) Py_CLEAR(counts);
    else PyList_SET_ITEM(counts, i, count);
  }
  self->archive = NULL;
  OTF2_ErrorCode rc = OTF2_Archive_Close(archive);
  abandon(self);
  if (failed(rc, "close")) Py_CLEAR(counts);
  return counts;
fail:
  abandon(self);
  return NULL;
}

static PyObject *archive_enter(ArchiveObject *self, PyObject *args) {
  (void)args;
  Py_INCREF(self);
  return (PyObject *)self;
}

static PyObject *archive_exit(ArchiveObject *self, PyObject *args) {
  (void)args;
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "_otf2.Archive: another thread is writing it");
    return NULL;
  }
  abandon(self);
  Py_RETURN_FALSE;
}

/* ---- an archive of definitions, its events moved in ---------------------------------- */

/* Location `location`'s local definitions: its mapping tables [(type, global ids)]. */
static int write_mappings(OTF2_Archive *archive, Py_ssize_t location, PyObject *tables) {
  OTF2_DefWriter *local = OTF2_Archive_GetDefWriter(archive, (OTF2_LocationRef)location);
  if (!local) return failed(OTF2_ERROR_MEM_ALLOC_FAILED, "local definitions");
  int ok = PyList_Check(tables);
  if (!ok) PyErr_SetString(PyExc_TypeError, "_otf2: definitions: a location's mappings: a list");
  for (Py_ssize_t k = 0; ok && k < PyList_GET_SIZE(tables); k++) {
    unsigned int type;
    PyObject *ids;
    Py_buffer buf = {0};
    Py_ssize_t n = -1;
    const uint64_t *global = NULL;
    ok = PyArg_ParseTuple(PyList_GET_ITEM(tables, k), "IO", &type, &ids) &&
         (global = get_array(ids, &buf, 8, &n, "definitions mapping")) != NULL;
    if (ok && type >= OTF2_MAPPING_MAX) {
      PyErr_Format(PyExc_ValueError, "_otf2: definitions: no mapping type %u", type);
      ok = 0;
    }
    Py_ssize_t moved = 0; /* the identity needs no table (and libotf2 makes none of it) */
    for (Py_ssize_t j = 0; ok && j < n; j++) moved += global[j] != (uint64_t)j;
    OTF2_IdMap *map = moved ? OTF2_IdMap_CreateFromUint64Array((uint64_t)n, global, true) : NULL;
    if (moved && !map) ok = !failed(OTF2_ERROR_MEM_ALLOC_FAILED, "mapping table");
    if (map) {
      ok = !failed(OTF2_DefWriter_WriteMappingTable(local, (OTF2_MappingType)type, map),
                   "mapping table");
      OTF2_IdMap_Free(map);
    }
    if (buf.obj) PyBuffer_Release(&buf);
  }
  OTF2_ErrorCode rc = OTF2_Archive_CloseDefWriter(archive, local);
  return ok && !failed(rc, "local definitions") ? 0 : -1;
}

PyDoc_STRVAR(definitions_doc,
             "definitions(directory, strings, regions, nodes, groups, locations, members, "
             "offset, length, properties, mappings, /)\n--\n\n"
             "Makes in `directory` an archive of definitions only, its event files "
             "(traces/<location>.evt) to be moved in: the definitions as Archive.close "
             "takes them, but locations [(name, type, group, events)], and for each "
             "location the mapping tables of its local definitions [(OTF2_MappingType, "
             "uint64 array: the global id of each local id)], which readers apply to its "
             "events.");

static PyObject *otf2_definitions(PyObject *module, PyObject *args) {
  (void)module;
  const char *directory;
  PyObject *strings, *regions, *nodes, *groups, *locations, *members, *properties, *mappings;
  unsigned long long offset, length;
  if (!PyArg_ParseTuple(args, "sO!O!O!O!O!O!KKO!O!:definitions", &directory, &PyList_Type,
                        &strings, &PyList_Type, &regions, &PyList_Type, &nodes, &PyList_Type,
                        &groups, &PyList_Type, &locations, &PyList_Type, &members, &offset,
                        &length, &PyList_Type, &properties, &PyList_Type, &mappings))
    return NULL;
  Py_ssize_t nlocations = PyList_GET_SIZE(locations);
  if (PyList_GET_SIZE(mappings) != nlocations || PyList_GET_SIZE(members) > MAX_MEMBERS) {
    PyErr_SetString(PyExc_ValueError, "_otf2: definitions: not a list of mappings per "
                                      "location, or more than 255 metric members");
    return NULL;
  }
  OTF2_Archive *archive = open_archive(directory);
  if (!archive) return NULL;
  int ok = set_properties(archive, properties) == 0 &&
           !failed(OTF2_Archive_OpenDefFiles(archive), "definition files");
  for (Py_ssize_t i = 0; ok && i < nlocations; i++)
    ok = write_mappings(archive, i, PyList_GET_ITEM(mappings, i)) == 0;
  ok = ok && !failed(OTF2_Archive_CloseDefFiles(archive), "definition files") &&
       write_definitions(archive, strings, regions, nodes, groups, locations, NULL, members,
                         offset, length) == 0;
  OTF2_ErrorCode rc = OTF2_Archive_Close(archive);
  if (!ok || failed(rc, "close")) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"definitions", otf2_definitions, METH_VARARGS, definitions_doc},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef archive_methods[] = {
    {"slices", (PyCFunction)archive_slices, METH_VARARGS, slices_doc},
    {"metrics", (PyCFunction)archive_metrics, METH_VARARGS, metrics_doc},
    {"close", (PyCFunction)archive_close, METH_VARARGS, close_doc},
    {"__enter__", (PyCFunction)archive_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)archive_exit, METH_VARARGS,
     "Closes the archive as it is, unless close() did (a context manager)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ArchiveType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ompt_py._otf2.Archive",
    .tp_basicsize = sizeof(ArchiveObject),
    .tp_dealloc = (destructor)archive_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Archive(directory): an OTF2 archive made in `directory` (traces.otf2, "
              "traces.def, traces/), its events written a part at a time (slices, metrics), "
              "then its definitions (close).  Unless close() ends it, it is closed as it is "
              "when the `with` block ends or the object goes.",
    .tp_methods = archive_methods,
    .tp_new = archive_new,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "ompt_py._otf2",
    "OTF2 archives written through libotf2 (ompt_py.io.otf2).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__otf2(void) {
  if (PyType_Ready(&ArchiveType) < 0) return NULL;
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  Py_INCREF(&ArchiveType);
  if (PyModule_AddObject(m, "Archive", (PyObject *)&ArchiveType) < 0) {
    Py_DECREF(&ArchiveType);
    Py_DECREF(m);
    return NULL;
  }
  if (PyModule_AddStringConstant(m, "OTF2_VERSION", OTF2_VERSION) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
