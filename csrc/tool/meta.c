/*
 * JSON descriptions of the process (meta) and of the counters (stats), the
 * one source for both the file sink and the Python module.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "omptpy_internal.h"

void omptpy_str_free(omptpy_str *s) {
  free(s->p);
  memset(s, 0, sizeof *s);
}

static int reserve(omptpy_str *s, size_t more) {
  if (s->len + more + 1 <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 1024;
  while (cap < s->len + more + 1) cap *= 2;
  char *p = realloc(s->p, cap);
  if (!p) return -ENOMEM;
  s->p = p;
  s->cap = cap;
  return 0;
}

int omptpy_put(omptpy_str *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || reserve(s, (size_t)n) != 0) return -ENOMEM;
  va_start(ap, fmt);
  vsnprintf(s->p + s->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  s->len += (size_t)n;
  return 0;
}

/* The length of the valid UTF-8 sequence at v[i] (2 to 4 bytes), or 0. */
static size_t utf8_sequence(const unsigned char *v, size_t i, size_t n) {
  unsigned char c = v[i];
  size_t len = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
  if (!len || i + len > n) return 0;
  for (size_t k = 1; k < len; k++)
    if ((v[i + k] & 0xc0) != 0x80) return 0;
  /* no overlong forms, no surrogates, nothing above U+10FFFF */
  if ((c == 0xe0 && v[i + 1] < 0xa0) || (c == 0xed && v[i + 1] >= 0xa0) ||
      (c == 0xf0 && v[i + 1] < 0x90) || (c == 0xf4 && v[i + 1] >= 0x90))
    return 0;
  return len;
}

/* A JSON string literal: valid UTF-8 is kept, control characters and every
 * other byte are escaped (a byte b >= 0x80 outside UTF-8 becomes U+00bb). */
int omptpy_put_string(omptpy_str *s, const char *v, size_t n) {
  if (reserve(s, 6 * n + 2) != 0) return -ENOMEM;
  const unsigned char *u = (const unsigned char *)v;
  s->p[s->len++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = u[i];
    size_t seq = c >= 0x80 ? utf8_sequence(u, i, n) : 0;
    if (seq) {
      memcpy(s->p + s->len, u + i, seq);
      s->len += seq;
      i += seq - 1;
    } else if (c == '"' || c == '\\') {
      s->p[s->len++] = '\\';
      s->p[s->len++] = (char)c;
    } else if (c < 0x20 || c >= 0x7f) {
      s->len += (size_t)sprintf(s->p + s->len, "\\u%04x", c);
    } else {
      s->p[s->len++] = (char)c;
    }
  }
  s->p[s->len++] = '"';
  s->p[s->len] = '\0';
  return 0;
}

static int put_cmdline(omptpy_str *s) {
  char buf[65536];
  ssize_t n = 0;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, buf, sizeof buf);
    close(fd);
  }
  int rc = omptpy_put(s, "[");
  for (ssize_t i = 0, first = 1; rc == 0 && i < n; first = 0) {
    size_t len = strnlen(buf + i, (size_t)(n - i));
    if (!first) rc = omptpy_put(s, ",");
    if (rc == 0) rc = omptpy_put_string(s, buf + i, len);
    i += (ssize_t)len + 1;
  }
  return rc ? rc : omptpy_put(s, "]");
}

static const char *level_name(int level) {
  static const char *names[] = {"error", "never", "impossible", "sometimes", "sometimes_paired",
                                "always"};
  return level >= 0 && level <= 5 ? names[level] : "unknown";
}

static const char *overflow_name(omptpy_overflow o) {
  return o == OMPTPY_OVERFLOW_GROW ? "grow" : o == OMPTPY_OVERFLOW_DROP ? "drop" : "flush";
}

/* The loaded objects and where their code is, so that readers can turn code
 * addresses into module + offset (and from there into function and line).
 * Written with the meta and with every stats block: a reader takes the union,
 * which keeps objects that were dlopened later or unloaded before the end. */
typedef struct modules_ctx {
  omptpy_str *s;
  int rc;
  bool first;
} modules_ctx;

