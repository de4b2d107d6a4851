/*
 * Task- and loop-parallel kernels of the kinds the literature measures OpenMP
 * tool overhead with (the Barcelona OpenMP Tasks Suite, BOTS): fib, nqueens,
 * sparselu, sort, health, and a dynamic-schedule loop.  Written for this
 * project; each times its own parallel part and returns a checksum that does
 * not depend on the schedule, so that a tool that changes results shows.
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"

/* ---- fib: recursive, a task per call, no cut-off ------------------------ */

static long fib(int n) {
  if (n < 2)
    return n;
  long x, y;
#pragma omp task shared(x) firstprivate(n)
  x = fib(n - 1);
#pragma omp task shared(y) firstprivate(n)
  y = fib(n - 2);
#pragma omp taskwait
  return x + y;
}

void app_fib(long n, app_result_t *out) {
  long r = 0;
  double t0 = apps_now();
#pragma omp parallel
#pragma omp single
  r = fib((int)n);
  out->seconds = apps_now() - t0;
  out->checksum = (double)r;
}

/* ---- nqueens: a task per placement at every level (BOTS, no cut-off) ----- */

static int queens_ok(int n, const char *a) {
  for (int i = 0; i < n; i++) {
    int p = a[i];
    for (int j = i + 1; j < n; j++) {
      int q = a[j];
      if (q == p || q == p - (j - i) || q == p + (j - i))
        return 0;
    }
  }
  return 1;
}

static long nqueens(int n, int j, const char *a) {
  if (n == j)
    return 1;
  long counts[64] = {0};
  for (int i = 0; i < n; i++) {
#pragma omp task firstprivate(i) shared(counts)
    {
      char b[64];
      memcpy(b, a, (size_t)j);
      b[j] = (char)i;
      if (queens_ok(j + 1, b))
        counts[i] = nqueens(n, j + 1, b);
    }
  }
#pragma omp taskwait
  long total = 0;
  for (int i = 0; i < n; i++)
    total += counts[i];
  return total;
}

void app_nqueens(long n, app_result_t *out) {
  long r = 0;
  char a[64];
  if (n > 63)
    n = 63;
  double t0 = apps_now();
#pragma omp parallel
#pragma omp single
  r = nqueens((int)n, 0, a);
  out->seconds = apps_now() - t0;
  out->checksum = (double)r;
}

/* ---- sparselu: blocked LU of a sparse block matrix (BOTS, single creator) */

#define BS 32
typedef double block_t[BS][BS];

static void lu0(block_t d) {
  for (int k = 0; k < BS; k++)
    for (int i = k + 1; i < BS; i++) {
      d[i][k] /= d[k][k];
      for (int j = k + 1; j < BS; j++)
        d[i][j] -= d[i][k] * d[k][j];
    }
}

static void fwd(block_t d, block_t col) {
  for (int j = 0; j < BS; j++)
    for (int k = 0; k < BS; k++)
      for (int i = k + 1; i < BS; i++)
        col[i][j] -= d[i][k] * col[k][j];
}

static void bdiv(block_t d, block_t row) {
  for (int i = 0; i < BS; i++)
    for (int k = 0; k < BS; k++) {
      row[i][k] /= d[k][k];
      for (int j = k + 1; j < BS; j++)
        row[i][j] -= row[i][k] * d[k][j];
    }
}

static void bmod(block_t row, block_t col, block_t inner) {
  for (int i = 0; i < BS; i++)
    for (int k = 0; k < BS; k++)
      for (int j = 0; j < BS; j++)
        inner[i][j] -= row[i][k] * col[k][j];
}

/* BOTS's sparsity pattern and values: a banded matrix with some off-band
 * blocks, diagonally dominant enough for LU without pivoting. */
static block_t **genmat(long nb) {
  block_t **m = calloc((size_t)(nb * nb), sizeof *m);
  if (m == NULL)
    return NULL;
  unsigned init = 1325;
  for (long ii = 0; ii < nb; ii++)
    for (long jj = 0; jj < nb; jj++) {
      int null = (ii < jj && ii % 3 != 0) || (ii > jj && jj % 3 != 0) || ii % 2 == 1 ||
                 jj % 2 == 1;
      if (ii == jj || ii == jj - 1 || ii - 1 == jj)
        null = 0;
      if (null)
        continue;
      block_t *b = malloc(sizeof *b);
      if (b == NULL)
        continue;
      for (int i = 0; i < BS; i++)
        for (int j = 0; j < BS; j++) {
          init = (3125 * init) % 65536;
          (*b)[i][j] = (init - 32768.0) / 16384.0 + (ii == jj && i == j ? 4.0 * BS : 0.0);
        }
      m[ii * nb + jj] = b;
    }
  return m;
}

