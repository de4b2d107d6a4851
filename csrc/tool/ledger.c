/*
 * The ledger: per process image, what its threads wrote into their buffers,
 * kept in the raw file itself (LEDGER blocks, omptpy_file.h) through shared
 * mappings of the file, so that the loader can count the records that never
 * reached the file however the process ended (SIGKILL, a crash, _exit, exec,
 * a full disk) and say why.
 *
 * Nothing is added to the hot path: a thread's chunk descriptors, whose
 * count of records it stores after every record anyway, are allocated in the
 * file (one SLOT block per thread slot, buffer.c), and the thread's entry in
 * the PROCESS block is updated on the slow path only (a chunk handed over,
 * a record dropped, a chunk drained).  Whoever sees the image end records
 * how (finalize, exit, the preload hook for _exit, exec and abort).
 *
 * The file is created with the first thread's buffer (sink.c), so a process
 * killed before its first drain still has its ledger.  A child made by fork()
 * would share its parent's mappings: it gets a file of its own at once, its
 * blocks mapped at the addresses of the parent's (the thread structures point
 * into them), the content copied.
 *
 * exec: the preload hook (csrc/hook) passes OMPTPY_EXEC_FROM=BASE:PATH to the
 * new image, whose file names PATH in its META (exec_from) and whose thread
 * indices start at BASE, the previous image's next index, so that thread
 * indices and the ids made from them (omptpy_new_id) stay unique in the
 * process across its images.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "omptpy_internal.h"

#define THREAD_CAP 1024u /* thread entries: 64 KiB */
#define WINDOWS_BYTES ((size_t)64 << 10) /* 4,095 windows */
#define EXEC_VARIABLE "OMPTPY_EXEC_FROM"

typedef struct mapping {
  void *addr;
  size_t bytes;
  uint32_t kind, slot;
} mapping;

static struct {
  omptpy_ledger_head *head; /* NULL: no ledger (memory sink, or the file failed) */
  omptpy_ledger_thread *threads;
  uint32_t max_chunks;
  uint32_t base;           /* thread index of entry 0 */
  char exec_from[4096];    /* the previous image's file, "" if none */
  omptpy_ledger_windows *win; /* the in-place route's windows (WINDOWS block), or NULL */
  mapping *maps;           /* every block mapped, for fork */
  size_t nmaps, capmaps;
  pthread_mutex_t lock;    /* maps */
} L = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t process_bytes(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t b = sizeof(omptpy_ledger_head) + THREAD_CAP * sizeof(omptpy_ledger_thread);
  return (b + page - 1) / page * page;
}

static size_t slot_bytes(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t b = (size_t)L.max_chunks * sizeof(omptpy_chunk);
  return (b + page - 1) / page * page;
}

static void remember(void *addr, size_t bytes, uint32_t kind, uint32_t slot) {
  pthread_mutex_lock(&L.lock);
  if (L.nmaps == L.capmaps) {
    size_t cap = L.capmaps ? 2 * L.capmaps : 16;
    mapping *m = realloc(L.maps, cap * sizeof *m);
    if (!m) { /* not kept for fork: the child then keeps sharing this block */
      pthread_mutex_unlock(&L.lock);
      return;
    }
    L.maps = m;
    L.capmaps = cap;
  }
  L.maps[L.nmaps++] = (mapping){addr, bytes, kind, slot};
  pthread_mutex_unlock(&L.lock);
}

/* OMPTPY_EXEC_FROM, when it was set for this very process (an exec made
 * through the hook keeps the pid; another process inherits a stale value). */
void omptpy_ledger_init(uint32_t max_chunks) {
  L.max_chunks = max_chunks;
  const char *v = getenv(EXEC_VARIABLE);
  char *end;
  if (!v || !*v) return;
  errno = 0;
  unsigned long base = strtoul(v, &end, 10);
  if (errno || *end != ':' || base >= UINT32_MAX / 2) return;
  const char *path = end + 1;
  const char *name = strrchr(path, '/');
  name = name ? name + 1 : path;
  char mine[64];
  snprintf(mine, sizeof mine, "ompt-%d-", (int)getpid());
  if (strncmp(name, mine, strlen(mine)) != 0 || strlen(path) >= sizeof L.exec_from) return;
  strcpy(L.exec_from, path);
  L.base = (uint32_t)base;
}

uint32_t omptpy_ledger_base(void) { return L.base; }

const char *omptpy_ledger_exec_from(void) { return L.exec_from; }

static void head_init(void) {
  *L.head = (omptpy_ledger_head){.version = 1, .thread_cap = THREAD_CAP, .thread_base = L.base,
                                 .chunk_records = OMPTPY_CHUNK_RECORDS,
                                 .max_chunks = L.max_chunks};
}

/* Replaces the mapping at `at` by private memory: a forked child's stores must
 * not reach its parent's file. */
