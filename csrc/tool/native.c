/*
 * Native handlers (ompt_py.native_handler): C functions that the tool calls
 * on the OpenMP thread itself, right after it wrote a record of one of their
 * events, without the GIL (see omptpy_native_after in the internal header:
 * with none installed, the hot path pays one load and a predictable branch).
 *
 * Handlers are added and removed while OpenMP threads run them.  An entry is
 * immutable once published and is never freed, and neither is the state
 * memory handed out by omptpy_native_alloc, so a thread still inside a
 * handler that was just removed never touches freed memory (the handler's
 * code lives in a module Python never unloads).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "omptpy_internal.h"

typedef struct native_entry {
  omptpy_native_fn fn;
  void *state;
  uint64_t events[2]; /* bit e: event number e (0-127) */
} native_entry;

_Atomic uint32_t omptpy_native_count;
static _Atomic(native_entry *) slots[OMPTPY_NATIVE_MAX];
static _Atomic uint32_t high; /* slots at and above this index are empty */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void omptpy_native_run(const omptpy_record *r) {
  uint32_t e = r->event, n = atomic_load_explicit(&high, memory_order_acquire);
  if (e >= 128) return;
  for (uint32_t i = 0; i < n; i++) {
    const native_entry *s = atomic_load_explicit(&slots[i], memory_order_acquire);
    if (s && (s->events[e >> 6] >> (e & 63) & 1)) s->fn(r, s->state);
  }
}

uint64_t omptpy_native_events(void) {
  uint64_t mask = 0;
  uint32_t n = atomic_load(&high);
  for (uint32_t i = 0; i < n; i++) {
    const native_entry *s = atomic_load(&slots[i]);
    if (s) mask |= s->events[0];
  }
  return mask;
}

OMPTPY_API int omptpy_native_add(omptpy_native_fn fn, void *state, const uint64_t events[2]) {
  if (!fn || omptpy_init() != 0) return -EINVAL;
  native_entry *s = malloc(sizeof *s);
  if (!s) return -ENOMEM;
  *s = (native_entry){fn, state, {events[0], events[1]}};
  pthread_mutex_lock(&lock);
  int id = -ENOSPC;
  for (int i = 0; i < OMPTPY_NATIVE_MAX && id < 0; i++) {
    if (atomic_load(&slots[i])) continue;
    atomic_store_explicit(&slots[i], s, memory_order_release);
    if ((uint32_t)i >= atomic_load(&high)) atomic_store_explicit(&high, (uint32_t)i + 1,
                                                                 memory_order_release);
    atomic_fetch_add(&omptpy_native_count, 1);
    id = i;
  }
  pthread_mutex_unlock(&lock);
  if (id < 0) free(s);
  else omptpy_consumers_changed();
  return id;
}

/* The entry stays allocated: a thread may still be about to call it. */
OMPTPY_API int omptpy_native_remove(int id) {
  if (id < 0 || id >= OMPTPY_NATIVE_MAX) return -EINVAL;
  pthread_mutex_lock(&lock);
  native_entry *s = atomic_exchange(&slots[id], NULL);
  if (s) atomic_fetch_sub(&omptpy_native_count, 1);
  pthread_mutex_unlock(&lock);
  if (!s) return -ENOENT;
  omptpy_consumers_changed();
  return 0;
}

/* Zeroed, cache-line aligned, never freed (see above). */
OMPTPY_API void *omptpy_native_alloc(size_t bytes) {
  void *p;
  size_t size = bytes ? (bytes + OMPTPY_CACHELINE - 1) & ~(size_t)(OMPTPY_CACHELINE - 1)
                      : OMPTPY_CACHELINE;
  if (posix_memalign(&p, OMPTPY_CACHELINE, size) != 0) return NULL;
  memset(p, 0, size);
  return p;
}

void omptpy_native_after_fork_child(void) { pthread_mutex_init(&lock, NULL); }
