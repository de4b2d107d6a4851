/* The tool's environment variables, parsed once when the runtime starts the tool. */
#define _GNU_SOURCE
#include <ctype.h>
#include <fcntl.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "omptpy_internal.h"

#define DEFAULT_BUFFER_BYTES ((size_t)8 << 20)
/* Profile mode writes records only for handlers (ompt_py.on) and samples: four
 * chunks per thread, not the tracing default each thread would fault in. */
#define PROFILE_BUFFER_BYTES ((size_t)4 * OMPTPY_CHUNK_RECORDS * sizeof(omptpy_record))
/* Profile mode: rows (640 bytes each, in a table of twice as many, mapped
 * without reserving: only the pages of rows made are touched) per thread slot. */
#define DEFAULT_PROFILE_ENTRIES 4096
#define MIN_PROFILE_ENTRIES 16
#define MAX_PROFILE_ENTRIES (1L << 20)
#define MIN_BUFFER_BYTES ((size_t)2 * OMPTPY_CHUNK_RECORDS * sizeof(omptpy_record))

static int bad(omptpy_config *cfg, const char *name, const char *value, const char *allowed) {
  snprintf(cfg->error, sizeof cfg->error, "%s='%.200s' is not valid; use %s", name, value, allowed);
  return -EINVAL;
}

/* on/off style switches: returns 1, 0, or -1 when unrecognised. */
static int parse_switch(const char *v) {
  static const char *on[] = {"1", "on", "true", "yes"};
  static const char *off[] = {"0", "off", "false", "no"};
  for (size_t i = 0; i < sizeof on / sizeof *on; i++) {
    if (strcasecmp(v, on[i]) == 0) return 1;
    if (strcasecmp(v, off[i]) == 0) return 0;
  }
  return -1;
}

/* A whole number from lo to hi: 0, or -1 when it is not one. */
static int parse_range(const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi) return -1;
  *out = n;
  return 0;
}

/* "8M", "512k", "1G", "65536": bytes, binary suffixes. */
static int parse_size(const char *v, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || end == v || v[0] == '-') return -1;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
  }
  if (toupper((unsigned char)*end) == 'I') end++;
  if (toupper((unsigned char)*end) == 'B') end++;
  if (*end != '\0' || n > (1ULL << 40) >> shift) return -1;
  *out = (size_t)(n << shift);
  return 0;
}

/* The rank of the process in a parallel job, from the variables the usual
 * launchers set (Open MPI, MPICH and Intel MPI, PMIx, Slurm); -1 if none. */
int omptpy_job_rank(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    long r;
    if (v && *v && parse_range(v, 0, INT32_MAX, &r) == 0) return (int)r;
  }
  return -1;
}

int omptpy_job_local_rank(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                               "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    long r;
    if (v && *v && parse_range(v, 0, INT32_MAX, &r) == 0) return (int)r;
  }
  return -1;
}

void omptpy_job_id(char *out, size_t size) {
  static const char *vars[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                               "OMPI_MCA_orte_ess_jobid"};
  out[0] = '\0';
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      snprintf(out, size, "%s", v);
      return;
    }
  }
  const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
  if (job && *job) snprintf(out, size, "slurm:%s.%s", job, step && *step ? step : "0");
}

OMPTPY_API void omptpy_job(int *rank, int *local_rank, char *id, size_t size) {
  *rank = omptpy_job_rank();
  *local_rank = omptpy_job_local_rank();
  omptpy_job_id(id, size);
}

/* OMPTPY_TEST_CLOCK_SKEW (tests only): "OFFSET_NS:DRIFT_PPM,..." entry i for
 * rank i (a process without a rank takes entry 0; a rank beyond the list, none):
 * every time the tool takes is skewed by that offset and drift (clock.c).  0
 * or -1 when malformed. */
static int clock_skew(omptpy_config *cfg, const char *v) {
  int rank = omptpy_job_rank();
  if (rank < 0) rank = 0;
  for (int i = 0; *v; i++) {
    char *end;
    errno = 0;
    double offset = strtod(v, &end);
    if (errno || end == v || *end != ':') return -1;
    v = end + 1;
    double ppm = strtod(v, &end);
    if (errno || end == v || (*end && *end != ',') || ppm <= -1e6 || ppm >= 1e6) return -1;
    if (i == rank) {
      cfg->skew_offset_ns = offset;
      cfg->skew_ppm = ppm;
    }
    v = *end ? end + 1 : end;
  }
  return 0;
}