/* The GNU build id of a loaded object, as hex into out ("" if it has none). */
static void build_id(const struct dl_phdr_info *info, char *out, size_t size) {
  out[0] = '\0';
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const char *note = (const char *)(info->dlpi_addr + ph->p_vaddr);
    const char *end = note + ph->p_memsz;
    while (note + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)note;
      const char *name = note + sizeof *nh;
      const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        size_t n = 0;
        for (ElfW(Word) k = 0; k < nh->n_descsz && n + 3 <= size; k++)
          n += (size_t)snprintf(out + n, size - n, "%02x", desc[k]);
        return;
      }
      note = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
}

static int module_visit(struct dl_phdr_info *info, size_t size, void *p) {
  (void)size;
  modules_ctx *m = p;
  char id[129];
  build_id(info, id, sizeof id);
  char exe[4096];
  const char *name = info->dlpi_name;
  if (!name || !*name) { /* the main program */
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    name = exe;
  }
  if (name[0] != '/') return 0; /* the vDSO and the like */
  for (int i = 0; i < info->dlpi_phnum && m->rc == 0; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uint64_t start = info->dlpi_addr + ph->p_vaddr;
    m->rc = omptpy_put(m->s, "%s{\"path\":", m->first ? "" : ",");
    m->rc = m->rc ? m->rc : omptpy_put_string(m->s, name, strlen(name));
    m->rc = m->rc ? m->rc : omptpy_put(m->s, ",\"base\":%llu,\"start\":%llu,\"end\":%llu,"
                                "\"build_id\":\"%s\"}",
                                (unsigned long long)info->dlpi_addr, (unsigned long long)start,
                                (unsigned long long)(start + ph->p_memsz), id);
    m->first = false;
  }
  return m->rc;
}

/* dl_iterate_phdr holds the dynamic loader's lock while it runs, and the
 * drainer runs it (stats blocks) while the program may fork: a child forked
 * meanwhile would inherit that lock taken and hang at its next dlopen.  So
 * fork waits for a module walk in progress (omptpy_meta_atfork_*). */
static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;

void omptpy_meta_atfork_prepare(void) { pthread_mutex_lock(&modules_lock); }

void omptpy_meta_atfork_parent(void) { pthread_mutex_unlock(&modules_lock); }

void omptpy_meta_after_fork_child(void) { pthread_mutex_init(&modules_lock, NULL); }

static int put_modules(omptpy_str *s) {
  modules_ctx m = {s, omptpy_put(s, ",\"modules\":["), true};
  if (m.rc == 0) {
    pthread_mutex_lock(&modules_lock);
    dl_iterate_phdr(module_visit, &m);
    pthread_mutex_unlock(&modules_lock);
  }
  return m.rc ? m.rc : omptpy_put(s, "]");
}

/* The names of user-code regions and the error messages (region.c), id 1
 * first: written with the meta and with every stats block, since names are
 * added as the run goes; then what the full table refused. */
static int put_region_names(omptpy_str *s) {
  uint32_t n = omptpy_region_count();
  int rc = omptpy_put(s, ",\"region_names\":[");
  for (uint32_t id = 1; rc == 0 && id <= n; id++) {
    const char *name = omptpy_region_name(id);
    rc = omptpy_put(s, id > 1 ? "," : "");
    rc = rc ? rc : omptpy_put_string(s, name, strlen(name));
  }
  rc = rc ? rc : omptpy_put(s, "],\"region_unnamed\":%llu,\"error_messages_unkept\":%llu",
                            (unsigned long long)omptpy_region_unnamed(),
                            (unsigned long long)omptpy_messages_unkept());
  return rc;
}

/* The members the meta and every stats document end with (after theirs, rc
 * so far), which change as the run goes: the loaded objects and the region
 * names.  On failure s is emptied. */
static int finish_document(omptpy_str *s, int rc) {
  rc = rc ? rc : put_modules(s);
  rc = rc ? rc : put_region_names(s);
  rc = rc ? rc : omptpy_put(s, "}");
  if (rc) omptpy_str_free(s);
  return rc;
}

/* ,"start_tool_calls":N,"declined":N,"runtimes":[...]: the runtimes that asked
 * for the tool and what each registered.  In the META document (as they were
 * when the trace started) and in every STATS document (as they are now: under
 * ompt-py run --mpi the MPI library may start the trace before the runtime). */
