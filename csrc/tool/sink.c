/*
 * Where drained records go.  Memory sink (the default, for ompt_py in the
 * same process): one anonymous mapping that the Python module takes whole,
 * without a copy.  With the zero-copy memory sink (zerocopy.c) threads write
 * into such a mapping directly and only omptpy_sink_reserve is used from
 * here; the copying memory sink below remains for OMPTPY_ZERO_COPY=0 and
 * kernels without membarrier.  File sink (OMPTPY_OUTPUT=dir, for `ompt-py run` and
 * any process without Python): an append-only file of blocks per process,
 * dir/ompt-<pid>-<n>.omptraw, opened at the first block so that processes
 * which never run OpenMP leave no file.  Each block is a 16-byte header
 * {magic, type, length} and its payload: META (JSON, first), RECORDS (raw
 * omptpy_record array of one thread, in order) and STATS (JSON counters);
 * see omptpy_file.h.  The file is created with the first thread's buffer
 * (omptpy_sink_file_open), not at the first records: its LEDGER blocks
 * (ledger.c) must exist before any thread counts records into them, so that
 * a process killed before its first drain still says what it lost.
 * Writes to the file take the file lock (they come from the drain passes and
 * from the creation of thread buffers); the memory sink's functions are
 * called under the drain lock or before threads exist.
 *
 * Fresh memory costs more than copying into it (the kernel zeroes and maps
 * every page on first touch: on the machines measured, 15 ns per 64-byte
 * record with 4 KiB pages, 7 ns with transparent huge pages).  The memory
 * sink asks for huge pages and keeps storage populated ahead of the writes;
 * OMPTPY_RESERVE populates that much of it before a trace window records,
 * so a run whose trace fits pays none of it while the program runs.  (The
 * file sink writes through the page cache, which cannot be provisioned
 * ahead: preallocated blocks made the writes slower.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "omptpy_internal.h"

#define RESERVE_BYTES ((size_t)64 << 30)
#define MIN_RESERVE_BYTES ((size_t)64 << 20)
#define PREFAULT_AHEAD ((size_t)32 << 20)

static struct {
  bool file;
  char dir[4096];
  char path[4200];    /* of the file, once created */
  int fd;             /* -1 until the first block */
  bool failed;        /* a write failed: the rest is counted as lost */
  int error;          /* the errno of that failure */
  uint64_t size;      /* bytes written to the file */
  pthread_mutex_t file_lock; /* fd, size, failed: the file's writers */
  uint64_t lost;      /* records that could not be written */
  omptpy_block mem;   /* memory sink */
  size_t populated;   /* bytes of mem.base known to be faulted in */
  size_t reserve;     /* OMPTPY_RESERVE: bytes to populate before recording */
  pthread_mutex_t mem_lock;
} S = {.fd = -1, .mem_lock = PTHREAD_MUTEX_INITIALIZER, .file_lock = PTHREAD_MUTEX_INITIALIZER};

bool omptpy_sink_is_file(void) { return S.file; }

uint64_t omptpy_sink_lost(void) { return S.lost + omptpy_zc_file_lost(); }

int omptpy_sink_open(const omptpy_config *cfg) {
  S.file = cfg->output[0] != '\0';
  if (S.file) strcpy(S.dir, cfg->output);
  S.reserve = cfg->reserve_bytes;
  return 0;
}

static int write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

/* Under file_lock.  A failed write marks the file failed: what follows is counted as lost. */
static int write_block(uint32_t type, const void *data, size_t len) {
  omptpy_block_header h = {OMPTPY_FILE_MAGIC, type, len};
  struct iovec iov[2] = {{&h, sizeof h}, {(void *)data, len}};
  int rc = write_all(S.fd, iov, 2);
  if (rc == -EBADF && S.path[0]) {
    /* The program closed every descriptor (Python's subprocess between fork and
     * exec): the file is opened again, nothing of the block was written. */
    int fd = open(S.path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0) {
      S.fd = fd;
      struct iovec again[2] = {{&h, sizeof h}, {(void *)data, len}};
      rc = write_all(S.fd, again, 2);
    }
  }
  if (rc == 0) {
    S.size += sizeof h + len;
  } else if (!S.failed) {
    S.failed = true;
    S.error = -rc;
    fprintf(stderr, "ompt-py: writing the trace to %s failed: %s; the records that follow are "
            "counted as lost\n", S.path, strerror(-rc));
    omptpy_ledger_sink_failed(-rc);
  }
  return rc;
}

