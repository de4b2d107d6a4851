/* A minimal OMPT tool that says when the runtime picked it (stderr), for the
 * test that OMPTPY_TOOL=off lets the next tool of OMP_TOOL_LIBRARIES load. */
#include <omp-tools.h>
#include <stdio.h>

static int initialize(ompt_function_lookup_t lookup, int device, ompt_data_t *data) {
  (void)lookup, (void)device, (void)data;
  fprintf(stderr, "other-tool: initialize\n");
  return 1;
}

static void finalize(ompt_data_t *data) { (void)data; }

ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version, const char *runtime_version) {
  (void)omp_version, (void)runtime_version;
  static ompt_start_tool_result_t result = {initialize, finalize, {0}};
  return &result;
}