void app_sparselu(long nb, app_result_t *out) {
  block_t **m = genmat(nb);
  if (m == NULL)
    return;
#define A(i, j) m[(i) * nb + (j)]
  double t0 = apps_now();
#pragma omp parallel
#pragma omp single
  for (long kk = 0; kk < nb; kk++) {
    lu0(*A(kk, kk));
    for (long jj = kk + 1; jj < nb; jj++)
      if (A(kk, jj) != NULL) {
#pragma omp task firstprivate(kk, jj)
        fwd(*A(kk, kk), *A(kk, jj));
      }
    for (long ii = kk + 1; ii < nb; ii++)
      if (A(ii, kk) != NULL) {
#pragma omp task firstprivate(kk, ii)
        bdiv(*A(kk, kk), *A(ii, kk));
      }
#pragma omp taskwait
    for (long ii = kk + 1; ii < nb; ii++)
      if (A(ii, kk) != NULL)
        for (long jj = kk + 1; jj < nb; jj++)
          if (A(kk, jj) != NULL) {
#pragma omp task firstprivate(kk, ii, jj)
            {
              if (A(ii, jj) == NULL)
                A(ii, jj) = calloc(1, sizeof(block_t));
              if (A(ii, jj) != NULL)
                bmod(*A(ii, kk), *A(kk, jj), *A(ii, jj));
            }
          }
#pragma omp taskwait
  }
  out->seconds = apps_now() - t0;
  double sum = 0.0;
  for (long i = 0; i < nb * nb; i++)
    if (m[i] != NULL) {
      for (int r = 0; r < BS; r++)
        for (int c = 0; c < BS; c++)
          sum += (*m[i])[r][c];
      free(m[i]);
    }
#undef A
  free(m);
  out->checksum = sum;
}

/* ---- sort: task-parallel merge sort (halves as tasks, sequential below) -- */

#define SORT_CUTOFF 2048L

static void merge(const int32_t *a, long na, const int32_t *b, long nb, int32_t *dst) {
  long i = 0, j = 0, k = 0;
  while (i < na && j < nb)
    dst[k++] = b[j] < a[i] ? b[j++] : a[i++];
  while (i < na)
    dst[k++] = a[i++];
  while (j < nb)
    dst[k++] = b[j++];
}

/* Sorts a[0..n) using tmp[0..n). */
static void msort_seq(int32_t *a, int32_t *tmp, long n) {
  if (n < 2)
    return;
  long h = n / 2;
  msort_seq(a, tmp, h);
  msort_seq(a + h, tmp + h, n - h);
  merge(a, h, a + h, n - h, tmp);
  memcpy(a, tmp, (size_t)n * sizeof *a);
}

static void msort_par(int32_t *a, int32_t *tmp, long n) {
  if (n <= SORT_CUTOFF) {
    msort_seq(a, tmp, n);
    return;
  }
  long h = n / 2;
#pragma omp task
  msort_par(a, tmp, h);
#pragma omp task
  msort_par(a + h, tmp + h, n - h);
#pragma omp taskwait
  merge(a, h, a + h, n - h, tmp);
  memcpy(a, tmp, (size_t)n * sizeof *a);
}

void app_sort(long n, app_result_t *out) {
  int32_t *a = malloc((size_t)n * sizeof *a), *tmp = malloc((size_t)n * sizeof *tmp);
  if (a == NULL || tmp == NULL) {
    free(a);
    free(tmp);
    return;
  }
  uint64_t x = 88172645463325252ULL;
  for (long i = 0; i < n; i++) {
    x ^= x << 13; /* xorshift64 */
    x ^= x >> 7;
    x ^= x << 17;
    a[i] = (int32_t)(x >> 33);
  }
  double t0 = apps_now();
#pragma omp parallel
#pragma omp single
  msort_par(a, tmp, n);
  out->seconds = apps_now() - t0;
  double sum = 0.0;
  int sorted = 1;
  for (long i = 0; i < n; i++) {
    sum += (double)a[i] * (double)(i % 1024);
    if (i > 0 && a[i - 1] > a[i])
      sorted = 0;
  }
  out->checksum = sorted ? sum : -1.0;
  free(a);
  free(tmp);
}