/* Under file_lock: opens this process's file, writes its META block and the
 * ledger's first block. */
static bool file_ready(void) {
  if (S.fd >= 0) return !S.failed;
  if (S.failed) return false;
  for (int n = 0; n < 1000 && S.fd < 0; n++) {
    snprintf(S.path, sizeof S.path, "%s/ompt-%d-%d.omptraw", S.dir, (int)getpid(), n);
    S.fd = open(S.path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (S.fd < 0 && errno != EEXIST) break;
  }
  if (S.fd < 0) {
    fprintf(stderr, "ompt-py: cannot create a trace file in %s: %s; records are counted as lost\n",
            S.dir, strerror(errno));
    S.failed = true;
    S.error = errno;
    S.path[0] = '\0';
    return false;
  }
  S.size = 0;
  omptpy_str meta = {0};
  int rc = omptpy_meta_json(&meta);
  if (rc == 0) rc = write_block(OMPTPY_BLOCK_META, meta.p, meta.len);
  omptpy_str_free(&meta);
  if (rc == 0) {
    omptpy_ledger_open();
  } else { /* kept, empty or cut short: the loader reports a process whose trace was lost */
    S.path[0] = '\0';
    close(S.fd);
    S.fd = -1;
  }
  return rc == 0;
}

bool omptpy_sink_file_open(void) {
  if (!S.file) return false;
  pthread_mutex_lock(&S.file_lock);
  bool ok = file_ready();
  pthread_mutex_unlock(&S.file_lock);
  return ok;
}

const char *omptpy_sink_path(void) { return S.fd >= 0 ? S.path : ""; }

/* Under file_lock (omptpy_ledger_open) or holding it: appends a LEDGER block
 * whose data (`bytes`, zeros, a multiple of the page size) starts on a page of
 * the file, and maps the data MAP_SHARED (at `at`, replacing what is there, if
 * not NULL).  Writing the zeros allocates the file's blocks, so a later store
 * into the mapping cannot fault on a full disk. */
static void *map_ledger_block(uint32_t kind, uint32_t slot, size_t bytes, void *at) {
  if (S.fd < 0 || S.failed) return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t payload = S.size + sizeof(omptpy_block_header);
  uint64_t data = (payload + sizeof(omptpy_ledger_prefix) + page - 1) / page * page;
  size_t pad = (size_t)(data - payload);
  char *buf = calloc(1, pad + bytes);
  if (!buf) return NULL;
  omptpy_ledger_prefix pre = {kind, (uint32_t)pad, bytes, slot, {0}};
  memcpy(buf, &pre, sizeof pre);
  int rc = write_block(OMPTPY_BLOCK_LEDGER, buf, pad + bytes);
  free(buf);
  if (rc != 0) return NULL;
  /* The fd is write-only (O_APPEND): a mapping needs one opened for reading too. */
  int fd = open(S.path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return NULL;
  void *p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd,
                 (off_t)data);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

void *omptpy_sink_ledger_block(uint32_t kind, uint32_t slot, size_t bytes, void *at) {
  pthread_mutex_lock(&S.file_lock);
  void *p = file_ready() ? map_ledger_block(kind, slot, bytes, at) : NULL;
  pthread_mutex_unlock(&S.file_lock);
  return p;
}

void *omptpy_sink_ledger_block_locked(uint32_t kind, uint32_t slot, size_t bytes, void *at) {
  return map_ledger_block(kind, slot, bytes, at);
}

/* Under file_lock: the file back to its last whole block after a REGION
 * block could not be made.  Should that fail too, the loader reports the
 * zeros left after it as a corrupt tail. */
static void cut_back(int fd) {
  int rc = ftruncate(fd, (off_t)S.size);
  (void)rc;
}

/* Under file_lock: a REGION block of `nchunks` chunks (omptpy_file.h) appended
 * and mapped.  The span is allocated first (a full disk is known before the
 * header says the block exists, and a store into the mapping can then never
 * fault for want of a block); the header and prefix follow.  0 or -errno. */
static int region_block(uint32_t nchunks, omptpy_file_span *out) {
  if (!file_ready()) return S.error ? -S.error : -EIO;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t payload = S.size + sizeof(omptpy_block_header);
  uint64_t desc_at = (payload + sizeof(omptpy_region_prefix) + page - 1) / page * page;
  size_t desc_bytes = ((size_t)nchunks * OMPTPY_LEDGER_DESC_SIZE + page - 1) / page * page;
  size_t data_bytes = (size_t)nchunks * OMPTPY_CHUNK_BYTES;
  uint64_t end = desc_at + desc_bytes + data_bytes;
  /* The sink's fd is write-only and O_APPEND: allocating and mapping need another. */
  int fd = open(S.path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = posix_fallocate(fd, (off_t)S.size, (off_t)(end - S.size));
  if (rc != 0) {
    cut_back(fd);
    close(fd);
    return -rc;
  }
  omptpy_region_prefix pre = {.version = 1, .chunk_records = OMPTPY_CHUNK_RECORDS,
                              .nchunks = nchunks, .desc_size = OMPTPY_LEDGER_DESC_SIZE,
                              .desc_offset = desc_at - payload,
                              .data_offset = desc_at + desc_bytes - payload};
  omptpy_block_header h = {OMPTPY_FILE_MAGIC, OMPTPY_BLOCK_REGION, end - payload};
  char head[sizeof h + sizeof pre];
  memcpy(head, &h, sizeof h);
  memcpy(head + sizeof h, &pre, sizeof pre);
  void *p = MAP_FAILED;
  if (pwrite(fd, head, sizeof head, (off_t)S.size) != (ssize_t)sizeof head) {
    rc = errno ? errno : EIO;
  } else {
    p = mmap(NULL, desc_bytes + data_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)desc_at);
    rc = p == MAP_FAILED ? errno : 0;
  }
  if (rc != 0) {
    cut_back(fd);
    close(fd);
    return -rc;
  }
  close(fd);
  S.size = end;
  *out = (omptpy_file_span){p, desc_bytes + data_bytes, desc_bytes, desc_at + desc_bytes};
  return 0;
}

int omptpy_sink_region_block(uint32_t nchunks, omptpy_file_span *out) {
  pthread_mutex_lock(&S.file_lock);
  int rc = S.file ? region_block(nchunks, out) : -EINVAL;
  pthread_mutex_unlock(&S.file_lock);
  return rc;
}

void omptpy_sink_release(uint64_t at, uint64_t bytes) {
  pthread_mutex_lock(&S.file_lock);
  int fd = S.path[0] ? open(S.path, O_RDWR | O_CLOEXEC) : -1;
  if (fd >= 0) {
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)bytes);
    close(fd);
  }
  pthread_mutex_unlock(&S.file_lock);
}

