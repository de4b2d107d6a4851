/*
 * The OMPT tool: ompt_start_tool, initialize, finalize, and the public
 * omptpy_* API used by the Python module.
 *
 * Shutdown order is not ours to choose (see ../shared/FACTS.md): finalize
 * may come after Python is gone, after this library's destructor, or never
 * (_exit).  Every path only flushes what is buffered, and flushing twice is
 * harmless; nothing is freed that a late callback could still touch.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omptpy_api.h"
#include "omptpy_internal.h"

omptpy_tool omptpy_g = {.wanted = UINT64_MAX};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc;
/* The process the tool's state is of: a child made by vfork (which shares it
 * and runs no fork handler) must not touch it from the preload hook. */
static pid_t tool_pid;
/* Serialises changes of the recording state and of the registered callbacks. */
static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER;

/* Records are wanted by the sink (every event), by Python handlers (the events
 * of their filters) and by native handlers (theirs).  The records of the
 * events nobody wants are not written (omptpy_g.wanted; their callbacks stay
 * registered once they were, see callbacks.c), and with no consumer at all
 * nothing is written.  Under control_lock. */
static void consumers_changed_locked(void) {
  bool sink = atomic_load(&omptpy_g.sink_on);
  bool active = sink || omptpy_tap_active() || atomic_load(&omptpy_native_count) != 0;
  uint64_t handlers = omptpy_tap_events() | omptpy_native_events();
  /* Profile mode: the sink wants aggregates, made by profile.c's handlers, not records. */
  uint64_t events = !active ? 0 : !sink ? handlers
                    : omptpy_profiling ? omptpy_profile_events() | handlers : UINT64_MAX;
  atomic_store_explicit(&omptpy_g.wanted, sink && !omptpy_profiling ? events : handlers,
                        memory_order_relaxed);
  if (active) atomic_store(&omptpy_g.recording, 1);
  int n = atomic_load(&omptpy_g.nruntimes);
  for (int i = 0; i < n && i < OMPTPY_MAX_RUNTIMES; i++) {
    omptpy_runtime *rt = &omptpy_g.runtimes[i];
    if (atomic_load_explicit(&rt->initialized, memory_order_relaxed) &&
        !atomic_load_explicit(&rt->finalized, memory_order_relaxed))
      omptpy_callbacks_enable(rt, events);
  }
  if (!active) atomic_store(&omptpy_g.recording, 0);
}

void omptpy_consumers_changed(void) {
  pthread_mutex_lock(&control_lock);
  consumers_changed_locked();
  pthread_mutex_unlock(&control_lock);
}

void omptpy_recording_set(int on) {
  /* Closing the window: what the devices still hold ran inside it, and is stamped
   * when it is handed back (outside the control lock: the runtime may hand
   * buffers back on another thread and wait for it). */
  if (!on && atomic_load(&omptpy_g.sink_on)) omptpy_devices_flush();
  pthread_mutex_lock(&control_lock);
  if (atomic_load(&omptpy_g.sink_on) != (on != 0)) {
    omptpy_sink_window(on != 0);
    atomic_store(&omptpy_g.sink_on, on != 0);
    consumers_changed_locked();
  }
  pthread_mutex_unlock(&control_lock);
}

/* Lock order: drain_lock, registry lock (buffer.c), the file's (sink.c), then
 * the module walk's (meta.c). */
static void atfork_prepare(void) {
  omptpy_buffers_atfork_prepare();
  omptpy_sink_atfork_prepare();
  omptpy_meta_atfork_prepare();
}

static void atfork_parent(void) {
  omptpy_meta_atfork_parent();
  omptpy_sink_atfork_parent();
  omptpy_buffers_atfork_parent();
}

/* The sink first (the parent's file closed), then the ledger (the child's own
 * file), then the buffers (the forking thread enters the child's ledger). */