size_t omptpy_mem_available(void) {
  char buf[4096];
  int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strstr(buf, "MemAvailable:");
  unsigned long long kib;
  return p && sscanf(p, "MemAvailable: %llu kB", &kib) == 1 ? (size_t)kib << 10 : 0;
}

bool omptpy_mem_fits(size_t bytes) {
  size_t avail = omptpy_mem_available();
  return avail == 0 || bytes <= avail / 4 * 3;
}

/* A size the machine can give now (omptpy_mem_fits), else the error. */
static int check_memory(omptpy_config *cfg, const char *name, const char *value, size_t bytes,
                        const char *what) {
  if (omptpy_mem_fits(bytes)) return 0;
  snprintf(cfg->error, sizeof cfg->error,
           "%s='%.200s' is more than this machine can give %s (%zu MiB available now, and "
           "the program needs memory too); use at most %zu MiB",
           name, value, what, omptpy_mem_available() >> 20, omptpy_mem_available() / 4 * 3 >> 20);
  return -EINVAL;
}

/* ---- the in-place file route (zerocopy.c) --------------------------------------------- */

#define FILE_RESERVE_CAP ((size_t)256 << 20)
#define FILE_RESERVE_SHARE 8 /* of the memory available at start */
#define FILE_REGION_MIN ((size_t)64 << 20)

/* With a file sink, OMPTPY_RESERVE is what is made resident of the file's
 * first region before the program's work, by default an eighth of the memory
 * available now, at most FILE_RESERVE_CAP; each region of the file is that
 * large, and at least FILE_REGION_MIN. */
static void file_region_config(omptpy_config *cfg, bool reserve_set) {
  if (cfg->output[0] == '\0') return;
  if (!reserve_set) {
    size_t share = omptpy_mem_available() / FILE_RESERVE_SHARE;
    cfg->reserve_bytes = share && share < FILE_RESERVE_CAP ? share : FILE_RESERVE_CAP;
  }
  size_t bytes = cfg->reserve_bytes > FILE_REGION_MIN ? cfg->reserve_bytes : FILE_REGION_MIN;
  cfg->file_region_bytes = (bytes + OMPTPY_CHUNK_BYTES - 1) / OMPTPY_CHUNK_BYTES * OMPTPY_CHUNK_BYTES;
}

/* ---- scripting callbacks (ompt_py.on) ---------------------------------------------- */

#define DEFAULT_HANDLER_QUEUE_BYTES ((size_t)64 << 20)
#define MIN_HANDLER_QUEUE_BYTES ((size_t)64 << 10)

static int handler_config(omptpy_config *cfg) {
  cfg->handler_queue_bytes = DEFAULT_HANDLER_QUEUE_BYTES;
  const char *v = getenv("OMPTPY_HANDLER_QUEUE");
  if (v && *v) {
    if (parse_size(v, &cfg->handler_queue_bytes) != 0 ||
        cfg->handler_queue_bytes < MIN_HANDLER_QUEUE_BYTES)
      return bad(cfg, "OMPTPY_HANDLER_QUEUE", v, "a size in bytes of at least 64K, such as 64M");
  }
  return 0;
}

/* ---- device tracing (device.c) ------------------------------------------------------ */

#define DEFAULT_DEVICE_BUFFER_BYTES ((size_t)1 << 20)
#define DEFAULT_DEVICE_MEMORY_BYTES ((size_t)64 << 20)
#define MIN_DEVICE_BUFFER_BYTES ((size_t)4 << 10)
#define MAX_DEVICE_BUFFER_BYTES ((size_t)1 << 30)

