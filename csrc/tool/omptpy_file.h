/*
 * The raw trace file the file sink writes (OMPTPY_OUTPUT), one per process
 * image: a sequence of blocks, each a header and `length` bytes of payload:
 * META (JSON, first), LEDGER (see below: the first one right after META),
 * RECORDS (the omptpy_record array of one thread, in order), STATS (JSON
 * counters with a clock anchor, written as the run goes and once more at the
 * end) and STACKS (JSON: the interpreter call stacks added since the previous
 * STACKS block, see omptpy_stacks in omptpy_api.h) and PROFILE (profile
 * mode, OMPTPY_PROFILE: a thread slot's aggregates, see below).  Readers take these
 * values from here (ompt_py through _core's FILE_MAGIC, BLOCK_*, LEDGER_* and
 * BLOCK_HEADER_SIZE).
 *
 * LEDGER blocks hold what the loader needs to count the records a process
 * lost however it ended (ledger.c): their data is mapped MAP_SHARED from the
 * file, so what the tool stores there reaches the file even when the process
 * is killed, and it was written (allocated) before, so a full disk cannot
 * fault it.  A payload is an omptpy_ledger_prefix, zeros up to data_offset
 * (the data starts on a page of the file), then data_bytes of data:
 *  - kind PROCESS (one, right after META): an omptpy_ledger_head, then
 *    `thread_cap` omptpy_ledger_thread entries, entry i for thread index
 *    thread_base + i;
 *  - kind SLOT (one per thread slot: buffer.c reuses slots for later
 *    threads): that slot's `max_chunks` chunk descriptors (omptpy_chunk, one
 *    per OMPTPY_LEDGER_DESC_SIZE bytes, the uint32 count of records written
 *    into the chunk first), stored per record on the hot path anyway.
 *  - kind WINDOWS (one, in-place files only: see REGION below): an
 *    omptpy_ledger_windows, then `cap` omptpy_window entries of which the
 *    first `count` are the sink's windows so far, in clock ticks (until
 *    UINT64_MAX: still open).  A file's records stamped in no window were
 *    written for handlers only (discarded, not lost).  When the table is
 *    full the last window is extended instead: more records kept, never fewer.
 * A thread has written handed + (cur != NONE ? n of descriptor cur of its
 * slot : 0) records into its buffer; the loader subtracts those in the file
 * and those discarded (outside the sink's window) to find the lost ones.
 * In an in-place file (head.in_place = 1) threads write their records into
 * the file itself (REGION blocks), so every record written is in the file:
 * handed and cur are not kept, and only dropped (no room) and nobuf count.
 *
 * REGION blocks (the in-place file route, zerocopy.c): a span of the file,
 * allocated (fallocate) when the block is made and mapped MAP_SHARED, that
 * threads lease 64 KiB chunks of and write their records into in place (the
 * page cache keeps what a killed process wrote).  Its payload: an
 * omptpy_region_prefix, zeros up to desc_offset (a page of the file), then
 * `nchunks` chunk descriptors of OMPTPY_LEDGER_DESC_SIZE bytes (the uint32
 * count of records written into the chunk at offset 0, the uint32 thread
 * index + 1 of the thread it was leased to at OMPTPY_DESC_THREAD_OFFSET, 0
 * for a chunk never leased), then at data_offset the chunks' records
 * (`chunk_records` records each, chunk i at data_offset + i * chunk_records *
 * record size; its first n are written).  A thread's chunks are in lease
 * order within a block and blocks in file order, so its records are in time
 * order when read so.  At a clean end, unleased chunks' data is released
 * (a hole: reads as zeros).
 */
#ifndef OMPTPY_FILE_H
#define OMPTPY_FILE_H

#include <stdint.h>

#define OMPTPY_FILE_MAGIC 0x5450504fu /* "OPPT" in the file's (little-endian) bytes */

enum { OMPTPY_BLOCK_META = 1, OMPTPY_BLOCK_RECORDS = 2, OMPTPY_BLOCK_STATS = 3,
       OMPTPY_BLOCK_STACKS = 4, OMPTPY_BLOCK_LEDGER = 5, OMPTPY_BLOCK_PROFILE = 6,
       OMPTPY_BLOCK_REGION = 7 };

typedef struct omptpy_block_header {
  uint32_t magic;
  uint32_t type;   /* OMPTPY_BLOCK_* */
  uint64_t length; /* of the payload, in bytes */
} omptpy_block_header;

_Static_assert(sizeof(omptpy_block_header) == 16, "a block header is 16 bytes, no padding");