static int put_runtimes(omptpy_str *s) {
  int rc = omptpy_put(s, ",\"start_tool_calls\":%d,\"declined\":%d,\"runtimes\":[",
                      omptpy_g.start_tool_calls, omptpy_g.declined);
  int nrt = atomic_load(&omptpy_g.nruntimes);
  if (nrt > OMPTPY_MAX_RUNTIMES) nrt = OMPTPY_MAX_RUNTIMES;
  for (int i = 0; rc == 0 && i < nrt; i++) {
    const omptpy_runtime *rt = &omptpy_g.runtimes[i];
    /* levels and path are written before initialized (release), and only then. */
    bool initialized = atomic_load_explicit(&rt->initialized, memory_order_acquire);
    bool finalized = atomic_load_explicit(&rt->finalized, memory_order_acquire);
    rc = omptpy_put(s, "%s{\"omp_version\":%u,\"version\":", i ? "," : "", rt->omp_version);
    rc = rc ? rc : omptpy_put_string(s, rt->version, strlen(rt->version));
    rc = rc ? rc : omptpy_put(s, ",\"path\":");
    rc = rc ? rc : omptpy_put_string(s, initialized ? rt->path : "", initialized ? strlen(rt->path) : 0);
    rc = rc ? rc : omptpy_put(s, ",\"initialized\":%s,\"finalized\":%s,\"callbacks\":{",
                       initialized ? "true" : "false", finalized ? "true" : "false");
    for (int ev = 0, first = 1; rc == 0 && initialized && ev < OMPTPY_MAX_EVENTS; ev++) {
      if (rt->levels[ev] < 0 || !omptpy_event_name(ev)) continue;
      rc = omptpy_put(s, "%s\"%s\":\"%s\"", first ? "" : ",", omptpy_event_name(ev),
               level_name(rt->levels[ev]));
      first = 0;
    }
    rc = rc ? rc : omptpy_put(s, "}}");
  }
  return rc ? rc : omptpy_put(s, "]");
}