static int device_config(omptpy_config *cfg) {
  cfg->device_trace = true;
  cfg->device_buffer_bytes = DEFAULT_DEVICE_BUFFER_BYTES;
  cfg->device_memory_bytes = DEFAULT_DEVICE_MEMORY_BYTES;
  const char *v = getenv("OMPTPY_DEVICE_TRACE");
  if (v && *v) {
    int s = parse_switch(v);
    if (s < 0) return bad(cfg, "OMPTPY_DEVICE_TRACE", v, "on or off");
    cfg->device_trace = s;
  }
  if ((v = getenv("OMPTPY_DEVICE_BUFFER")) && *v &&
      (parse_size(v, &cfg->device_buffer_bytes) != 0 ||
       cfg->device_buffer_bytes < MIN_DEVICE_BUFFER_BYTES ||
       cfg->device_buffer_bytes > MAX_DEVICE_BUFFER_BYTES))
    return bad(cfg, "OMPTPY_DEVICE_BUFFER", v, "a size in bytes from 4K to 1G, such as 1M");
  const char *buffer = v;
  if ((v = getenv("OMPTPY_DEVICE_MEMORY")) && *v) {
    if (parse_size(v, &cfg->device_memory_bytes) != 0)
      return bad(cfg, "OMPTPY_DEVICE_MEMORY", v,
                 "a size in bytes such as 64M or 1G, at least OMPTPY_DEVICE_BUFFER (1M by default)");
    if (cfg->device_memory_bytes < cfg->device_buffer_bytes) {
      snprintf(cfg->error, sizeof cfg->error,
               "OMPTPY_DEVICE_MEMORY='%.200s' is less than one device buffer "
               "(OMPTPY_DEVICE_BUFFER='%.100s', %zu bytes); use at least that much, such as 64M",
               v, buffer && *buffer ? buffer : "1M", cfg->device_buffer_bytes);
      return -EINVAL;
    }
    if (check_memory(cfg, "OMPTPY_DEVICE_MEMORY", v, cfg->device_memory_bytes,
                     "for device trace buffers"))
      return -EINVAL;
  }
  return 0;
}

