/*
 * Python call stacks for the tool's records (stacks.c holds the tables): the
 * capture hook the tool calls inside OMPT callbacks, on any thread, with or
 * without the GIL.
 *
 * The calling thread's state comes from PyGILState_GetThisThreadState() (a
 * thread-specific key, set for every thread that runs Python, whether or not
 * it holds the GIL now); its innermost frame from the thread state, then the
 * chain of callers.  The thread is inside this callback, below all those
 * frames, so none of them can finish or change while it reads them, and each
 * holds a strong reference to its code object: everything read here is
 * alive.  Nothing here takes the GIL, calls into the interpreter, allocates or
 * blocks once a stack is known: a known stack costs the walk (a few loads per
 * frame), a hash and one lookup.  A stack seen for the first time is resolved
 * on the spot (file, qualified name, first line of each code; the line of
 * each frame), copied into the tool's tables: a code object that dies later
 * leaves its names behind, and nothing reads it after.
 *
 * Key of a stack: two words per frame, innermost first: the code object's
 * address, and its byte offset with a 32-bit fingerprint of the code's
 * immutable parts (file, name and line table objects, first line), then
 * whether the stack was cut at the depth.  The fingerprint tells a new code
 * object from a dead one at the same address (both would need the same
 * file, name and line table addresses, and the same first line, to be taken
 * for each other).
 *
 * Frame layouts (what py-spy and austin read from outside the process, read
 * here from inside): 3.9 and 3.10, PyFrameObject (tstate->frame, f_back,
 * f_code, f_lasti in bytes on 3.9, in code units on 3.10); 3.11 and 3.12,
 * _PyInterpreterFrame (tstate->cframe->current_frame, previous, f_code,
 * prev_instr; frames not yet started and, on 3.12, the C stack's shim frames
 * are skipped); 3.13, tstate->current_frame, f_executable, instr_ptr.  Their
 * definitions are the interpreter's own internal headers (Py_BUILD_CORE_MODULE,
 * as for this file only), so the layout is the one this module is built for.
 * Other versions, and free-threaded builds, have no capture: PYTHON_STACKS
 * says why.
 */
#define Py_BUILD_CORE_MODULE /* must precede Python.h (ext.h): internal/pycore_frame.h */
#include "ext.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(Py_GIL_DISABLED)
#define UNSUPPORTED "free-threaded Python builds are not supported yet"
#elif PY_VERSION_HEX >= 0x03090000 && PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#elif PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#include <internal/pycore_frame.h>
#else
#define UNSUPPORTED "this Python version's frame layout is unknown to ompt-py"
#endif

#define MAX_DEPTH OMPTPY_PY_MAX_DEPTH

static _Atomic int depth_now = 32;

#ifndef UNSUPPORTED

#if PY_VERSION_HEX < 0x030B0000
typedef PyFrameObject frame_t;
static inline frame_t *innermost(PyThreadState *ts) { return ts->frame; }
static inline frame_t *caller(frame_t *f) { return f->f_back; }
static inline PyCodeObject *code_of(frame_t *f) { return f->f_code; }
/* The byte offset of the instruction being run (-1: none yet). */
static inline int offset_of(frame_t *f, PyCodeObject *co) {
  (void)co;
#if PY_VERSION_HEX < 0x030A0000
  return f->f_lasti;
#else
  return f->f_lasti < 0 ? -1 : f->f_lasti * (int)sizeof(_Py_CODEUNIT);
#endif
}
#define CODE_NAME(co) ((co)->co_name)
#define CODE_BYTES(co) PyBytes_GET_SIZE((co)->co_code)
#if PY_VERSION_HEX < 0x030A0000
#define LINE_TABLE(co) ((co)->co_lnotab)
#else
#define LINE_TABLE(co) ((co)->co_linetable)
#endif
#else
typedef _PyInterpreterFrame frame_t;
#if PY_VERSION_HEX < 0x030D0000
static inline frame_t *innermost(PyThreadState *ts) { return ts->cframe->current_frame; }
#else
static inline frame_t *innermost(PyThreadState *ts) { return ts->current_frame; }
#endif
static inline frame_t *caller(frame_t *f) { return f->previous; }
/* NULL for frames that are not (yet) Python code: skipped. */
static inline PyCodeObject *code_of(frame_t *f) {
#if PY_VERSION_HEX < 0x030D0000
#if PY_VERSION_HEX >= 0x030C0000
  if (f->owner == FRAME_OWNED_BY_CSTACK) return NULL;
#endif
  return _PyFrame_IsIncomplete(f) ? NULL : f->f_code;
#else
  if (f->owner == FRAME_OWNED_BY_CSTACK || !f->f_executable || !PyCode_Check(f->f_executable))
    return NULL;
  return _PyFrame_IsIncomplete(f) ? NULL : (PyCodeObject *)f->f_executable;
#endif
}
static inline int offset_of(frame_t *f, PyCodeObject *co) {
#if PY_VERSION_HEX < 0x030D0000
  _Py_CODEUNIT *at = f->prev_instr;
#else
  _Py_CODEUNIT *at = f->instr_ptr;
#endif
  return (int)(at - _PyCode_CODE(co)) * (int)sizeof(_Py_CODEUNIT);
}
#define CODE_NAME(co) ((co)->co_qualname)
#define CODE_BYTES(co) _PyCode_NBYTES(co)
#define LINE_TABLE(co) ((co)->co_linetable)
#endif