enum { OMPTPY_LEDGER_PROCESS = 1, OMPTPY_LEDGER_SLOT = 2, OMPTPY_LEDGER_WINDOWS = 3 };

/* How the process image ended, as whoever saw it recorded it (0: nobody did:
 * killed by a signal or crashed). */
enum {
  OMPTPY_END_NONE = 0,
  OMPTPY_END_FINALIZE = 1, /* the runtime's finalize */
  OMPTPY_END_EXIT = 2,     /* exit() without finalize (the tool's destructor) */
  OMPTPY_END__EXIT = 3,    /* _exit / _Exit (the preload hook) */
  OMPTPY_END_EXEC = 4,     /* an exec* call (the preload hook) */
  OMPTPY_END_ABORT = 5,    /* abort() (the preload hook) */
  OMPTPY_END_FINISH = 6    /* omptpy_finish: ompt-py run's Python hook (os._exit, SIGTERM) */
};

#define OMPTPY_LEDGER_NONE 0xffffffffu /* omptpy_ledger_thread.cur: no chunk */
#define OMPTPY_LEDGER_DESC_SIZE 64u
#define OMPTPY_DESC_THREAD_OFFSET 36u /* a descriptor's thread index + 1 (REGION blocks) */

typedef struct omptpy_ledger_prefix {
  uint32_t kind;        /* OMPTPY_LEDGER_* */
  uint32_t data_offset; /* from the start of the payload */
  uint64_t data_bytes;
  uint32_t slot;        /* SLOT: the slot's number */
  uint32_t reserved[3];
} omptpy_ledger_prefix;

typedef struct omptpy_ledger_head {
  uint32_t version;        /* 1 */
  uint32_t thread_cap;     /* entries that follow */
  uint32_t thread_base;    /* thread index of entry 0 (after an exec: the previous image's next) */
  uint32_t chunk_records;
  uint32_t max_chunks;     /* descriptors per SLOT block */
  uint32_t ending;         /* OMPTPY_END_* */
  int32_t sink_errno;      /* why the file sink failed, 0 if it did not */
  uint32_t unaccounted;    /* threads beyond thread_cap: their records are not counted here */
  uint32_t in_place;       /* 1: records are written in the file itself (REGION blocks) */
  uint32_t reserved32;
  uint64_t reserved[3];
} omptpy_ledger_head;

typedef struct omptpy_ledger_windows {
  uint32_t count; /* windows used */
  uint32_t cap;   /* entries that follow */
  uint64_t reserved;
} omptpy_ledger_windows;

typedef struct omptpy_window {
  uint64_t from, until; /* clock ticks: records stamped in [from, until) are the sink's */
} omptpy_window;

typedef struct omptpy_region_prefix {
  uint32_t version;       /* 1 */
  uint32_t chunk_records; /* records per chunk */
  uint32_t nchunks;
  uint32_t desc_size;     /* OMPTPY_LEDGER_DESC_SIZE */
  uint64_t desc_offset;   /* from the start of the payload: a page of the file */
  uint64_t data_offset;   /* from the start of the payload: a page of the file */
  uint64_t reserved[4];
} omptpy_region_prefix;

/* Flags of a thread entry. */
enum {
  OMPTPY_LEDGER_FINAL = 1,    /* the thread ended and was drained whole: handed is all */
  OMPTPY_LEDGER_UNKNOWN = 2,  /* its chunk is not in a SLOT block: up to a chunk is not counted */
  OMPTPY_LEDGER_NOBUF = 4     /* no memory for its buffer: its records are in `nobuf` */
};

typedef struct omptpy_ledger_thread {
  uint32_t used;      /* thread index + 1, 0 for an unused entry */
  uint32_t slot;      /* slot number + 1, 0: none */
  int32_t tid;
  uint32_t flags;     /* OMPTPY_LEDGER_FINAL | ... */
  uint32_t cur;       /* descriptor (of the slot) being filled, OMPTPY_LEDGER_NONE */
  int32_t type;       /* ompt_thread_t */
  uint64_t handed;    /* records in chunks the thread filled and handed over */
  uint64_t dropped;   /* records lost to overflow (buffers full) */
  uint64_t discarded; /* records drained outside the sink's window (written for handlers) */
  uint64_t sink_lost; /* records the sink could not write (disk full, write error) */
  uint64_t nobuf;     /* records of a thread without a buffer (no memory for it) */
} omptpy_ledger_thread;