static void atfork_child(void) {
  tool_pid = getpid();
  pthread_mutex_init(&control_lock, NULL);
  omptpy_meta_after_fork_child();
  omptpy_drainer_after_fork_child();
  omptpy_sink_after_fork_child();
  omptpy_ledger_after_fork_child();
  omptpy_buffers_after_fork_child();
  omptpy_tap_after_fork_child();
  omptpy_native_after_fork_child();
  omptpy_region_after_fork_child();
  omptpy_mpi_after_fork_child();
  omptpy_stacks_after_fork_child();
  omptpy_devices_after_fork_child();
  int live = 0;
  for (int i = 0; i < atomic_load(&omptpy_g.nruntimes) && i < OMPTPY_MAX_RUNTIMES; i++)
    live |= atomic_load_explicit(&omptpy_g.runtimes[i].initialized, memory_order_relaxed) &&
            !atomic_load_explicit(&omptpy_g.runtimes[i].finalized, memory_order_relaxed);
  if (live) omptpy_drainer_start();
}

static void write_stats(bool final);

/* How the process image ends, from the preload hook (csrc/hook): what is
 * buffered goes to the sink (the drain lock is only tried: the hook may run
 * in a signal handler, or in abort() inside a drain pass), the final counters
 * follow, and the ending goes into the ledger.  For an exec, `link` gets
 * OMPTPY_EXEC_FROM=NEXT_INDEX:PATH for the new image ("" without a file);
 * OMPTPY_END_NONE undoes an exec that failed. */
OMPTPY_API int omptpy_ending(int how, char *link, size_t size) {
  if (link && size) link[0] = '\0';
  if (init_rc != 0 || !omptpy_g.cfg.enabled || getpid() != tool_pid) return 0;
  if (how != OMPTPY_END_NONE && omptpy_flush_within(200000000u)) write_stats(true);
  omptpy_ledger_end(how);
  if (how == OMPTPY_END_EXEC && link && *omptpy_sink_path())
    snprintf(link, size, "OMPTPY_EXEC_FROM=%u:%s", omptpy_next_thread_index(), omptpy_sink_path());
  return 0;
}

/* The preload hook, if the process has it, learns where the tool is. */
static void register_with_hook(void) {
  typedef void (*hook_register)(int (*)(int, char *, size_t));
  hook_register reg = (hook_register)dlsym(RTLD_DEFAULT, "omptpy_hook_register");
  if (reg) reg(omptpy_ending);
}

static void global_init(void) {
  omptpy_tool *g = &omptpy_g;
  tool_pid = getpid();
  init_rc = omptpy_config_read(&g->cfg);
  omptpy_clock_init(&g->cfg);
  g->start_anchor = omptpy_clock_anchor();
  g->tick_ns_estimate = omptpy_clock_estimate(g->start_anchor);
  g->start_realtime_ns = omptpy_realtime_ns();
  for (int i = 0; i < OMPTPY_MAX_RUNTIMES; i++)
    for (int ev = 0; ev < OMPTPY_MAX_EVENTS; ev++) g->runtimes[i].levels[ev] = -1;
  if (init_rc != 0) return;
  omptpy_profile_init(&g->cfg);
  omptpy_sink_open(&g->cfg);
  omptpy_drainer_init(&g->cfg);
  omptpy_buffers_init(&g->cfg);
  if (omptpy_sampler_init(&g->cfg) != 0) fprintf(stderr, "ompt-py: %s\n", g->cfg.sample_error);
  /* Recording starts at once for a file sink; in memory, when Python asks. */
  int record = g->cfg.record >= 0 ? g->cfg.record : omptpy_sink_is_file();
  omptpy_sink_window(record);
  atomic_store(&g->sink_on, record);
  atomic_store(&g->recording, record);
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
  register_with_hook();
}

