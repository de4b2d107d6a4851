/* A gcc-built OpenMP workload for bench/fallback.py: what running code built
 * with `gcc -fopenmp` (linked to libgomp.so.1) on LLVM's libomp costs.
 *
 *   fallback_work      warm-up, then four timed parts
 *   fallback_work 0    warm-up only (a check of runtime and tool)
 *
 * Parts, each timed with CLOCK_MONOTONIC:
 *   regions  REGIONS parallel regions, each with a small schedule(static)
 *            loop (gcc inlines the partition: no loop call into the runtime)
 *   dynamic  one schedule(dynamic,16) loop over DYN_ITERS iterations with a
 *            little floating-point arithmetic per iteration
 *   tasks    TASKS tasks created by one thread in a single construct
 *   reduce   RED_LOOPS parallel loops, each with three reductions (+, ^, max)
 *            over RED_LEN elements: the merge of the partial results
 *
 * Output on stdout, one item a line:
 *   runtime <file that defines GOMP_parallel, as the dynamic linker resolves it>
 *   mapped <basenames of the OpenMP runtimes mapped, from /proc/self/maps>
 *   span <part> <count> <start ns> <end ns>  (count of the part's units; times
 *                                            CLOCK_MONOTONIC, for trace attribution)
 *   <part> <seconds>
 *   check <part> <hex>                 (checksum of the part's results)
 *   checksum <hex>                     (all parts)
 * The checksums depend only on the computations, not on the thread schedule.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REGIONS 100000L
#define REGION_LOOP 256L
#define DYN_ITERS 1000000L
#define TASKS 100000L
#define RED_LOOPS 10000L
#define RED_LEN 1000L

static double *dyn_out;
static uint64_t *task_out;
static uint64_t *red_in;

static uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  return x;
}

static uint64_t double_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------- parts --- */

__attribute__((noinline)) static uint64_t part_regions(long n) {
  uint64_t total = 0;
  for (long r = 0; r < n; r++) {
#pragma omp parallel
    {
      uint64_t local = 0;
#pragma omp for schedule(static) nowait
      for (long i = 0; i < REGION_LOOP; i++) {
        uint64_t x = (uint64_t)(i + r);
        __asm__ volatile("" : "+r"(x)); /* opaque: the loop cannot be folded */
        local += x;
      }
#pragma omp atomic
      total += local;
    }
  }
  return total;
}

__attribute__((noinline)) static uint64_t part_dynamic(long n) {
#pragma omp parallel for schedule(dynamic, 16)
  for (long i = 0; i < n; i++) {
    double x = (double)i * 1e-6;
    dyn_out[i] = (x * x + 3.0 * x + 1.0) / (x + 2.0);
  }
  uint64_t sum = 0;
  for (long i = 0; i < n; i++)
    sum += double_bits(dyn_out[i]) * (uint64_t)(i + 1);
  return sum;
}

__attribute__((noinline)) static uint64_t part_tasks(long n) {
#pragma omp parallel
#pragma omp single
  for (long i = 0; i < n; i++) {
#pragma omp task firstprivate(i)
    {
      uint64_t x = mix((uint64_t)i);
      __asm__ volatile("" : "+r"(x));
      task_out[i] = x;
    }
  }
  uint64_t sum = 0;
  for (long i = 0; i < n; i++)
    sum += task_out[i] ^ (uint64_t)i;
  return sum;
}

__attribute__((noinline)) static uint64_t part_reduce(long loops) {
  uint64_t acc = 0;
  for (long r = 0; r < loops; r++) {
    uint64_t sum = 0, xr = 0, mx = 0;
    const uint64_t *in = red_in + (r % 16) * RED_LEN;
#pragma omp parallel for schedule(static) reduction(+ : sum) reduction(^ : xr) \
    reduction(max : mx)
    for (long i = 0; i < RED_LEN; i++) {
      uint64_t v = in[i] + (uint64_t)r;
      sum += v;
      xr ^= v * 0x9e3779b97f4a7c15ULL;
      mx = v > mx ? v : mx;
    }
    acc = mix(acc ^ sum) + (xr ^ mx);
  }
  return acc;
}

/* ---------------------------------------------------------- runtime --- */

static void print_runtime(void) {
  /* The definition of GOMP_parallel that the program's calls bind to: the
   * global lookup scope, where an LD_PRELOADed libomp comes before libgomp. */
  void *sym = dlsym(RTLD_DEFAULT, "GOMP_parallel");
  Dl_info info;
  if (sym && dladdr(sym, &info) && info.dli_fname)
    printf("runtime %s\n", info.dli_fname);
  else
    printf("runtime unknown\n");

  printf("mapped");
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096], seen[8][256];
  int nseen = 0;
  while (maps && fgets(line, sizeof line, maps)) {
    char *path = strchr(line, '/');
    if (!path)
      continue;
    path[strcspn(path, "\n")] = '\0';
    const char *base = strrchr(path, '/') + 1;
    if (strncmp(base, "libgomp", 7) != 0 && strncmp(base, "libomp", 6) != 0)
      continue;
    int dup = 0;
    for (int k = 0; k < nseen; k++)
      dup |= strcmp(seen[k], base) == 0;
    if (dup || nseen == 8)
      continue;
    snprintf(seen[nseen++], sizeof seen[0], "%s", base);
    printf(" %s", base);
  }
  if (maps)
    fclose(maps);
  printf("\n");
}

/* ------------------------------------------------------------- main --- */

typedef uint64_t (*part_fn)(long);

static uint64_t timed(const char *name, part_fn fn, long n) {
  uint64_t t0 = now_ns();
  uint64_t check = fn(n);
  uint64_t t1 = now_ns();
  printf("span %s %ld %" PRIu64 " %" PRIu64 "\n", name, n, t0, t1);
  printf("%s %.6f\n", name, (double)(t1 - t0) * 1e-9);
  printf("check %s %016" PRIx64 "\n", name, check);
  return check;
}

int main(int argc, char **argv) {
  int full = !(argc > 1 && strcmp(argv[1], "0") == 0);
  dyn_out = malloc(DYN_ITERS * sizeof *dyn_out);
  task_out = malloc(TASKS * sizeof *task_out);
  red_in = malloc(16 * RED_LEN * sizeof *red_in);
  if (!dyn_out || !task_out || !red_in) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  memset(dyn_out, 0, DYN_ITERS * sizeof *dyn_out);
  memset(task_out, 0, TASKS * sizeof *task_out);
  for (long i = 0; i < 16 * RED_LEN; i++)
    red_in[i] = mix((uint64_t)i + 1) >> 8;

  /* Warm-up: runtime and tool start-up, thread creation, first touches. */
  uint64_t warm = part_regions(1000) + part_dynamic(DYN_ITERS) + part_tasks(1000) +
                  part_reduce(100);
  __asm__ volatile("" : : "r"(warm));
  print_runtime();
  printf("threads %d\n", omp_get_max_threads());
  if (!full)
    return 0;

  uint64_t checksum = 0;
  checksum = mix(checksum ^ timed("regions", part_regions, REGIONS));
  checksum = mix(checksum ^ timed("dynamic", part_dynamic, DYN_ITERS));
  checksum = mix(checksum ^ timed("tasks", part_tasks, TASKS));
  checksum = mix(checksum ^ timed("reduce", part_reduce, RED_LOOPS));
  printf("checksum %016" PRIx64 "\n", checksum);
  free(dyn_out);
  free(task_out);
  free(red_in);
  return 0;
}