static inline uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }

/* A fold of the addresses (objects are 16-byte aligned: their low bits carry
 * nothing) and of the first line: cheap, since it runs for every frame. */
static inline uint32_t fingerprint(PyCodeObject *co) {
  uint64_t h = (uint64_t)(uintptr_t)co->co_filename >> 4;
  h ^= rotl((uint64_t)(uintptr_t)CODE_NAME(co) >> 4, 21);
  h ^= rotl((uint64_t)(uintptr_t)LINE_TABLE(co) >> 4, 42);
  h ^= (uint64_t)(uint32_t)co->co_firstlineno << 7;
  return (uint32_t)(h ^ h >> 32);
}

/* A str as UTF-8 into out (at most cap bytes, cut at a character), read in
 * place without the GIL: no conversion cache, no allocation.  Surrogates
 * become '?'. */
static size_t utf8_of(PyObject *s, char *out, size_t cap) {
  if (!s || !PyUnicode_Check(s)) return 0;
#if PY_VERSION_HEX < 0x030C0000
  if (!PyUnicode_IS_READY(s)) return 0;
#endif
  int kind = PyUnicode_KIND(s);
  const void *data = PyUnicode_DATA(s);
  Py_ssize_t n = PyUnicode_GET_LENGTH(s);
  size_t len = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_UCS4 c = PyUnicode_READ(kind, data, i);
    char buf[4];
    size_t k;
    if (c < 0x80) {
      buf[0] = (char)c;
      k = 1;
    } else if (c < 0x800) {
      buf[0] = (char)(0xc0 | c >> 6);
      buf[1] = (char)(0x80 | (c & 0x3f));
      k = 2;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      buf[0] = '?';
      k = 1;
    } else if (c < 0x10000) {
      buf[0] = (char)(0xe0 | c >> 12);
      buf[1] = (char)(0x80 | (c >> 6 & 0x3f));
      buf[2] = (char)(0x80 | (c & 0x3f));
      k = 3;
    } else {
      buf[0] = (char)(0xf0 | c >> 18);
      buf[1] = (char)(0x80 | (c >> 12 & 0x3f));
      buf[2] = (char)(0x80 | (c >> 6 & 0x3f));
      buf[3] = (char)(0x80 | (c & 0x3f));
      k = 4;
    }
    if (len + k > cap) break;
    memcpy(out + len, buf, k);
    len += k;
  }
  return len;
}

/* The id of a live code object's entry, added with its names if new (0: the
 * table is full). */
static uint32_t code_id(PyCodeObject *co, uint32_t print) {
  uint64_t key[2] = {(uint64_t)(uintptr_t)co, print};
  uint32_t id = omptpy_code_find(key);
  if (id) return id;
  char file[1024], name[512];
  size_t file_len = utf8_of(co->co_filename, file, sizeof file);
  size_t name_len = utf8_of(CODE_NAME(co), name, sizeof name);
  return omptpy_code_add(key, file, file_len, name, name_len, co->co_firstlineno);
}