_Static_assert(sizeof(omptpy_ledger_prefix) == 32, "the ledger prefix is 32 bytes");
_Static_assert(sizeof(omptpy_ledger_head) == 64, "the ledger head is 64 bytes");
_Static_assert(sizeof(omptpy_ledger_thread) == 64, "a ledger thread entry is 64 bytes");
_Static_assert(sizeof(omptpy_ledger_windows) == 16, "the windows head is 16 bytes");
_Static_assert(sizeof(omptpy_window) == 16, "a window is 16 bytes");
_Static_assert(sizeof(omptpy_region_prefix) == 64, "the region prefix is 64 bytes");

/*
 * PROFILE blocks (profile mode: OMPTPY_PROFILE=on; profile.c), written at the
 * end (finalize, exit, omptpy_finish, the preload hook's endings) instead of
 * RECORDS, with every STATS block written there (an ending may come more than
 * once: each block holds everything so far, a reader keeps each slot's last):
 * one per thread slot (buffer.c reuses a slot for later threads; each row
 * names its thread), an omptpy_profile_head and `nrows` rows of
 * `row_size` bytes.  Every row is one aggregate, keyed by (table, event,
 * kind, thread, codeptr, wait_id); times are clock ticks (converted like a
 * record's, with the file's anchors), histograms count durations by the bit
 * length of their nanoseconds (bucket b: [2^(b-1), 2^b) ns, bucket 0: 0 ns;
 * the tick length is the start estimate, tick_ns_estimate of META).
 *   CONSTRUCT  event, kind: what the construct is, in OMPT's own numbers
 *              (event = the callback; kind = its kind argument): parallel_begin
 *              (kind 1: a teams league, else 0), implicit_task (kind 1: an
 *              initial task), work (work type), sync_region (sync kind),
 *              masked (0), mutex_acquire (waits, mutex kind), mutex_acquired
 *              (holds, mutex kind).  codeptr: the construct's; 0 where the
 *              runtime gives none is the region's (implicit tasks, a worker's
 *              implicit barrier).  count, total, min, max, hist: of durations
 *   REGION     a parallel region's codeptr on a thread: count = implicit
 *              tasks, total = their time; a, b, c = time waiting in barriers,
 *              in taskwait/taskgroup/reduction and for locks/critical/ordered
 *              (a wait counts while its task is the one running: a thread
 *              running tasks inside a barrier is busy)
 *   LOCK       event mutex_acquire, kind = mutex kind, wait_id, codeptr of the
 *              acquisition: count = acquisitions, total/min/max = waits,
 *              a = hold total, b = hold max, hist: waits
 *   TASK       codeptr = the creation site (task_create), thread: count =
 *              tasks created on the thread, a = tasks that finished running
 *              on it, total/min/max/hist = their run time (the sum of the
 *              intervals each ran, between task_schedule switches)
 * Implicit tasks of workers end late in libomp (when the worker leaves the
 * team's pool): their ends, and those of waits and constructs then still
 * open, are the region's end when the encountering thread has published it.
 */
#define OMPTPY_PROFILE_VERSION 1
#define OMPTPY_PROFILE_BUCKETS 64

enum { OMPTPY_PROFILE_CONSTRUCT = 1, OMPTPY_PROFILE_REGION = 2, OMPTPY_PROFILE_LOCK = 3,
       OMPTPY_PROFILE_TASK = 4 };

typedef struct omptpy_profile_head {
  uint32_t version;   /* OMPTPY_PROFILE_VERSION */
  uint32_t row_size;  /* sizeof(omptpy_profile_row) */
  uint32_t slot;      /* the thread slot */
  uint32_t nrows;
  uint64_t overflow;  /* aggregates not made: the table was full, or nesting too deep */
  uint64_t reserved[5];
} omptpy_profile_head;

typedef struct omptpy_profile_row {
  uint64_t codeptr;
  uint64_t wait_id;
  uint32_t thread;    /* the tool's thread index */
  uint16_t event;
  uint8_t kind;
  uint8_t table;      /* OMPTPY_PROFILE_*; 0: an unused entry (never written) */
  uint64_t count, total, min, max; /* ticks */
  uint64_t a, b, c;
  uint64_t reserved[6];
  uint64_t hist[OMPTPY_PROFILE_BUCKETS];
} omptpy_profile_row;

_Static_assert(sizeof(omptpy_profile_head) == 64, "the profile head is 64 bytes");
_Static_assert(sizeof(omptpy_profile_row) == 640, "a profile row is 640 bytes");

#endif /* OMPTPY_FILE_H */