static void privatize(void *at, size_t bytes) {
  mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/* sink.c, under its file lock, right after META.  In a forked child the block
 * is mapped where the parent's was. */
void omptpy_ledger_open(void) {
  size_t bytes = process_bytes();
  void *at = L.head;
  void *p = omptpy_sink_ledger_block_locked(OMPTPY_LEDGER_PROCESS, 0, bytes, at);
  if (!p) {
    if (at) privatize(at, bytes);
    L.head = NULL;
    return;
  }
  remember(p, bytes, OMPTPY_LEDGER_PROCESS, 0);
  L.threads = (omptpy_ledger_thread *)((char *)p + sizeof(omptpy_ledger_head));
  L.head = p;
  head_init();
}

omptpy_chunk *omptpy_ledger_slot(uint32_t slot) {
  size_t bytes = slot_bytes();
  void *p = omptpy_sink_ledger_block(OMPTPY_LEDGER_SLOT, slot, bytes, NULL);
  if (p) remember(p, bytes, OMPTPY_LEDGER_SLOT, slot);
  return p;
}

omptpy_ledger_thread *omptpy_ledger_thread_entry(uint32_t index) {
  if (!L.head) return NULL;
  if (index < L.base || index - L.base >= THREAD_CAP) {
    L.head->unaccounted++; /* under the registry lock */
    return NULL;
  }
  return &L.threads[index - L.base];
}

void omptpy_ledger_end(int how) {
  if (L.head) atomic_store((_Atomic uint32_t *)&L.head->ending, (uint32_t)how);
}

/* exit() without finalize: the tool's destructor, which may run after finalize
 * (that ending stays). */
void omptpy_ledger_end_exit(void) {
  if (L.head && !L.head->ending) omptpy_ledger_end(OMPTPY_END_EXIT);
}

void omptpy_ledger_sink_failed(int err) {
  if (L.head && !L.head->sink_errno) L.head->sink_errno = err;
}

bool omptpy_ledger_on(void) { return L.head != NULL; }

/* Under drain_lock: the in-place route made its first region.  The head says
 * so, and the sink's windows get a block, starting with the open one if any
 * (a forked child's was copied from its parent's).  Without the block the
 * loader keeps every record. */
void omptpy_ledger_in_place(bool open, uint64_t from) {
  if (!L.head) return;
  L.head->in_place = 1;
  if (L.win) return;
  omptpy_ledger_windows *w = omptpy_sink_ledger_block(OMPTPY_LEDGER_WINDOWS, 0, WINDOWS_BYTES,
                                                      NULL);
  if (!w) return;
  remember(w, WINDOWS_BYTES, OMPTPY_LEDGER_WINDOWS, 0);
  w->cap = (uint32_t)((WINDOWS_BYTES - sizeof *w) / sizeof(omptpy_window));
  if (open) {
    ((omptpy_window *)(w + 1))[0] = (omptpy_window){from, UINT64_MAX};
    w->count = 1;
  }
  L.win = w;
}

/* Under drain_lock: the sink window opened or closed at `now`.  An entry is
 * complete before the count shows it (read after a kill); a full table
 * extends its last window over the gap instead. */
void omptpy_ledger_window(bool open, uint64_t now) {
  omptpy_ledger_windows *w = L.win;
  if (!w) return;
  omptpy_window *e = (omptpy_window *)(w + 1);
  if (!open) {
    if (w->count) e[w->count - 1].until = now;
  } else if (w->count < w->cap) {
    e[w->count] = (omptpy_window){now, UINT64_MAX};
    atomic_signal_fence(memory_order_seq_cst);
    *(volatile uint32_t *)&w->count = w->count + 1;
  } else {
    e[w->cap - 1].until = UINT64_MAX;
  }
}

/* fork: the child's blocks go into a file of its own, at the same addresses
 * (or into private memory if it cannot have one), the slots' content copied;
 * the process block starts afresh (buffer.c enters the forking thread again).
 * The child has one thread: nothing writes meanwhile.  Its thread indices go
 * on from its parent's (base kept); it is no exec's successor. */
void omptpy_ledger_after_fork_child(void) {
  pthread_mutex_init(&L.lock, NULL);
  if (!L.head) return;
  mapping *maps = L.maps;
  size_t n = L.nmaps;
  L.maps = NULL;
  L.nmaps = L.capmaps = 0;
  L.exec_from[0] = '\0';
  bool file = omptpy_sink_file_open() && L.head;
  if (!file && L.head) {
    privatize(L.head, process_bytes());
    L.head = NULL;
  }
  for (size_t i = 0; i < n; i++) {
    mapping *m = &maps[i];
    if (m->kind == OMPTPY_LEDGER_PROCESS) continue; /* omptpy_ledger_open did it */
    void *copy = malloc(m->bytes);
    if (copy) memcpy(copy, m->addr, m->bytes);
    void *p = file ? omptpy_sink_ledger_block(m->kind, m->slot, m->bytes, m->addr) : NULL;
    if (p) remember(p, m->bytes, m->kind, m->slot);
    else privatize(m->addr, m->bytes);
    if (copy) memcpy(m->addr, copy, m->bytes);
    free(copy);
  }
  free(maps);
}