int omptpy_config_read(omptpy_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->enabled = true;
  cfg->record = -1;
  cfg->buffer_bytes = DEFAULT_BUFFER_BYTES;
  cfg->overflow = OMPTPY_OVERFLOW_FLUSH;
  cfg->clock = -1;
  cfg->drain_ms = 10;
  cfg->populate_ahead = true;
  cfg->sample_signal = SIGRTMIN + 4;
  cfg->zero_copy = true;

  const char *v;
  if ((v = getenv("OMPTPY_TOOL")) && *v) {
    int s = parse_switch(v);
    if (s < 0) return bad(cfg, "OMPTPY_TOOL", v, "on or off");
    cfg->enabled = s;
  }
  if ((v = getenv("OMPTPY_RECORD")) && *v) {
    int s = parse_switch(v);
    if (s < 0) return bad(cfg, "OMPTPY_RECORD", v, "on or off");
    cfg->record = s;
  }
  if ((v = getenv("OMPTPY_BUFFER_SIZE")) && *v) {
    if (parse_size(v, &cfg->buffer_bytes) != 0)
      return bad(cfg, "OMPTPY_BUFFER_SIZE", v, "a size in bytes such as 8M, 512K or 1G");
    if (cfg->buffer_bytes < MIN_BUFFER_BYTES) {
      snprintf(cfg->error, sizeof cfg->error,
               "OMPTPY_BUFFER_SIZE='%.200s' is too small; use at least %zuK (two chunks)", v,
               (MIN_BUFFER_BYTES + 1023) >> 10);
      return -EINVAL;
    }
    /* Each thread maps this much when it starts; a thread that finds too little
     * memory left later gets no buffer (its records are counted, buffer.c). */
    if (check_memory(cfg, "OMPTPY_BUFFER_SIZE", v, cfg->buffer_bytes, "for one thread's buffer"))
      return -EINVAL;
  }
  if ((v = getenv("OMPTPY_RESERVE")) && *v) {
    if (parse_size(v, &cfg->reserve_bytes) != 0)
      return bad(cfg, "OMPTPY_RESERVE", v, "a size in bytes such as 512M or 2G, or 0");
    if (check_memory(cfg, "OMPTPY_RESERVE", v, cfg->reserve_bytes, "to provision"))
      return -EINVAL;
  }
  if ((v = getenv("OMPTPY_ZERO_COPY")) && *v) {
    int s = parse_switch(v);
    if (s < 0) return bad(cfg, "OMPTPY_ZERO_COPY", v, "on or off");
    cfg->zero_copy = s;
  }
  if ((v = getenv("OMPTPY_OVERFLOW")) && *v) {
    if (strcmp(v, "flush") == 0) cfg->overflow = OMPTPY_OVERFLOW_FLUSH;
    else if (strcmp(v, "drop") == 0) cfg->overflow = OMPTPY_OVERFLOW_DROP;
    else if (strcmp(v, "grow") == 0) cfg->overflow = OMPTPY_OVERFLOW_GROW;
    else return bad(cfg, "OMPTPY_OVERFLOW", v, "one of flush, drop, grow");
  }
  if ((v = getenv("OMPTPY_CLOCK")) && *v) {
    if (strcmp(v, "auto") == 0) cfg->clock = -1;
    else if (strcmp(v, "tsc") == 0) cfg->clock = OMPTPY_CLOCK_TSC;
    else if (strcmp(v, "monotonic") == 0) cfg->clock = OMPTPY_CLOCK_MONOTONIC;
    else return bad(cfg, "OMPTPY_CLOCK", v, "one of auto, tsc, monotonic");
  }
  if ((v = getenv("OMPTPY_TEST_CLOCK_SKEW")) && *v && clock_skew(cfg, v) != 0)
    return bad(cfg, "OMPTPY_TEST_CLOCK_SKEW", v,
               "OFFSET_NS:DRIFT_PPM entries, one per rank from rank 0, separated by commas "
               "(a test setting: see docs/mpi.md)");
  if ((v = getenv("OMPTPY_DRAIN_MS")) && *v) {
    long ms;
    if (parse_range(v, 1, 1000, &ms) != 0)
      return bad(cfg, "OMPTPY_DRAIN_MS", v, "a whole number of milliseconds from 1 to 1000");
    cfg->drain_ms = (unsigned)ms;
  }
  if ((v = getenv("OMPTPY_TEST_POPULATE_AHEAD")) && *v) {
    int s = parse_switch(v);
    if (s < 0)
      return bad(cfg, "OMPTPY_TEST_POPULATE_AHEAD", v,
                 "on or off (a test setting: off leaves every next region to a writer's "
                 "stall, docs/stalls.md)");
    cfg->populate_ahead = s;
  }
  if ((v = getenv("OMPTPY_PLACE_INFO")) && *v) {
    int s = parse_switch(v);
    if (s < 0) return bad(cfg, "OMPTPY_PLACE_INFO", v, "on or off");
    cfg->place_info = s;
  }
  if ((v = getenv("OMPTPY_SAMPLE_HZ")) && *v) {
    long hz;
    if (parse_range(v, 0, 100000, &hz) != 0)
      return bad(cfg, "OMPTPY_SAMPLE_HZ", v, "samples per second from 0 (off) to 100000");
    cfg->sample_hz = (unsigned)hz;
  }
  if ((v = getenv("OMPTPY_SAMPLE_SIGNAL")) && *v) {
    /* Only a real-time signal: the others mean something to the program or the
     * system (SIGSEGV, SIGTERM, SIGINT...), and a handler for them would
     * swallow the real ones.  SIGRTMIN is glibc's, above the threads library's. */
    long sig;
    if (parse_range(v, SIGRTMIN, SIGRTMAX, &sig) != 0) {
      char allowed[96];
      snprintf(allowed, sizeof allowed, "a real-time signal number from %d to %d (default %d)",
               SIGRTMIN, SIGRTMAX, SIGRTMIN + 4);
      return bad(cfg, "OMPTPY_SAMPLE_SIGNAL", v, allowed);
    }
    cfg->sample_signal = (int)sig;
  }
  cfg->profile_entries = DEFAULT_PROFILE_ENTRIES;
  if ((v = getenv("OMPTPY_PROFILE")) && *v) {
    int s = parse_switch(v);
    if (s < 0) return bad(cfg, "OMPTPY_PROFILE", v, "on or off");
    cfg->profile = s;
  }
  if ((v = getenv("OMPTPY_PROFILE_ENTRIES")) && *v) {
    long n;
    if (parse_range(v, MIN_PROFILE_ENTRIES, MAX_PROFILE_ENTRIES, &n) != 0)
      return bad(cfg, "OMPTPY_PROFILE_ENTRIES", v,
                 "a whole number of aggregates per thread from 16 to 1048576 (default 4096)");
    cfg->profile_entries = (uint32_t)n;
  }
  if (cfg->profile && !((v = getenv("OMPTPY_BUFFER_SIZE")) && *v))
    cfg->buffer_bytes = PROFILE_BUFFER_BYTES;
  if ((v = getenv("OMPTPY_OUTPUT")) && *v) {
    if (strlen(v) >= sizeof cfg->output - 64)
      return bad(cfg, "OMPTPY_OUTPUT", v, "a shorter directory path");
    strcpy(cfg->output, v);
  }
  file_region_config(cfg, getenv("OMPTPY_RESERVE") && *getenv("OMPTPY_RESERVE"));
  int rc = handler_config(cfg);
  return rc ? rc : device_config(cfg);
}
