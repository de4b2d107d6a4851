/*
 * ompt_py._core: the CPython binding of libomptpy.so.  It only moves bytes
 * and JSON; names, dtypes and errors for users are made in Python.  This
 * file holds the thin bindings of the tool's API, the method table and the
 * module's constants; the Records type and the kernels that read records in
 * bulk have a file each (README.md).
 */
#include "ext.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "tool/omptpy_file.h"
#include "tool/omptpy_ompt.h"

PyObject *omptpy_py_oserror(int rc, const char *what) {
  errno = -rc;
  return PyErr_SetFromErrnoWithFilename(PyExc_OSError, what);
}

/* A JSON document of the tool (free()d here) as a str. */
static PyObject *json_result(char *s) {
  if (!s) return PyErr_NoMemory();
  PyObject *o = PyUnicode_FromString(s);
  free(s);
  return o;
}

static PyObject *py_init(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  if (omptpy_init() != 0) return PyUnicode_FromString(omptpy_config_error());
  Py_RETURN_NONE;
}

static PyObject *py_check_config(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  char error[512];
  if (omptpy_config_check(error, sizeof error) != 0) return PyUnicode_FromString(error);
  Py_RETURN_NONE;
}

static PyObject *py_set_recording(PyObject *m, PyObject *arg) {
  (void)m;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  /* Without the GIL: opening the sink drains the buffers, which may wait for a
   * drainer that waits for the handlers' dispatcher (block=True). */
  Py_BEGIN_ALLOW_THREADS omptpy_set_recording(on);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *py_is_recording(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyBool_FromLong(omptpy_is_recording());
}

static PyObject *py_flush(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  Py_BEGIN_ALLOW_THREADS omptpy_flush_all();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *py_meta(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return json_result(omptpy_meta());
}

static PyObject *py_stats(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  char *s;
  Py_BEGIN_ALLOW_THREADS s = omptpy_stats();
  Py_END_ALLOW_THREADS return json_result(s);
}

/* Profile mode in memory: the PROFILE blocks as the file holds them (bytes). */
static PyObject *py_profile(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  size_t len = 0;
  char *s;
  Py_BEGIN_ALLOW_THREADS s = omptpy_profile_take(&len);
  Py_END_ALLOW_THREADS if (!s) return PyErr_NoMemory();
  PyObject *out = PyBytes_FromStringAndSize(s, (Py_ssize_t)len);
  free(s);
  return out;
}

static PyObject *py_runtime_info(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return json_result(omptpy_runtime_info());
}

static PyObject *py_tool_path(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  const char *p = omptpy_tool_path();
  if (!p) {
    PyErr_SetString(PyExc_RuntimeError, "cannot find the path of libomptpy.so (dladdr failed)");
    return NULL;
  }
  return PyUnicode_DecodeFSDefault(p);
}

static PyObject *py_record_layout(PyObject *m, PyObject *args) {
  (void)m, (void)args;
#define F(name) #name, (Py_ssize_t)offsetof(omptpy_record, name), \
                (Py_ssize_t)sizeof(((omptpy_record *)0)->name)
  return Py_BuildValue(
      "{s:i,s:n,s:[(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn),(snn)]}",
      "version", OMPTPY_RECORD_VERSION, "size", (Py_ssize_t)sizeof(omptpy_record), "fields",
      F(time), F(codeptr), F(parallel_id), F(task_id), F(u64a), F(u64b), F(thread), F(event),
      F(endpoint), F(kind), F(u32a), F(u32b));
#undef F
}

/* ---- scripting callbacks ------------------------------------------------------------- */

/* tap_configure([(events_lo, events_hi, codeptr_lo, codeptr_hi, (thread, ...)), ...],
 * delay_s, block) */
static PyObject *py_tap_configure(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *list;
  double delay_s;
  int block;
  if (!PyArg_ParseTuple(args, "O!dp", &PyList_Type, &list, &delay_s, &block)) return NULL;
  Py_ssize_t n = PyList_GET_SIZE(list);
  if (n < 1 || n > OMPTPY_TAP_MAX_FILTERS || !(delay_s > 0)) {
    PyErr_Format(PyExc_ValueError, "1 to %d filters and a positive delay are needed",
                 OMPTPY_TAP_MAX_FILTERS);
    return NULL;
  }
  omptpy_tap_filter f[OMPTPY_TAP_MAX_FILTERS];
  memset(f, 0, sizeof f);
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long long lo, hi, cp_lo, cp_hi;
    PyObject *threads;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "KKKKO!", &lo, &hi, &cp_lo, &cp_hi,
                          &PyTuple_Type, &threads))
      return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(threads);
    if (k > OMPTPY_TAP_MAX_THREADS) {
      PyErr_Format(PyExc_ValueError, "a filter names at most %d threads", OMPTPY_TAP_MAX_THREADS);
      return NULL;
    }
    f[i] = (omptpy_tap_filter){{lo, hi}, cp_lo, cp_hi, (uint32_t)k, {0}};
    for (Py_ssize_t j = 0; j < k; j++) {
      unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(threads, j));
      if (PyErr_Occurred()) return NULL;
      f[i].threads[j] = (uint32_t)v;
    }
  }
  int rc;
  uint64_t delay_ns = (uint64_t)(delay_s * 1e9);
  Py_BEGIN_ALLOW_THREADS rc = omptpy_tap_configure(f, (int)n, delay_ns ? delay_ns : 1, block);
  Py_END_ALLOW_THREADS if (rc != 0) return omptpy_py_oserror(rc, "the handlers' queue");
  Py_RETURN_NONE;
}

