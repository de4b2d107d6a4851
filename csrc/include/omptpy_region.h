/*
 * Region markers for C and C++ code traced by ompt-py (shipped in the
 * package: python -c "import ompt_py; print(ompt_py.include_dir())").
 *
 *     #include <omptpy_region.h>
 *     ompt_py_region_begin("solve");
 *     ...
 *     ompt_py_region_end("solve");
 *
 * Each call records a `region` event (begin or end, with the name) on the
 * calling thread while ompt-py records or has handlers; Trace.user_regions()
 * pairs them into a table with nesting.  The functions find the tool at run
 * time (libomptpy.so, loaded by `import ompt_py` or through
 * OMP_TOOL_LIBRARIES): nothing to link, and where the tool is not loaded
 * they do nothing.  The lookup happens at the first call of each function
 * in each file that includes this header; a tool loaded after that is not
 * seen.  Names should be string literals or strings that outlive the call
 * (the tool copies each distinct name once).  On glibc older than 2.34,
 * link with -ldl.
 */
#ifndef OMPTPY_REGION_H
#define OMPTPY_REGION_H

#include <dlfcn.h>
#include <string.h>

#ifdef RTLD_DEFAULT
#define OMPT_PY_RTLD_DEFAULT_ RTLD_DEFAULT
#else
#define OMPT_PY_RTLD_DEFAULT_ ((void *)0) /* glibc's RTLD_DEFAULT, without _GNU_SOURCE */
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*ompt_py_region_fn_)(const char *name);

/* The tool's function `symbol`, or NULL: first in the global scope (tool
 * preloaded), then in libomptpy.so if it is loaded (by its soname; a local
 * library, as Python loads it, is invisible to RTLD_DEFAULT). */
static inline ompt_py_region_fn_ ompt_py_region_lookup_(const char *symbol) {
  void *f = dlsym(OMPT_PY_RTLD_DEFAULT_, symbol);
  if (!f) {
    void *lib = dlopen("libomptpy.so", RTLD_LAZY | RTLD_NOLOAD);
    if (lib) {
      f = dlsym(lib, symbol);
      dlclose(lib);
    }
  }
  ompt_py_region_fn_ fn;
  memcpy(&fn, &f, sizeof fn);
  return fn;
}

/* state: 0 not looked up yet, 1 found, 2 absent (a race looks it up twice, harmlessly). */
#define OMPT_PY_REGION_CALL_(symbol, name)                                         \
  do {                                                                             \
    static ompt_py_region_fn_ fn_;                                                 \
    static int state_;                                                             \
    int s_ = __atomic_load_n(&state_, __ATOMIC_ACQUIRE);                           \
    if (s_ == 0) {                                                                 \
      ompt_py_region_fn_ f_ = ompt_py_region_lookup_(symbol);                      \
      __atomic_store_n(&fn_, f_, __ATOMIC_RELAXED);                                \
      __atomic_store_n(&state_, f_ ? 1 : 2, __ATOMIC_RELEASE);                     \
      s_ = f_ ? 1 : 2;                                                             \
    }                                                                              \
    if (s_ == 1) __atomic_load_n(&fn_, __ATOMIC_RELAXED)(name);                    \
  } while (0)

/* Begins a region named `name` on the calling thread. */
static inline void ompt_py_region_begin(const char *name) {
  OMPT_PY_REGION_CALL_("omptpy_region_begin", name);
}

/* Ends the innermost open region named `name` (NULL: the innermost region). */
static inline void ompt_py_region_end(const char *name) {
  OMPT_PY_REGION_CALL_("omptpy_region_end", name);
}

#ifdef __cplusplus
}

/* C++: a region for the lifetime of a scope,  { ompt_py::region r("solve"); ... } */
namespace ompt_py {
class region {
 public:
  explicit region(const char *name) : name_(name) { ompt_py_region_begin(name); }
  ~region() { ompt_py_region_end(name_); }
  region(const region &) = delete;
  region &operator=(const region &) = delete;

 private:
  const char *name_;
};
}  // namespace ompt_py
#endif

#endif /* OMPTPY_REGION_H */