/* The memory sink reserves a large range of address space once (nothing is
 * committed until touched) and keeps PREFAULT_AHEAD bytes past the write
 * position populated, so the drainer's copies never page-fault.  A range
 * that fills up is grown with mremap. */
void *omptpy_sink_reserve(size_t *bytes) {
  for (size_t want = RESERVE_BYTES; want >= MIN_RESERVE_BYTES; want /= 2) {
    void *p = mmap(NULL, want, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      madvise(p, want, MADV_HUGEPAGE);
      *bytes = want;
      return p;
    }
  }
  return NULL;
}

static bool mem_open(void) {
  if (S.mem.base) return true;
  S.mem.base = omptpy_sink_reserve(&S.mem.bytes);
  S.populated = 0;
  return S.mem.base != NULL;
}

static bool mem_room(size_t need) {
  if (!mem_open()) return false;
  if (need > S.mem.bytes) {
    size_t cap = S.mem.bytes;
    while (cap < need) cap *= 2;
    void *p = mremap(S.mem.base, S.mem.bytes, cap, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return false;
    S.mem.base = p;
    S.mem.bytes = cap;
  }
  if (S.populated < need + PREFAULT_AHEAD / 2 && S.populated < S.mem.bytes) {
    /* Ahead by as much as is already used (small traces stay small), at most PREFAULT_AHEAD. */
    size_t len = need < (1u << 20) ? (1u << 20) : need < PREFAULT_AHEAD ? need : PREFAULT_AHEAD;
    if (S.populated + len > S.mem.bytes) len = S.mem.bytes - S.populated;
    madvise((char *)S.mem.base + S.populated, len, MADV_POPULATE_WRITE);
    S.populated += len;
  }
  return true;
}

static size_t mem_append(const omptpy_record *recs, size_t n) {
  pthread_mutex_lock(&S.mem_lock);
  bool ok = mem_room((S.mem.nrecs + n) * sizeof *recs);
  if (!ok) {
    S.lost += n;
  } else {
    memcpy((omptpy_record *)S.mem.base + S.mem.nrecs, recs, n * sizeof *recs);
    S.mem.nrecs += n;
  }
  pthread_mutex_unlock(&S.mem_lock);
  return ok ? n : 0;
}

size_t omptpy_sink_write(const omptpy_record *recs, size_t n) {
  if (!S.file) return mem_append(recs, n);
  pthread_mutex_lock(&S.file_lock);
  bool ok = file_ready() && write_block(OMPTPY_BLOCK_RECORDS, recs, n * sizeof *recs) == 0;
  if (!ok) S.lost += n;
  pthread_mutex_unlock(&S.file_lock);
  return ok ? n : 0;
}

void omptpy_sink_prepare(void) {
  if (!S.reserve || S.file) return;
  if (omptpy_zero_copy()) {
    omptpy_zc_prepare(S.reserve);
    return;
  }
  pthread_mutex_lock(&S.mem_lock);
  if (mem_open() && S.populated < S.reserve) {
    size_t len = (S.reserve < S.mem.bytes ? S.reserve : S.mem.bytes) - S.populated;
    madvise((char *)S.mem.base + S.populated, len, MADV_POPULATE_WRITE);
    S.populated += len;
  }
  pthread_mutex_unlock(&S.mem_lock);
}

/* Only into a file that records opened: a process that wrote none (a forked
 * worker that ran no OpenMP code, a Python process of `ompt-py run` that loaded
 * the tool for its stacks) leaves no file. */
bool omptpy_sink_json(int block_type, const char *json, size_t len) {
  if (!S.file) return false;
  pthread_mutex_lock(&S.file_lock);
  bool ok = S.fd >= 0 && !S.failed && write_block((uint32_t)block_type, json, len) == 0;
  pthread_mutex_unlock(&S.file_lock);
  return ok;
}

omptpy_block omptpy_sink_take(void) {
  pthread_mutex_lock(&S.mem_lock);
  omptpy_block b = S.mem;
  memset(&S.mem, 0, sizeof S.mem);
  pthread_mutex_unlock(&S.mem_lock);
  return b;
}

void omptpy_block_free(omptpy_block b) {
  if (b.base) munmap(b.base, b.bytes);
}

void omptpy_sink_atfork_prepare(void) { pthread_mutex_lock(&S.file_lock); }

void omptpy_sink_atfork_parent(void) { pthread_mutex_unlock(&S.file_lock); }

void omptpy_sink_after_fork_child(void) {
  pthread_mutex_init(&S.mem_lock, NULL);
  pthread_mutex_init(&S.file_lock, NULL);
  if (S.fd >= 0) close(S.fd); /* the parent's file stays the parent's */
  S.fd = -1;
  S.failed = false;
  S.error = 0;
  S.lost = 0;
  omptpy_block_free(S.mem);
  memset(&S.mem, 0, sizeof S.mem);
}
