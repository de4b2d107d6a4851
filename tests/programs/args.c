/* args: the OMPT arguments ompt-py keeps, printed as the program sees them
 * without OMPT, one "KEY values..." line each (conftest.printed):
 *   main_frame: __builtin_frame_address(0) in main, which starts a region
 *     (encountering task: the initial task) and a league of teams;
 *   outer_exit: __builtin_frame_address(1) in the region's code on thread 0:
 *     the frame of the runtime function that called it, the exit frame of its
 *     implicit task (LLVM's parallel/nested.c checks the nested region's
 *     parallel_begin against it);
 *   outer_frame: __builtin_frame_address(0) there, where it starts a nested
 *     region (encountering task: that implicit task);
 *   control: the arg of omp_control_tool (a second call passes NULL);
 *   error: the lengths of the messages of two error directives, the first
 *     600 bytes long (the tool keeps 512 of them), the second "short".
 * With the argument "full", before the error directives: the region markers
 * of NAMES distinct names (the tool's libomptpy.so, found loaded), which fill
 * the tool's table of strings, so that it has no room for the messages. */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define NAMES 16384 /* OMPTPY_REGION_MAX_NAMES */

/* A message of 600 bytes (the directive takes a string literal only). */
#define S10 "abcdefghij"
#define S100 S10 S10 S10 S10 S10 S10 S10 S10 S10 S10
#define LONG_MESSAGE S100 S100 S100 S100 S100 S100

static void nested(void) {
#pragma omp parallel num_threads(2)
  { __asm__ volatile("" ::: "memory"); }
}

static void fill_the_table(void) {
  void *tool = dlopen("libomptpy.so", RTLD_LAZY | RTLD_NOLOAD);
  void *begin = tool ? dlsym(tool, "omptpy_region_begin") : NULL;
  if (!begin) return;
  void (*mark)(const char *);
  memcpy(&mark, &begin, sizeof mark);
  char name[16];
  for (int i = 0; i < NAMES; i++) {
    snprintf(name, sizeof name, "r%d", i);
    mark(name);
  }
}

int main(int argc, char **argv) {
  omp_set_max_active_levels(2);
  printf("main_frame %lu\n", (unsigned long)__builtin_frame_address(0));
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
/* Safe here: the caller is libomp's __kmp_invoke_microtask, which keeps a frame pointer. */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wframe-address"
      printf("outer_exit %lu\n", (unsigned long)__builtin_frame_address(1));
#pragma clang diagnostic pop
      printf("outer_frame %lu\n", (unsigned long)__builtin_frame_address(0));
      nested();
    }
  }
#pragma omp teams num_teams(2)
  { __asm__ volatile("" ::: "memory"); }
  int arg = 0;
  omp_control_tool(64, 7, &arg);
  omp_control_tool(65, 0, NULL);
  printf("control %lu\n", (unsigned long)&arg);
  if (argc > 1 && strcmp(argv[1], "full") == 0) fill_the_table();
#pragma omp error at(execution) severity(warning) message(LONG_MESSAGE)
#pragma omp error at(execution) severity(warning) message("short")
  printf("error %zu %zu\n", strlen(LONG_MESSAGE), strlen("short"));
  return 0;
}