int omptpy_meta_json(omptpy_str *s) {
  const omptpy_tool *g = &omptpy_g;
  char exe[4096] = "";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  int rc = omptpy_put(s, "{\"format\":1,\"record_version\":%d,\"record_size\":%zu,\"chunk_records\":%u,",
               OMPTPY_RECORD_VERSION, sizeof(omptpy_record), OMPTPY_CHUNK_RECORDS);
  rc = rc ? rc : omptpy_put(s, "\"pid\":%d,\"ppid\":%d,\"rank\":%d,\"hostname\":", (int)getpid(),
                     (int)getppid(), omptpy_job_rank());
  rc = rc ? rc : omptpy_put_string(s, host, strlen(host));
  char job[256];
  omptpy_job_id(job, sizeof job);
  rc = rc ? rc : omptpy_put(s, ",\"local_rank\":%d,\"job_id\":", omptpy_job_local_rank());
  rc = rc ? rc : omptpy_put_string(s, job, strlen(job));
  rc = rc ? rc : omptpy_put(s, ",\"exe\":");
  rc = rc ? rc : omptpy_put_string(s, exe, strlen(exe));
  rc = rc ? rc : omptpy_put(s, ",\"argv\":");
  rc = rc ? rc : put_cmdline(s);
  /* How the process got its runtime: ompt-py run preloads libomp for libgomp-built code. */
  const char *preload = getenv("LD_PRELOAD");
  rc = rc ? rc : omptpy_put(s, ",\"ld_preload\":");
  rc = rc ? rc : omptpy_put_string(s, preload ? preload : "", preload ? strlen(preload) : 0);
  /* The file of the image this one replaced by an exec (ledger.c), "" if none. */
  const char *exec_from = omptpy_ledger_exec_from();
  rc = rc ? rc : omptpy_put(s, ",\"exec_from\":");
  rc = rc ? rc : omptpy_put_string(s, exec_from, strlen(exec_from));
  rc = rc ? rc : omptpy_put(s, ",\"clock\":\"%s\",\"tick_ns_estimate\":%.9f,"
                     "\"start_anchor\":{\"ticks\":%llu,\"mono_ns\":%llu},\"start_realtime_ns\":%llu,",
                     omptpy_clock_name(), g->tick_ns_estimate,
                     (unsigned long long)g->start_anchor.ticks,
                     (unsigned long long)g->start_anchor.mono_ns,
                     (unsigned long long)g->start_realtime_ns);
  rc = rc ? rc : omptpy_put(s, "\"config\":{\"enabled\":%s,\"buffer_bytes\":%zu,\"overflow\":\"%s\","
                     "\"drain_ms\":%u,\"populate_ahead\":%s,\"sample_hz\":%u,"
                     "\"place_info\":%s,\"sink\":\"%s\",\"output\":",
                     g->cfg.enabled ? "true" : "false", g->cfg.buffer_bytes,
                     overflow_name(g->cfg.overflow), g->cfg.drain_ms,
                     g->cfg.populate_ahead ? "true" : "false", g->cfg.sample_hz,
                     g->cfg.place_info ? "true" : "false",
                     g->cfg.output[0] ? "file" : "memory");
  rc = rc ? rc : omptpy_put_string(s, g->cfg.output, strlen(g->cfg.output));
  rc = rc ? rc : omptpy_put(s, ",\"error\":");
  rc = rc ? rc : omptpy_put_string(s, g->cfg.error, strlen(g->cfg.error));
  rc = rc ? rc : omptpy_put(s, ",\"handler_queue_bytes\":%zu", g->cfg.handler_queue_bytes);
  rc = rc ? rc : omptpy_put(s, ",\"device_trace\":%s,\"device_buffer_bytes\":%zu,"
                            "\"device_memory_bytes\":%zu",
                            g->cfg.device_trace ? "true" : "false", g->cfg.device_buffer_bytes,
                            g->cfg.device_memory_bytes);
  rc = rc ? rc : omptpy_put(s, ",\"zero_copy\":%s", omptpy_zero_copy() ? "true" : "false");
  rc = rc ? rc : omptpy_put(s, ",\"profile\":%s,\"profile_entries\":%u",
                            g->cfg.profile ? "true" : "false", g->cfg.profile_entries);
  rc = rc ? rc : omptpy_put(s, ",\"sample_signal\":%d,\"sample_error\":", g->cfg.sample_signal);
  rc = rc ? rc : omptpy_put_string(s, g->cfg.sample_error, strlen(g->cfg.sample_error));
  rc = rc ? rc : omptpy_put(s, "}");
  rc = rc ? rc : put_runtimes(s);
  rc = rc ? rc : omptpy_put(s, ",\"devices\":");
  rc = rc ? rc : omptpy_devices_json(s, -1);
  return finish_document(s, rc);
}

/* {value: name} of an OMPT enumeration (states, mutex implementations). */
static int put_enumeration(omptpy_str *s, const char *key, int (*next)(int, int *, const char **),
                           int first) {
  int rc = omptpy_put(s, ",\"%s\":{", key);
  if (!next) return rc ? rc : omptpy_put(s, "}");
  int value = first, following;
  const char *name;
  for (int n = 0; rc == 0 && next(value, &following, &name) && n < 1024; n++) {
    rc = omptpy_put(s, "%s\"%d\":", n ? "," : "", following);
    rc = rc ? rc : omptpy_put_string(s, name ? name : "", name ? strlen(name) : 0);
    value = following;
  }
  return rc ? rc : omptpy_put(s, "}");
}