static int on_initialize(ompt_function_lookup_t lookup, int initial_device_num,
                         ompt_data_t *tool_data) {
  (void)initial_device_num;
  omptpy_runtime *rt = tool_data->ptr;
  rt->set_callback = (ompt_set_callback_t)lookup("ompt_set_callback");
  rt->enumerate_states = (ompt_enumerate_states_t)lookup("ompt_enumerate_states");
  rt->enumerate_mutex_impls = (ompt_enumerate_mutex_impls_t)lookup("ompt_enumerate_mutex_impls");
  rt->get_num_procs = (ompt_get_num_procs_t)lookup("ompt_get_num_procs");
  rt->get_num_places = (ompt_get_num_places_t)lookup("ompt_get_num_places");
  rt->get_place_proc_ids = (ompt_get_place_proc_ids_t)lookup("ompt_get_place_proc_ids");
  rt->get_num_devices = (ompt_get_num_devices_t)lookup("ompt_get_num_devices");
  rt->get_state = (ompt_get_state_t)lookup("ompt_get_state");
  rt->get_parallel_info = (ompt_get_parallel_info_t)lookup("ompt_get_parallel_info");
  rt->get_task_info = (ompt_get_task_info_t)lookup("ompt_get_task_info");
  rt->get_proc_id = (ompt_get_proc_id_t)lookup("ompt_get_proc_id");
  rt->get_place_num = (ompt_get_place_num_t)lookup("ompt_get_place_num");
  if (!rt->set_callback) return 0;
  Dl_info info;
  if (dladdr((void *)rt->set_callback, &info) && info.dli_fname)
    snprintf(rt->path, sizeof rt->path, "%s", info.dli_fname);
  pthread_mutex_lock(&control_lock);
  omptpy_register_callbacks(rt);
  /* Publishes path and levels to the readers of meta.c. */
  atomic_store_explicit(&rt->initialized, 1, memory_order_release);
  consumers_changed_locked();
  pthread_mutex_unlock(&control_lock);
  if (atomic_load(&omptpy_g.sink_on)) omptpy_sink_prepare();
  omptpy_drainer_start();
  return 1;
}

static void write_stats(bool final) {
  if (!omptpy_sink_is_file()) return;
  omptpy_stacks_to_sink();
  omptpy_profile_to_sink();
  omptpy_str s = {0};
  if (omptpy_stats_json(&s, final) == 0) omptpy_sink_json(OMPTPY_BLOCK_STATS, s.p, s.len);
  omptpy_str_free(&s);
}

static void on_finalize(ompt_data_t *tool_data) {
  omptpy_runtime *rt = tool_data->ptr;
  pthread_mutex_lock(&control_lock);
  atomic_store_explicit(&rt->finalized, 1, memory_order_release);
  pthread_mutex_unlock(&control_lock);
  omptpy_devices_stop();
  omptpy_tap_shutdown();
  omptpy_drainer_stop();
  omptpy_flush();
  omptpy_zc_file_finish();
  write_stats(true);
  omptpy_ledger_end(OMPTPY_END_FINALIZE);
}

/* Runs before finalize when the tool was preloaded or dlopened after the
 * runtime; records written later are flushed by finalize. */
__attribute__((destructor)) static void at_unload(void) {
  if (init_rc != 0 || atomic_load(&omptpy_g.nruntimes) == 0) return;
  omptpy_devices_stop();
  omptpy_tap_shutdown();
  omptpy_drainer_stop();
  omptpy_flush();
  write_stats(false);
  omptpy_ledger_end_exit();
}

OMPTPY_API ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
                                                    const char *runtime_version) {
  pthread_once(&init_once, global_init);
  omptpy_tool *g = &omptpy_g;
  g->start_tool_calls++;
  if (init_rc != 0) {
    fprintf(stderr, "ompt-py: %s; the tool is off for this process.\n", g->cfg.error);
    g->declined = 2;
    return NULL;
  }
  if (!g->cfg.enabled) {
    g->declined = 1;
    return NULL;
  }
  int i = atomic_fetch_add(&g->nruntimes, 1);
  if (i >= OMPTPY_MAX_RUNTIMES) {
    atomic_store(&g->nruntimes, OMPTPY_MAX_RUNTIMES);
    g->declined = 3;
    return NULL;
  }
  omptpy_runtime *rt = &g->runtimes[i];
  rt->omp_version = omp_version;
  snprintf(rt->version, sizeof rt->version, "%s", runtime_version ? runtime_version : "");
  rt->result.initialize = on_initialize;
  rt->result.finalize = on_finalize;
  rt->result.tool_data.ptr = rt;
  return &rt->result;
}