/* ---- health: villages in a tree, each with a list of patients (BOTS-like):
 * every step simulates the sub-villages as tasks, then walks its own list;
 * patients that waited long enough move up to the parent's list. -------- */

#define HEALTH_LEVELS 4
#define HEALTH_BRANCH 4
#define HEALTH_WAIT 8

typedef struct patient {
  struct patient *next;
  long id;
  int time;
  int hops;
} patient_t;

typedef struct village {
  struct village *child[HEALTH_BRANCH];
  patient_t *list;
  uint64_t seed;
  long next_id;
  int level;
} village_t;

static village_t *village_new(int level, uint64_t seed) {
  village_t *v = calloc(1, sizeof *v);
  if (v == NULL)
    return NULL;
  v->level = level;
  v->seed = seed;
  if (level > 1)
    for (int i = 0; i < HEALTH_BRANCH; i++)
      v->child[i] = village_new(level - 1, seed * 31 + (uint64_t)i + 1);
  return v;
}

static void village_free(village_t *v) {
  if (v == NULL)
    return;
  for (int i = 0; i < HEALTH_BRANCH; i++)
    village_free(v->child[i]);
  while (v->list != NULL) {
    patient_t *p = v->list;
    v->list = p->next;
    free(p);
  }
  free(v);
}

static unsigned rnd(village_t *v) {
  v->seed = v->seed * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned)(v->seed >> 33);
}

/* One step of v and its sub-villages; returns the patients sent up. */
static patient_t *village_step(village_t *v) {
  patient_t *up[HEALTH_BRANCH] = {0};
  for (int i = 0; i < HEALTH_BRANCH; i++)
    if (v->child[i] != NULL) {
#pragma omp task firstprivate(i) shared(up, v)
      up[i] = village_step(v->child[i]);
    }
#pragma omp taskwait
  for (int i = 0; i < HEALTH_BRANCH; i++) /* in child order: deterministic */
    while (up[i] != NULL) {
      patient_t *p = up[i];
      up[i] = p->next;
      p->time = 0;
      p->hops++;
      p->next = v->list;
      v->list = p;
    }
  if (rnd(v) % 4 == 0) {
    patient_t *p = malloc(sizeof *p);
    if (p != NULL) {
      *p = (patient_t){v->list, v->next_id++, 0, 0};
      v->list = p;
    }
  }
  patient_t *sent = NULL, **link = &v->list;
  while (*link != NULL) {
    patient_t *p = *link;
    p->time++;
    if (v->level < HEALTH_LEVELS && p->time > HEALTH_WAIT + (int)(rnd(v) % HEALTH_WAIT)) {
      *link = p->next;
      p->next = sent;
      sent = p;
    } else {
      link = &p->next;
    }
  }
  return sent;
}

static double village_sum(const village_t *v) {
  double s = 0.0;
  for (int i = 0; i < HEALTH_BRANCH; i++)
    if (v->child[i] != NULL)
      s += village_sum(v->child[i]);
  for (const patient_t *p = v->list; p != NULL; p = p->next)
    s += 1.0 + p->time + 100.0 * p->hops;
  return s;
}

void app_health(long steps, app_result_t *out) {
  village_t *top = village_new(HEALTH_LEVELS, 1);
  if (top == NULL)
    return;
  double t0 = apps_now();
#pragma omp parallel
#pragma omp single
  for (long s = 0; s < steps; s++) {
    patient_t *sent = village_step(top); /* the top level keeps everyone */
    (void)sent;
  }
  out->seconds = apps_now() - t0;
  out->checksum = village_sum(top);
  village_free(top);
}

/* ---- dynamic: a loop of uneven iterations, schedule(dynamic,1) ---------- */

void app_dynamic(long n, app_result_t *out) {
  long sum = 0; /* integer: the same whatever thread added which iteration */
  double t0 = apps_now();
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : sum)
  for (long i = 0; i < n; i++) {
    double x = (double)(i % 97) * 1e-3;
    long work = 16 + (i * 7919) % 256; /* 16-271 steps: uneven on purpose */
    for (long k = 0; k < work; k++)
      x = x * 0.999 + 1e-3;
    sum += (long)(x * 1e6);
  }
  out->seconds = apps_now() - t0;
  out->checksum = (double)sum;
}