int omptpy_runtime_info_json(omptpy_str *s) {
  int rc = omptpy_put(s, "[");
  int n = atomic_load(&omptpy_g.nruntimes);
  for (int i = 0, first = 1; rc == 0 && i < n && i < OMPTPY_MAX_RUNTIMES; i++) {
    const omptpy_runtime *rt = &omptpy_g.runtimes[i];
    if (!atomic_load_explicit(&rt->initialized, memory_order_acquire) ||
        atomic_load_explicit(&rt->finalized, memory_order_acquire))
      continue;
    rc = omptpy_put(s, "%s{\"path\":", first ? "" : ",");
    first = 0;
    rc = rc ? rc : omptpy_put_string(s, rt->path, strlen(rt->path));
    rc = rc ? rc : omptpy_put(s, ",\"version\":");
    rc = rc ? rc : omptpy_put_string(s, rt->version, strlen(rt->version));
    /* ompt_state_undefined (0x102) and ompt_mutex_impl_none (0) start the enumerations. */
    rc = rc ? rc : put_enumeration(s, "states", rt->enumerate_states, 0x102);
    rc = rc ? rc : put_enumeration(s, "mutex_impls", rt->enumerate_mutex_impls, 0);
    rc = rc ? rc : omptpy_put(s, ",\"num_procs\":%d,\"num_devices\":%d,\"places\":[",
                       rt->get_num_procs ? rt->get_num_procs() : -1,
                       rt->get_num_devices ? rt->get_num_devices() : -1);
    int places = rt->get_num_places ? rt->get_num_places() : 0;
    for (int p = 0; rc == 0 && p < places; p++) {
      int ids[1024];
      int k = rt->get_place_proc_ids(p, 1024, ids);
      rc = omptpy_put(s, "%s[", p ? "," : "");
      for (int j = 0; rc == 0 && j < k && j < 1024; j++) rc = omptpy_put(s, "%s%d", j ? "," : "", ids[j]);
      rc = rc ? rc : omptpy_put(s, "]");
    }
    rc = rc ? rc : omptpy_put(s, "],\"devices\":");
    rc = rc ? rc : omptpy_devices_json(s, i);
    rc = rc ? rc : omptpy_put(s, "}");
  }
  rc = rc ? rc : omptpy_put(s, "]");
  if (rc) omptpy_str_free(s);
  return rc;
}

typedef struct visit_ctx {
  omptpy_str *s;
  int rc;
  bool first;
} visit_ctx;

static void visit(void *p, uint32_t index, int type, int runtime, pid_t tid, uint64_t written,
                  uint64_t dropped, uint64_t samples_skipped, uint64_t nobuf, bool live) {
  visit_ctx *v = p;
  if (v->rc) return;
  v->rc = omptpy_put(v->s,
              "%s{\"thread\":%u,\"type\":%d,\"runtime\":%d,\"tid\":%d,\"written\":%llu,"
              "\"dropped\":%llu,\"samples_skipped\":%llu,\"nobuf\":%llu,\"live\":%s}",
              v->first ? "" : ",", index, type, runtime, (int)tid, (unsigned long long)written,
              (unsigned long long)dropped, (unsigned long long)samples_skipped,
              (unsigned long long)nobuf, live ? "true" : "false");
  v->first = false;
}

int omptpy_stats_json(omptpy_str *s, bool final) {
  omptpy_anchor a = omptpy_clock_anchor();
  int rc = omptpy_put(s, "{\"final\":%s,\"recording\":%s,\"anchor\":{\"ticks\":%llu,\"mono_ns\":%llu},"
               "\"realtime_ns\":%llu,\"sink_lost\":%llu,\"buffer_bytes\":%zu,\"threads\":[",
               final ? "true" : "false", atomic_load(&omptpy_g.sink_on) ? "true" : "false",
               (unsigned long long)a.ticks, (unsigned long long)a.mono_ns,
               (unsigned long long)omptpy_realtime_ns(), (unsigned long long)omptpy_sink_lost(),
               omptpy_buffer_bytes());
  visit_ctx v = {s, rc, true};
  if (rc == 0) omptpy_visit_threads(visit, &v);
  rc = v.rc ? v.rc : omptpy_put(s, "]");
  rc = rc ? rc : put_runtimes(s);
  /* The devices' counters now (device tracing goes on after the meta). */
  rc = rc ? rc : omptpy_put(s, ",\"devices\":");
  rc = rc ? rc : omptpy_devices_json(s, -1);
  /* The in-place file route: writers that found the file's region full and
   * made the next one themselves, and how long that held them. */
  uint64_t stalls, stall_ns;
  omptpy_zc_file_stats(&stalls, &stall_ns);
  if (stalls)
    rc = rc ? rc : omptpy_put(s, ",\"region_stalls\":%llu,\"region_stall_ns\":%llu",
                              (unsigned long long)stalls, (unsigned long long)stall_ns);
  rc = rc ? rc : omptpy_mpi_json(s);
  if (omptpy_profiling)
    rc = rc ? rc : omptpy_put(s, ",\"profile_unmapped\":%llu",
                              (unsigned long long)omptpy_profile_unmapped());
  return finish_document(s, rc);
}