static PyObject *py_tap_stop(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  Py_BEGIN_ALLOW_THREADS omptpy_tap_stop();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* tap_wait(timeout_s, max_records) -> None when the tap is stopped, else
 * (bytearray of records, times in CLOCK_MONOTONIC ns; queue position after them). */
static PyObject *py_tap_wait(PyObject *m, PyObject *args) {
  (void)m;
  double timeout_s;
  Py_ssize_t max;
  if (!PyArg_ParseTuple(args, "dn", &timeout_s, &max)) return NULL;
  if (max < 1) {
    PyErr_SetString(PyExc_ValueError, "max_records must be positive");
    return NULL;
  }
  long ready;
  Py_BEGIN_ALLOW_THREADS ready = omptpy_tap_wait((int64_t)(timeout_s * 1e9));
  Py_END_ALLOW_THREADS if (ready < 0) Py_RETURN_NONE;
  Py_ssize_t n = ready < max ? ready : max;
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(omptpy_record));
  if (!buf) return NULL;
  omptpy_record *dst = (omptpy_record *)PyByteArray_AS_STRING(buf);
  size_t got;
  uint64_t position;
  Py_BEGIN_ALLOW_THREADS got = omptpy_tap_read(dst, (size_t)n, &position);
  Py_END_ALLOW_THREADS if ((Py_ssize_t)got < n &&
                          PyByteArray_Resize(buf, (Py_ssize_t)(got * sizeof(omptpy_record))) < 0) {
    Py_DECREF(buf);
    return NULL;
  }
  return Py_BuildValue("(NK)", buf, (unsigned long long)position);
}

static PyObject *py_tap_stats(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  omptpy_tap_counters c;
  omptpy_tap_stats(&c);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:O}", "queued", (unsigned long long)c.queued,
                       "dropped", (unsigned long long)c.dropped, "filtered",
                       (unsigned long long)c.filtered, "position",
                       (unsigned long long)c.position, "backlog", (unsigned long long)c.backlog,
                       "capacity", (unsigned long long)c.capacity, "active",
                       c.active ? Py_True : Py_False);
}

/* native_add(function address, state address, events_lo, events_hi) -> slot id */
static PyObject *py_native_add(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long fn, state, events[2];
  if (!PyArg_ParseTuple(args, "KKKK", &fn, &state, &events[0], &events[1])) return NULL;
  omptpy_native_fn f;
  void *p = (void *)(uintptr_t)fn;
  memcpy(&f, &p, sizeof f);
  const uint64_t ev[2] = {events[0], events[1]};
  int id = omptpy_native_add(f, (void *)(uintptr_t)state, ev);
  if (id == -ENOSPC) {
    PyErr_Format(PyExc_RuntimeError, "at most %d native handlers can be installed at once",
                 OMPTPY_NATIVE_MAX);
    return NULL;
  }
  if (id < 0) return omptpy_py_oserror(id, "native handler");
  return PyLong_FromLong(id);
}

static PyObject *py_native_remove(PyObject *m, PyObject *arg) {
  (void)m;
  long id = PyLong_AsLong(arg);
  if (id == -1 && PyErr_Occurred()) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = omptpy_native_remove((int)id);
  Py_END_ALLOW_THREADS return PyBool_FromLong(rc == 0);
}

static PyObject *py_native_alloc(PyObject *m, PyObject *arg) {
  (void)m;
  Py_ssize_t size = PyLong_AsSsize_t(arg);
  if (size < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "size must not be negative");
    return NULL;
  }
  void *p = omptpy_native_alloc((size_t)size);
  if (!p) return PyErr_NoMemory();
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