/* A stack seen for the first time: its frames resolved, then added. */
static uint32_t add_stack(const uint64_t *key, uint32_t n, bool truncated, const uint64_t *native,
                         uint32_t nnative) {
  omptpy_stack_frame frames[MAX_DEPTH];
  for (uint32_t i = 0; i < n; i++) {
    PyCodeObject *co = (PyCodeObject *)(uintptr_t)key[2 * i];
    int offset = (int)(int32_t)(key[2 * i + 1] >> 32);
    frames[i].code = code_id(co, (uint32_t)key[2 * i + 1]);
    frames[i].line = offset >= 0 && offset < CODE_BYTES(co) ? PyCode_Addr2Line(co, offset) : 0;
    if (frames[i].line < 0) frames[i].line = 0;
  }
  return omptpy_stack_add(key, 2 * n + 1 + nnative, frames, n, truncated, native, nnative);
}

static uint32_t capture(const uint64_t *native, uint32_t nnative) {
  PyThreadState *ts = PyGILState_GetThisThreadState();
  if (!ts) return 0;
  uint32_t depth = (uint32_t)atomic_load_explicit(&depth_now, memory_order_relaxed);
  uint64_t key[2 * MAX_DEPTH + 1 + OMPTPY_STACK_MAX_NATIVE];
  uint32_t n = 0;
  bool truncated = false;
  for (frame_t *f = innermost(ts); f; f = caller(f)) {
    PyCodeObject *co = code_of(f);
    if (!co) continue;
    if (n == depth) {
      truncated = true;
      break;
    }
    key[2 * n] = (uint64_t)(uintptr_t)co;
    key[2 * n + 1] = (uint64_t)(uint32_t)offset_of(f, co) << 32 | fingerprint(co);
    n++;
  }
  if (n == 0) return 0;
  key[2 * n] = truncated;
  memcpy(key + 2 * n + 1, native, nnative * sizeof *native);
  uint32_t id = omptpy_stack_find(key, 2 * n + 1 + nnative);
  return id ? id : add_stack(key, n, truncated, native, nnative);
}

static bool runs(void) { return PyGILState_GetThisThreadState() != NULL; }

static const omptpy_stack_hooks HOOKS = {capture, runs};

#endif /* UNSUPPORTED */

/* Why this build has no capture, or NULL. */
const char *omptpy_py_stacks_unsupported(void) {
#ifdef UNSUPPORTED
  return UNSUPPORTED;
#else
  return NULL;
#endif
}

PyObject *omptpy_py_python_stacks(PyObject *m, PyObject *args) {
  (void)m;
  int depth, native;
  const char *description;
  if (!PyArg_ParseTuple(args, "izi", &depth, &description, &native)) return NULL;
  if (depth < 0 || depth > MAX_DEPTH)
    return PyErr_Format(PyExc_ValueError, "the depth of Python stacks is 0 (off) to %d, not %d",
                        MAX_DEPTH, depth);
  if (native < 0 || native > OMPTPY_STACK_MAX_NATIVE)
    return PyErr_Format(PyExc_ValueError, "the native depth is 0 (off) to %d, not %d",
                        OMPTPY_STACK_MAX_NATIVE, native);
  int rc = description ? omptpy_stacks_describe(description) : 0;
  rc = rc ? rc : omptpy_stacks_set_native(depth > 0 ? native : 0);
#ifdef UNSUPPORTED
  if (rc == 0 && depth > 0) return PyErr_Format(PyExc_RuntimeError, "%s", UNSUPPORTED);
#else
  if (rc == 0 && depth > 0) atomic_store(&depth_now, depth);
  rc = rc ? rc : omptpy_stacks_set_hooks(depth > 0 ? &HOOKS : NULL);
#endif
  if (rc) return omptpy_py_oserror(rc, "the tables of Python stacks");
  return omptpy_py_none();
}

PyObject *omptpy_py_stack_tables(PyObject *m, PyObject *args) {
  (void)m;
  unsigned int codes_from, stacks_from;
  if (!PyArg_ParseTuple(args, "II", &codes_from, &stacks_from)) return NULL;
  char *s;
  Py_BEGIN_ALLOW_THREADS s = omptpy_stacks(codes_from, stacks_from);
  Py_END_ALLOW_THREADS if (!s) return PyErr_NoMemory();
  PyObject *o = PyUnicode_FromString(s);
  free(s);
  return o;
}

PyObject *omptpy_py_time_captures(PyObject *m, PyObject *arg) {
  (void)m;
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
#ifdef UNSUPPORTED
  return PyErr_Format(PyExc_RuntimeError, "%s", UNSUPPORTED);
#else
  struct timespec a, b;
  uint32_t id = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) id = capture(NULL, 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  long long ns = (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
  return Py_BuildValue("(LI)", ns, id);
#endif
}
