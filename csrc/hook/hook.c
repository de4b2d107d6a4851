/*
 * The preload hook (README.md): _exit, _Exit, abort and the exec family,
 * interposed so that the tool writes what it buffers and records how the
 * process image ended before the real function runs; and libomp's stale
 * registration file of this process removed before libomp can read it.
 * Plain C, no lock, no allocation but the new environment of an exec (mmap:
 * async-signal-safe, as exec and _exit are).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tool/omptpy_file.h"

#define HOOK_API __attribute__((visibility("default")))
#define EXEC_VARIABLE "OMPTPY_EXEC_FROM="

typedef int (*ending_fn)(int how, char *link, size_t size);

static _Atomic(ending_fn) tool_ending;

/* Called by the tool when it starts (tool.c). */
HOOK_API void omptpy_hook_register(ending_fn fn) { atomic_store(&tool_ending, fn); }

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

static void end(int how, char *link, size_t size) {
  ending_fn fn = atomic_load(&tool_ending);
  if (link && size) link[0] = '\0';
  if (fn) fn(how, link, size);
}

/* The environment of the new image: envp without OMPTPY_EXEC_FROM, plus the
 * link the tool gave (NULL: envp as it is).  Freed if the exec fails. */
typedef struct new_env {
  char **env;
  size_t bytes;
  char link[4200];
} new_env;

static char **prepare_exec(new_env *ne, char *const envp[]) {
  ne->env = NULL;
  end(OMPTPY_END_EXEC, ne->link, sizeof ne->link);
  if (!ne->link[0]) return (char **)envp;
  size_t n = 0;
  while (envp && envp[n]) n++;
  ne->bytes = (n + 2) * sizeof(char *);
  void *p = mmap(NULL, ne->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return (char **)envp;
  ne->env = p;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(envp[i], EXEC_VARIABLE, strlen(EXEC_VARIABLE)) != 0) ne->env[k++] = envp[i];
  ne->env[k++] = ne->link;
  ne->env[k] = NULL;
  return ne->env;
}

