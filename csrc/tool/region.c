/*
 * Regions of user code: omptpy_region_begin/end, exported for C and C++
 * extensions (which reach them through the package's omptpy_region.h), and
 * ompt_py.region in Python.  A marker is a record of event
 * OMPTPY_EVENT_REGION with endpoint begin or end and the id of its name
 * (u64a).  Names are interned here, once each: lookups do not lock (entries
 * are published once and never change), a new name takes a lock and one
 * allocation.  The meta and stats JSON list the names, so readers map ids
 * back to them.  The error callback's messages (bounded) share the table.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "omptpy_internal.h"

#define TABLE_SIZE (2 * OMPTPY_REGION_MAX_NAMES) /* open addressing, at most half full */

static _Atomic(const char *) names[OMPTPY_REGION_MAX_NAMES]; /* id - 1 -> name */
static _Atomic uint32_t nnames;
static _Atomic uint32_t table[TABLE_SIZE]; /* name id, 0 if empty */
static _Atomic uint64_t unnamed;           /* markers past the name limit, recorded with id 0 */
static _Atomic uint64_t messages_unkept;   /* error messages past the limit, recorded with id 0 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

/* The slot holding name, or the empty slot where it would go. */
static uint32_t probe(const char *name, uint64_t h, uint32_t *id) {
  for (uint32_t i = 0;; i++) {
    uint32_t slot = (uint32_t)((h + i) & (TABLE_SIZE - 1));
    *id = atomic_load_explicit(&table[slot], memory_order_acquire);
    if (*id == 0 || strcmp(atomic_load_explicit(&names[*id - 1], memory_order_relaxed), name) == 0)
      return slot;
  }
}

/* The id of name (1 and up), 0 when the table is full: then *refused counts it. */
static uint64_t intern(const char *name, _Atomic uint64_t *refused) {
  if (!name) return 0;
  uint64_t h = hash(name);
  uint32_t id;
  probe(name, h, &id);
  if (id) return id;
  pthread_mutex_lock(&lock);
  uint32_t slot = probe(name, h, &id);
  uint32_t n = atomic_load(&nnames);
  char *copy = id || n == OMPTPY_REGION_MAX_NAMES ? NULL : strdup(name);
  if (copy) {
    atomic_store_explicit(&names[n], copy, memory_order_relaxed);
    atomic_store_explicit(&nnames, n + 1, memory_order_release);
    id = n + 1;
    atomic_store_explicit(&table[slot], id, memory_order_release);
  }
  pthread_mutex_unlock(&lock);
  if (!id) atomic_fetch_add(refused, 1);
  return id;
}

uint64_t omptpy_intern_message(const char *message, size_t length) {
  if (!message) return 0;
  /* A bounded copy: the runtime's text need not end within `length`. */
  char text[OMPTPY_MESSAGE_MAX + 1];
  size_t n = length < OMPTPY_MESSAGE_MAX ? length : OMPTPY_MESSAGE_MAX;
  memcpy(text, message, n);
  text[n] = 0;
  return intern(text, &messages_unkept);
}

uint64_t omptpy_messages_unkept(void) { return atomic_load(&messages_unkept); }

OMPTPY_API void omptpy_region_mark(int endpoint, const char *name, uintptr_t codeptr) {
  if (!omptpy_recording()) return;
  omptpy_emit_own(OMPTPY_EVENT_REGION, endpoint, codeptr, intern(name, &unnamed),
                  endpoint == ompt_scope_begin);
}

OMPTPY_API void omptpy_region_begin(const char *name) {
  omptpy_region_mark(ompt_scope_begin, name, (uintptr_t)__builtin_return_address(0));
}

OMPTPY_API void omptpy_region_end(const char *name) {
  omptpy_region_mark(ompt_scope_end, name, (uintptr_t)__builtin_return_address(0));
}

OMPTPY_API uint32_t omptpy_region_count(void) {
  return atomic_load_explicit(&nnames, memory_order_acquire);
}

OMPTPY_API const char *omptpy_region_name(uint32_t id) {
  return id >= 1 && id <= omptpy_region_count() ? atomic_load(&names[id - 1]) : NULL;
}

uint64_t omptpy_region_unnamed(void) { return atomic_load(&unnamed); }

void omptpy_region_after_fork_child(void) { pthread_mutex_init(&lock, NULL); }