static PyObject *py_control_tool(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long command, modifier;
  if (!PyArg_ParseTuple(args, "KK", &command, &modifier)) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = omptpy_control_tool(command, modifier);
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyObject *py_region_mark(PyObject *m, PyObject *args) {
  (void)m;
  int endpoint;
  const char *name;
  if (!PyArg_ParseTuple(args, "iz", &endpoint, &name)) return NULL;
  omptpy_region_mark(endpoint, name, 0);
  Py_RETURN_NONE;
}

static PyObject *py_clock_ticks(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyLong_FromUnsignedLongLong(omptpy_clock_ticks());
}

static PyObject *py_clock_ns(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  return PyLong_FromUnsignedLongLong(omptpy_clock_ns());
}

static PyObject *py_job(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  int rank, local_rank;
  char id[256];
  omptpy_job(&rank, &local_rank, id, sizeof id);
  return Py_BuildValue("iis", rank, local_rank, id);
}

static PyObject *py_mpi_call(PyObject *m, PyObject *args) {
  (void)m;
  int call, peer;
  unsigned long long begin, bytes;
  unsigned int size;
  if (!PyArg_ParseTuple(args, "iKKiI", &call, &begin, &bytes, &peer, &size)) return NULL;
  omptpy_mpi_call(call, begin, bytes, peer, size, 0);
  Py_RETURN_NONE;
}

static PyObject *py_mpi_world(PyObject *m, PyObject *args) {
  (void)m;
  int rank, size;
  const char *source;
  if (!PyArg_ParseTuple(args, "iis", &rank, &size, &source)) return NULL;
  omptpy_mpi_world(rank, size, source);
  Py_RETURN_NONE;
}

static PyObject *py_mpi_clock_pairs(PyObject *m, PyObject *args) {
  (void)m;
  int phase, reference;
  Py_buffer b;
  if (!PyArg_ParseTuple(args, "iiy*", &phase, &reference, &b)) return NULL;
  int rc = b.len % (3 * sizeof(uint64_t))
               ? -EINVAL
               : omptpy_mpi_clock_pairs(phase, reference, b.buf,
                                        (uint32_t)(b.len / (3 * sizeof(uint64_t))));
  PyBuffer_Release(&b);
  if (rc) {
    PyErr_SetString(PyExc_ValueError, "mpi_clock_pairs: phase 0 or 1, a reference rank >= 0 "
                                      "and uint64 triples");
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *py_mpi_measured(PyObject *m, PyObject *arg) {
  (void)m;
  int phase = (int)PyLong_AsLong(arg);
  if (phase == -1 && PyErr_Occurred()) return NULL;
  return PyBool_FromLong(omptpy_mpi_measured(phase));
}

static PyObject *py_region_names(PyObject *m, PyObject *args) {
  (void)m, (void)args;
  uint32_t n = omptpy_region_count();
  PyObject *list = PyList_New(n);
  if (!list) return NULL;
  for (uint32_t id = 1; id <= n; id++) {
    PyObject *name = PyUnicode_DecodeUTF8(omptpy_region_name(id),
                                          (Py_ssize_t)strlen(omptpy_region_name(id)), "replace");
    if (!name) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, id - 1, name);
  }
  return list;
}

/* glibc's malloc keeps what is freed in its heaps: the holes below their top
 * and, once big blocks have been freed (its mmap threshold then grows to 32
 * MiB), up to 64 MiB at the top.  malloc_trim gives their whole free pages
 * back.  Other C libraries: nothing done. */
static PyObject *py_trim_heap(PyObject *m, PyObject *args) {
  (void)m, (void)args;
#ifdef __GLIBC__
  int trimmed;
  Py_BEGIN_ALLOW_THREADS trimmed = malloc_trim(0);
  Py_END_ALLOW_THREADS return PyBool_FromLong(trimmed);
#else
  Py_RETURN_FALSE;
#endif
}

/* Each docstring starts with the signature (Python's __text_signature__), so
 * that inspect.signature and help() show it, and mypy's stubtest checks
 * ompt_py/_core.pyi against it. */
#define DOC(signature, text) signature "\n--\n\n" text

static PyMethodDef methods[] = {
    {"init", py_init, METH_NOARGS,
     DOC("init($module, /)",
         "Read the configuration; returns None, or the error message when it is invalid.")},
    {"check_config", py_check_config, METH_NOARGS,
     DOC("check_config($module, /)",
         "Check the OMPTPY_* variables of os.environ now; None, or the error message.")},
    {"set_recording", py_set_recording, METH_O,
     DOC("set_recording($module, on, /)", "Start (True) or pause (False) recording.")},
    {"is_recording", py_is_recording, METH_NOARGS,
     DOC("is_recording($module, /)", "Whether events are being recorded.")},
    {"flush", py_flush, METH_NOARGS,
     DOC("flush($module, /)", "Move every buffered record into the sink.")},
    {"take", omptpy_py_take, METH_NOARGS,
     DOC("take($module, /)", "Take the records gathered in the memory sink so far.")},
    {"meta", py_meta, METH_NOARGS,
     DOC("meta($module, /)", "The process and runtime description, as JSON.")},
    {"stats", py_stats, METH_NOARGS,
     DOC("stats($module, /)", "Per-thread written/dropped counters and a clock anchor, as JSON.")},
    {"profile", py_profile, METH_NOARGS,
     DOC("profile($module, /)",
         "Profile mode's PROFILE blocks so far, as a raw file holds them "
         "(io.profile.parse_blocks).")},
    {"runtime_info", py_runtime_info, METH_NOARGS,
     DOC("runtime_info($module, /)",
         "What each attached runtime's inquiry functions answer, as JSON.")},
    {"tool_path", py_tool_path, METH_NOARGS,
     DOC("tool_path($module, /)", "Absolute path of libomptpy.so.")},
    {"record_layout", py_record_layout, METH_NOARGS,
     DOC("record_layout($module, /)", "Version, size and field offsets of a record.")},
    {"columns", omptpy_py_columns, METH_VARARGS,
     DOC("columns($module, records, order, fields, lookups, frames, /)",
         "The columns of Trace.to_pandas() in one pass over the records: fields as "
         "[(out, offset, size)], lookups as [(out, table, KEY_*)], frames as a tuple of 8 "
         "outputs or None.")},
    {"pair", omptpy_py_pair, METH_VARARGS,
     DOC("pair($module, keys, begins, begin_value, partner, tags=None, enclosing=None, /)",
         "Begin/end pairing per key (a list of columns) in time order; partner[i]: the row "
         "paired with row i, or -1.  With tags (a column), an end closes the latest open "
         "begin of its key with its tag (0: any), dropping the begins above it; "
         "enclosing[i]: the latest open begin of the key when begin i opened, or -1.")},
    {"pair_events", omptpy_py_pair_events, METH_VARARGS,
     DOC("pair_events($module, order, events, endpoints, pairings, as_rows=False, "
         "lookups=None, times=None, end_times=False, split=None, /)",
         "Several pairings of the records in one pass over them in order (None, with "
         "as_rows: the time order of times merged as the pass goes; None back when they "
         "are not in a few chains of runs; end_times: the ends as their times), each as "
         "pair() pairs; a pairing is (roles, keys): roles[4 * event + endpoint] (PAIR_*), its key "
         "columns; a lookup (pairing, in, keys[, enclosing]): per begin, the pair of `in` with "
         "its key, found among those open (enclosing: the latest begun of those open then).  "
         "Returns ([(begins, ends, ends that closed nothing)], "
         "[found]): int64 bytes, the begins' positions in order (as_rows: rows), those "
         "closed first, the ends' of those closed; found, an int64 bytearray: per closed "
         "begin the pair found, -1 for none, -2 where not told.  A merged pass is split "
         "at time split (None: the median of a sample, from 2^20 records on two CPUs), "
         "its second half read in a thread of its own.")},
    {"find", omptpy_py_find, METH_VARARGS,
     DOC("find($module, table_keys, query_keys, out, table_times=None, query_times=None, "
         "first=False, /)",
         "Per query row, the first table row with its keys (with times: the last at or "
         "before the query's time; with times and first, the first, found in time "
         "order), or -1.")},
    {"sweep", omptpy_py_sweep, METH_VARARGS,
     DOC("sweep($module, layers, keys, table, /)",
         "The segments of the layers' intervals (each layer (group, begin, end)) per group "
         "of keys, each piece in the state table[set of open layers], as bytearrays "
         "(first, begin, end, state): group g's segments are [first[g], first[g + 1]).")},
    {"cumulative", omptpy_py_cumulative, METH_VARARGS,
     DOC("cumulative($module, first, begin, end, state, query_group, query_time, out, spans, /)",
         "Each query's group's time in each state of the segments before its time, into "
         "out (queries x states); with spans, the time between each of the first half of "
         "the queries and the same one of the second half (queries / 2 x states).")},
    {"waiting", omptpy_py_waiting, METH_VARARGS,
     DOC("waiting($module, series, start=None, end=None, /)",
         "How many threads wait per process after each change: series, a list of (pid, "
         "thread, begin, end), a series' waits in the order of their begins; a thread's "
         "waits that nest or touch count once (one ending before it begins: no length).  "
         "Returns (pid, time, [count per series]): bytearrays of int32, int64 and int32, a "
         "row per process and time at which a spell begins or ends, by process then time, "
         "in the window [start, end] (a process's last row before start moved to start, "
         "unless it has one there).")},
    {"proto_waiting", omptpy_py_proto_waiting, METH_VARARGS,
     DOC("proto_waiting($module, series, tracks, sequence, write, start=None, end=None, /)",
         "waiting()'s rows as the counter's TracePackets, given to write (bytes-like, not "
         "to keep) a part at a time: per process (sorted) and series its first value, then "
         "each change, on the track uuids[rank * len(series) + series] (uint64), uuids = "
         "tracks(the processes' pids, int64 bytes, sorted).")},
    {"format_rows", omptpy_py_format_rows, METH_VARARGS,
     DOC("format_rows($module, parts, columns, /)",
         "Rows of text, each parts[0] value parts[1] ... parts[-1]; a column is (FORMAT_*, "
         "values, missing, null, table).")},
    {"proto_payloads", omptpy_py_proto_payloads, METH_VARARGS,
     DOC("proto_payloads($module, parts, offsets, /)",
         "The TrackEvent fields of each row (a slice's begin), one after the other, the rows "
         "of each part (a list of columns) after the part before; offsets (int64, rows + 1) "
         "written.  A column is (PROTO_*, key, values, missing, table).")},
    {"proto_nest", omptpy_py_proto_nest, METH_VARARGS,
     DOC("proto_nest($module, track, begin, end, runs, ntracks, query_track, query_time, "
         "query_slice, seq, /)",
         "The begins (2i) and ends (2i + 1) of slices in the order of their begins (runs of "
         "slices in that order, merged; at one time the earlier run first), as each track's "
         "stack has them, into seq (4 or 8-byte items); ends that overlap their parent's cut "
         "(returned: how many); per query, the innermost slice of its track holding its "
         "time, or -1.")},
    {"proto_slots", omptpy_py_proto_slots, METH_VARARGS,
     DOC("proto_slots($module, seq, starts, count, first, slots, /)",
         "Of the begins seq names, per source (starts: each one's first slice, and an end) "
         "how many (count) and the first slice (first), and each begin's slot as "
         "proto_payloads lays out the payloads made source by source (slots); returns how "
         "many begins.  ValueError where a source's begins are not a range of slices.")},
    {"proto_packets", omptpy_py_proto_packets, METH_VARARGS,
     DOC("proto_packets($module, seq, begin, end, track, uuids, payload, offsets, slots, "
         "flows_from, from_ids, flows_to, to_ids, sequence, /)",
         "The TracePackets of the begins and ends seq lists (proto_nest), as a Trace's bytes.")},
    {"lod_sum", omptpy_py_lod_sum, METH_VARARGS,
     DOC("lod_sum($module, begin, end, group, site, shift, node_bits, below, delta, gbits, /)",
         "One level of the view's aggregates (lod.py), node by node (2**node_bits ns): each "
         "bar (int64 begin and end, in the order of their nodes, held whole) cut at the bins "
         "of 2**shift ns it touches, the rows of the level below (a result of lod_sum, its "
         "bins >> delta, or None) added, and the rows of each key (bin << gbits | group) "
         "summed: (key, covered, bars, largest, site of the first largest) as int64 bytes, "
         "by key.")},
    {"census", omptpy_py_census, METH_VARARGS,
     DOC("census($module, records, pids, pid, counts, rare_max, /)",
         "In one pass: counts[e] (int64, 65536 entries, written) the records of event number "
         "e; returns (the distinct pid << 32 | thread of the records, sorted, as int64 bytes; "
         "per event number of 1 to rare_max records, in increasing order, (number, its rows "
         "as int64 bytes)).  pids: each record's process (int32), or None: pid for all.")},
    {"event_rows", omptpy_py_event_rows, METH_VARARGS,
     DOC("event_rows($module, records, group, outs, /)",
         "The rows of each group of events, in the records' order, in one pass: group "
         "(uint8, 65536 entries) is each event number's group, 1 to len(outs), 0 for none; "
         "outs[g - 1] (int64) gets group g's rows and must hold exactly as many.")},
    {"take_records", omptpy_py_take_records, METH_VARARGS,
     DOC("take_records($module, records, rows, out, /)",
         "The records at rows (int64, each within the records) copied into out (as many "
         "records), in order, those ahead fetched into the cache.")},
    {"tick_scale", omptpy_py_tick_scale, METH_VARARGS,
     DOC("tick_scale($module, first_ticks, first_ns, last_ticks, last_ns, estimate, /)",
         "Nanoseconds per tick: the slope between the anchors when they are far enough "
         "apart (last_ticks and last_ns None: no second anchor), else estimate.")},
    {"time_order", omptpy_py_time_order, METH_VARARGS,
     DOC("time_order($module, times, out, /)",
         "The positions of times (int64, one dimension, any stride) in time order, stable, "
         "into out (int64): True; False (out untouched) when the times are not in a few "
         "chains of runs in time order (records.time_order sorts them then).")},
    {"ticks_to_ns", omptpy_py_ticks_to_ns, METH_VARARGS,
     DOC("ticks_to_ns($module, records, first_ticks, first_ns, scale, origin_ns, /)",
         "Times in place: CLOCK_MONOTONIC nanoseconds minus origin_ns on the line through "
         "the anchor of slope scale (tick_scale).")},
    {"tap_configure", py_tap_configure, METH_VARARGS,
     DOC("tap_configure($module, filters, delay_s, block, /)",
         "Start the handlers' queue or change its filters: (events_lo, events_hi, "
         "codeptr_lo, codeptr_hi, threads) each.")},
    {"tap_stop", py_tap_stop, METH_NOARGS,
     DOC("tap_stop($module, /)", "Stop the handlers' queue.")},
    {"tap_wait", py_tap_wait, METH_VARARGS,
     DOC("tap_wait($module, timeout_s, max_records, /)",
         "(records, position), or None when stopped.")},
    {"tap_stats", py_tap_stats, METH_NOARGS,
     DOC("tap_stats($module, /)", "Counters of the handlers' queue.")},
    {"native_add", py_native_add, METH_VARARGS,
     DOC("native_add($module, function, state, events_lo, events_hi, /)",
         "Install a native handler; returns its slot id.")},
    {"native_remove", py_native_remove, METH_O,
     DOC("native_remove($module, id, /)", "Whether it was installed.")},
    {"native_alloc", py_native_alloc, METH_O,
     DOC("native_alloc($module, size, /)", "Address of zeroed memory that is never freed.")},
    {"control_tool", py_control_tool, METH_VARARGS,
     DOC("control_tool($module, command, modifier, /)", "What omp_control_tool returns.")},
    {"region_mark", py_region_mark, METH_VARARGS,
     DOC("region_mark($module, endpoint, name, /)",
         "A region begin (SCOPE_BEGIN) or end (SCOPE_END) on this thread.")},
    {"clock_ticks", py_clock_ticks, METH_NOARGS,
     DOC("clock_ticks($module, /)", "The tool's clock now, in ticks (a record's time).")},
    {"clock_ns", py_clock_ns, METH_NOARGS,
     DOC("clock_ns($module, /)",
         "The tool's clock now, in nanoseconds on the clock anchors' scale.")},
    {"job", py_job, METH_NOARGS,
     DOC("job($module, /)",
         "(rank, local rank, job id) from the launcher's variables (-1, -1, '': none).")},
    {"mpi_call", py_mpi_call, METH_VARARGS,
     DOC("mpi_call($module, call, begin_ticks, bytes, peer, comm_size, /)",
         "An mpi record on this thread: a call (MPI_*) from begin_ticks to now.")},
    {"mpi_world", py_mpi_world, METH_VARARGS,
     DOC("mpi_world($module, rank, size, source, /)",
         "This process's rank and the size of MPI_COMM_WORLD, and who says so.")},
    {"mpi_clock_pairs", py_mpi_clock_pairs, METH_VARARGS,
     DOC("mpi_clock_pairs($module, phase, reference, triples, /)",
         "One phase's clock measurements against the reference rank (uint64 triples).")},
    {"mpi_measured", py_mpi_measured, METH_O,
     DOC("mpi_measured($module, phase, /)", "Whether that phase's measurements are kept.")},
    {"region_names", py_region_names, METH_NOARGS,
     DOC("region_names($module, /)", "The interned region names, id 1 first.")},
    {"python_stacks", omptpy_py_python_stacks, METH_VARARGS,
     DOC("python_stacks($module, depth, description, native_depth, /)",
         "Capture Python stacks of at most depth frames (0: off), with native_depth native "
         "frames above each construct; description: JSON kept with the tables (None: "
         "unchanged).")},
    {"stack_tables", omptpy_py_stack_tables, METH_VARARGS,
     DOC("stack_tables($module, codes_from, stacks_from, /)",
         "The captured codes and stacks from these ids on, as JSON.")},
    {"trim_heap", py_trim_heap, METH_NOARGS,
     DOC("trim_heap($module, /)",
         "Give the memory freed in glibc's heaps back to the system (malloc_trim); whether "
         "any was (False without glibc).")},
    {"time_captures", omptpy_py_time_captures, METH_O,
     DOC("time_captures($module, n, /)",
         "Capture this thread's Python stack n times (bench/pystacks.py): (nanoseconds, "
         "the last stack id).")},
    {NULL, NULL, 0, NULL},
};
#undef DOC

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_core",
    .m_doc = "Binding of the ompt-py C tool (libomptpy.so).",
    .m_size = -1,
    .m_methods = methods,
};

/* The module's int constants, from the C headers' own enums and macros, so
 * that Python never spells these numbers again. */
static const struct {
  const char *name;
  long value;
} constants[] = {
#define C(name, value) {#name, (long)(value)}
    /* OMPT values the analysis tests (omptpy_ompt.h) */
    C(SCOPE_BEGIN, ompt_scope_begin),
    C(SCOPE_END, ompt_scope_end),
    C(SCOPE_BEGINEND, ompt_scope_beginend),
    C(TASK_INITIAL, ompt_task_initial),
    C(TASK_IMPLICIT, ompt_task_implicit),
    C(TASK_EXPLICIT, ompt_task_explicit),
    C(TASK_TARGET, ompt_task_target),
    C(PARALLEL_INVOKER_PROGRAM, ompt_parallel_invoker_program),
    C(PARALLEL_INVOKER_RUNTIME, ompt_parallel_invoker_runtime),
    C(PARALLEL_LEAGUE, ompt_parallel_league),
    /* ompt-py's own events and the record (omptpy.h) */
    C(EVENT_SAMPLE, OMPTPY_EVENT_SAMPLE),
    C(EVENT_REGION, OMPTPY_EVENT_REGION),
    C(EVENT_MPI, OMPTPY_EVENT_MPI),
    C(EVENT_TOOL_STALL, OMPTPY_EVENT_TOOL_STALL),
    C(STALL_REGION, OMPTPY_STALL_REGION),
    C(STALL_POPULATE, OMPTPY_STALL_POPULATE),
    C(STALL_WAIT, OMPTPY_STALL_WAIT),
    C(MPI_INIT, OMPTPY_MPI_INIT),
    C(MPI_FINALIZE, OMPTPY_MPI_FINALIZE),
    C(MPI_BARRIER, OMPTPY_MPI_BARRIER),
    C(MPI_BCAST, OMPTPY_MPI_BCAST),
    C(MPI_REDUCE, OMPTPY_MPI_REDUCE),
    C(MPI_ALLREDUCE, OMPTPY_MPI_ALLREDUCE),
    C(MPI_GATHER, OMPTPY_MPI_GATHER),
    C(MPI_ALLGATHER, OMPTPY_MPI_ALLGATHER),
    C(MPI_SCATTER, OMPTPY_MPI_SCATTER),
    C(MPI_ALLTOALL, OMPTPY_MPI_ALLTOALL),
    C(MPI_SEND, OMPTPY_MPI_SEND),
    C(MPI_RECV, OMPTPY_MPI_RECV),
    C(MPI_ISEND, OMPTPY_MPI_ISEND),
    C(MPI_IRECV, OMPTPY_MPI_IRECV),
    C(MPI_WAIT, OMPTPY_MPI_WAIT),
    C(MPI_WAITALL, OMPTPY_MPI_WAITALL),
    C(MPI_SENDRECV, OMPTPY_MPI_SENDRECV),
    C(MPI_CLOCK_SYNC, OMPTPY_MPI_CLOCK_SYNC),
    C(MPI_MAX_PAIRS, OMPTPY_MPI_MAX_PAIRS),
    C(RECORD_SIZE, sizeof(omptpy_record)),
    /* the raw file (omptpy_file.h) */
    C(FILE_MAGIC, OMPTPY_FILE_MAGIC),
    C(BLOCK_META, OMPTPY_BLOCK_META),
    C(BLOCK_RECORDS, OMPTPY_BLOCK_RECORDS),
    C(BLOCK_STATS, OMPTPY_BLOCK_STATS),
    C(BLOCK_STACKS, OMPTPY_BLOCK_STACKS),
    C(BLOCK_LEDGER, OMPTPY_BLOCK_LEDGER),
    C(BLOCK_HEADER_SIZE, sizeof(omptpy_block_header)),
    C(BLOCK_PROFILE, OMPTPY_BLOCK_PROFILE),
    C(BLOCK_REGION, OMPTPY_BLOCK_REGION),
    C(REGION_PREFIX_SIZE, sizeof(omptpy_region_prefix)),
    C(DESC_THREAD_OFFSET, OMPTPY_DESC_THREAD_OFFSET),
    C(PROFILE_VERSION, OMPTPY_PROFILE_VERSION),
    C(PROFILE_HEAD_SIZE, sizeof(omptpy_profile_head)),
    C(PROFILE_ROW_SIZE, sizeof(omptpy_profile_row)),
    C(PROFILE_BUCKETS, OMPTPY_PROFILE_BUCKETS),
    C(PROFILE_CONSTRUCT, OMPTPY_PROFILE_CONSTRUCT),
    C(PROFILE_REGION, OMPTPY_PROFILE_REGION),
    C(PROFILE_LOCK, OMPTPY_PROFILE_LOCK),
    C(PROFILE_TASK, OMPTPY_PROFILE_TASK),
    C(LEDGER_PROCESS, OMPTPY_LEDGER_PROCESS),
    C(LEDGER_SLOT, OMPTPY_LEDGER_SLOT),
    C(LEDGER_WINDOWS, OMPTPY_LEDGER_WINDOWS),
    C(LEDGER_WINDOWS_HEAD_SIZE, sizeof(omptpy_ledger_windows)),
    C(LEDGER_NONE, OMPTPY_LEDGER_NONE),
    C(LEDGER_DESC_SIZE, OMPTPY_LEDGER_DESC_SIZE),
    C(LEDGER_PREFIX_SIZE, sizeof(omptpy_ledger_prefix)),
    C(LEDGER_HEAD_SIZE, sizeof(omptpy_ledger_head)),
    C(LEDGER_THREAD_SIZE, sizeof(omptpy_ledger_thread)),
    C(LEDGER_FINAL, OMPTPY_LEDGER_FINAL),
    C(LEDGER_UNKNOWN, OMPTPY_LEDGER_UNKNOWN),
    C(LEDGER_NOBUF, OMPTPY_LEDGER_NOBUF),
    C(END_NONE, OMPTPY_END_NONE),
    C(END_FINALIZE, OMPTPY_END_FINALIZE),
    C(END_EXIT, OMPTPY_END_EXIT),
    C(END__EXIT, OMPTPY_END__EXIT),
    C(END_EXEC, OMPTPY_END_EXEC),
    C(END_ABORT, OMPTPY_END_ABORT),
    C(END_FINISH, OMPTPY_END_FINISH),
    /* the bounds of the handlers' filters and of native handlers (omptpy_api.h) */
    C(TAP_MAX_FILTERS, OMPTPY_TAP_MAX_FILTERS),
    C(TAP_MAX_THREADS, OMPTPY_TAP_MAX_THREADS),
    C(NATIVE_MAX, OMPTPY_NATIVE_MAX),
    /* Python stacks (pystack.c) */
    C(PYTHON_STACKS_MAX_DEPTH, OMPTPY_PY_MAX_DEPTH),
    C(NATIVE_STACKS_MAX_DEPTH, OMPTPY_STACK_MAX_NATIVE),
    /* the arguments of this module's functions (ext.h) */
    C(KEY_EVENT, KEY_EVENT),
    C(KEY_ENDPOINT, KEY_ENDPOINT),
    C(KEY_EVENT_KIND, KEY_EVENT_KIND),
    C(KEY_EVENT_ENDPOINT, KEY_EVENT_ENDPOINT),
    C(PAIR_NONE, PAIR_NONE),
    C(PAIR_OPEN, PAIR_OPEN),
    C(PAIR_CLOSE, PAIR_CLOSE),
    C(FORMAT_NUMBER, FORMAT_NUMBER),
    C(FORMAT_MICROS, FORMAT_MICROS),
    C(FORMAT_HEX, FORMAT_HEX),
    C(FORMAT_TEXT, FORMAT_TEXT),
    C(PROTO_FIELD, PROTO_FIELD),
    C(PROTO_NUMBER, PROTO_NUMBER),
    C(PROTO_POINTER, PROTO_POINTER),
    C(PROTO_TABLE, PROTO_TABLE),
#undef C
};

PyMODINIT_FUNC PyInit__core(void) {
  PyObject *m = PyModule_Create(&moduledef);
  if (!m) return NULL;
  if (omptpy_py_add_records_type(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  for (size_t i = 0; i < sizeof constants / sizeof *constants; i++)
    if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0) {
      Py_DECREF(m);
      return NULL;
    }
  /* Why Python stacks cannot be captured in this build (None: they can). */
  const char *why = omptpy_py_stacks_unsupported();
  PyObject *o = why ? PyUnicode_FromString(why) : omptpy_py_none();
  if (!o || PyModule_AddObject(m, "PYTHON_STACKS_UNSUPPORTED", o) < 0) {
    Py_XDECREF(o);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