/* ---- public API (omptpy_api.h) ------------------------------------------- */

OMPTPY_API int omptpy_init(void) {
  pthread_once(&init_once, global_init);
  return init_rc;
}

OMPTPY_API const char *omptpy_config_error(void) { return omptpy_g.cfg.error; }

/* Profile mode, in memory: every slot's PROFILE block as in the file (header
 * and payload each); the caller frees it with free().  NULL without memory. */
OMPTPY_API char *omptpy_profile_take(size_t *len) {
  omptpy_str s = {0};
  if (omptpy_profile_blocks(&s) != 0 || omptpy_put(&s, "%s", "") != 0) return NULL;
  *len = s.len;
  return s.p;
}

/* Validates the environment as it is now, without changing the tool's configuration. */
OMPTPY_API int omptpy_config_check(char *error, size_t size) {
  omptpy_config cfg;
  int rc = omptpy_config_read(&cfg);
  snprintf(error, size, "%s", cfg.error);
  return rc;
}

OMPTPY_API void omptpy_set_recording(int on) {
  pthread_once(&init_once, global_init);
  if (init_rc != 0) return;
  if (on) omptpy_sink_prepare();
  omptpy_recording_set(on);
}

OMPTPY_API int omptpy_is_recording(void) { return atomic_load(&omptpy_g.sink_on); }

/* The process is about to end without exit() (os._exit, a fatal signal):
 * what finalize would have written, written now. */
OMPTPY_API void omptpy_finish(void) {
  if (init_rc != 0 || atomic_load(&omptpy_g.nruntimes) == 0) return;
  omptpy_devices_stop();
  omptpy_tap_shutdown();
  omptpy_drainer_stop();
  omptpy_flush();
  write_stats(true);
  omptpy_ledger_end(OMPTPY_END_FINISH);
}

OMPTPY_API void omptpy_flush_all(void) {
  if (init_rc != 0) return;
  omptpy_devices_flush(); /* first: the devices' records land in the threads' buffers */
  omptpy_flush();
}

OMPTPY_API void *omptpy_take(size_t *nrecs, size_t *mapped) {
  omptpy_block b = omptpy_zero_copy() ? omptpy_zc_take() : omptpy_sink_take();
  *nrecs = b.nrecs;
  *mapped = b.bytes;
  return b.base;
}

OMPTPY_API void omptpy_release(void *base, size_t mapped) {
  omptpy_block_free((omptpy_block){base, mapped, 0});
}

/* JSON documents; the caller frees them with free(). */
OMPTPY_API char *omptpy_meta(void) {
  omptpy_str s = {0};
  return omptpy_meta_json(&s) == 0 ? s.p : NULL;
}

OMPTPY_API char *omptpy_stats(void) {
  omptpy_str s = {0};
  return omptpy_stats_json(&s, false) == 0 ? s.p : NULL;
}

OMPTPY_API char *omptpy_runtime_info(void) {
  omptpy_str s = {0};
  return omptpy_runtime_info_json(&s) == 0 ? s.p : NULL;
}

static const char tool_anchor_ = 0;

OMPTPY_API const char *omptpy_tool_path(void) {
  static char path[4096];
  Dl_info info;
  if (!dladdr(&tool_anchor_, &info) || !info.dli_fname) return NULL;
  snprintf(path, sizeof path, "%s", info.dli_fname);
  return path;
}

/* ompt_py.control: the tool's side of omp_control_tool, without the runtime
 * (works before the runtime starts and with several runtimes). */
OMPTPY_API int omptpy_control_tool(uint64_t command, uint64_t modifier) {
  pthread_once(&init_once, global_init);
  if (init_rc != 0) return -2; /* what omp_control_tool answers without a tool */
  return omptpy_control(command, modifier, NULL, NULL);
}