/* The exec failed: the image goes on. */
static int failed_exec(new_env *ne) {
  int e = errno;
  if (ne->env) munmap(ne->env, ne->bytes);
  end(OMPTPY_END_NONE, NULL, 0);
  errno = e;
  return -1;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

HOOK_API int execve(const char *path, char *const argv[], char *const envp[]) {
  new_env ne;
  char **env = prepare_exec(&ne, envp);
  ((execve_fn)real("execve"))(path, argv, env);
  return failed_exec(&ne);
}

HOOK_API int execvpe(const char *file, char *const argv[], char *const envp[]) {
  new_env ne;
  char **env = prepare_exec(&ne, envp);
  ((execve_fn)real("execvpe"))(file, argv, env);
  return failed_exec(&ne);
}

HOOK_API int fexecve(int fd, char *const argv[], char *const envp[]) {
  new_env ne;
  char **env = prepare_exec(&ne, envp);
  ((fexecve_fn)real("fexecve"))(fd, argv, env);
  return failed_exec(&ne);
}

HOOK_API int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

HOOK_API int execvp(const char *file, char *const argv[]) {
  return execvpe(file, argv, environ);
}

/* The execl family: the variable arguments as an argv array on the stack. */
#define COLLECT_ARGS(arg, argv, last)                          \
  size_t n_ = 1;                                               \
  va_list ap_;                                                 \
  va_start(ap_, arg);                                          \
  while (va_arg(ap_, const char *)) n_++;                      \
  va_end(ap_);                                                 \
  char *argv[n_ + 1];                                          \
  argv[0] = (char *)(arg);                                     \
  va_start(ap_, arg);                                          \
  for (size_t i_ = 1; i_ <= n_; i_++) argv[i_] = va_arg(ap_, char *); \
  last;                                                        \
  va_end(ap_)

HOOK_API int execl(const char *path, const char *arg, ...) {
  COLLECT_ARGS(arg, argv, (void)0);
  return execve(path, argv, environ);
}

HOOK_API int execlp(const char *file, const char *arg, ...) {
  COLLECT_ARGS(arg, argv, (void)0);
  return execvpe(file, argv, environ);
}

HOOK_API int execle(const char *path, const char *arg, ...) {
  char *const *envp;
  COLLECT_ARGS(arg, argv, envp = va_arg(ap_, char *const *));
  return execve(path, argv, envp);
}

typedef void (*exit_fn)(int) __attribute__((noreturn));

HOOK_API __attribute__((noreturn)) void _exit(int status) {
  end(OMPTPY_END__EXIT, NULL, 0);
  ((exit_fn)real("_exit"))(status);
}

HOOK_API __attribute__((noreturn)) void _Exit(int status) {
  end(OMPTPY_END__EXIT, NULL, 0);
  ((exit_fn)real("_Exit"))(status);
}

typedef void (*abort_fn)(void) __attribute__((noreturn));

HOOK_API __attribute__((noreturn)) void abort(void) {
  end(OMPTPY_END_ABORT, NULL, 0);
  ((abort_fn)real("abort"))();
}

/* libomp (14, 16 and 19: kmp_runtime.cpp, __kmp_register_library_startup)
 * registers each process in a file named __KMP_REGISTERED_LIB_<pid>_<uid>
 * (getpid, getuid): shm_open in /dev/shm with O_CREAT | O_EXCL, ftruncate,
 * mmap, then its string; libomp 19 uses the same name in /tmp where /dev/shm
 * cannot be used (16 uses mkstemp there: a name no later process meets).  A
 * process killed between the open and the ftruncate leaves an empty file; when
 * its pid comes round again, the new process's libomp finds the file, maps it
 * and reads it past its end: SIGBUS at the first OpenMP call.  An empty file of
 * this process's own pid is stale by definition (its libomp has not registered
 * yet: the hook runs before main, and in a fork's child before the child's
 * libomp registers under its new pid), so it goes.  Only empty ones: a
 * non-empty file is a registration, which libomp checks itself (the previous
 * image of an exec).  The same name and folders as
 * ompt_py/live/runtime.py's KMP_REGISTRATION_NAME and KMP_REGISTRATION_DIRS
 * (the Python mirror, for processes that import ompt_py).  Async-signal-safe
 * (a fork's child of a threaded process): no stdio, no allocation. */
#define KMP_REGISTRATION_PREFIX "__KMP_REGISTERED_LIB_"
static const char *const kmp_registration_dirs[] = {"/dev/shm/", "/tmp/"};

/* v in decimal at p, as printf's %d writes it; returns the end. */
static char *put_decimal(char *p, int value) {
  char digits[16];
  size_t n = 0;
  long v = value;
  if (v < 0) {
    *p++ = '-';
    v = -v;
  }
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *p++ = digits[--n];
  return p;
}

static void remove_stale_kmp_registration(void) {
  char path[sizeof "/dev/shm/" + sizeof KMP_REGISTRATION_PREFIX + 48];
  for (size_t i = 0; i < sizeof kmp_registration_dirs / sizeof *kmp_registration_dirs; i++) {
    size_t dir = strlen(kmp_registration_dirs[i]);
    memcpy(path, kmp_registration_dirs[i], dir);
    memcpy(path + dir, KMP_REGISTRATION_PREFIX, sizeof KMP_REGISTRATION_PREFIX - 1);
    char *p = put_decimal(path + dir + sizeof KMP_REGISTRATION_PREFIX - 1, (int)getpid());
    *p++ = '_';
    p = put_decimal(p, (int)getuid()); /* libomp's (int)getuid() */
    *p = '\0';
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) unlink(path);
  }
}

__attribute__((constructor)) static void hook_start(void) {
  remove_stale_kmp_registration();
  pthread_atfork(NULL, NULL, remove_stale_kmp_registration);
}
