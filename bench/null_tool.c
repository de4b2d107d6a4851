/*
 * Null OMPT tool: attaches to the runtime (initialize returns 1) and
 * registers no callback.  Measures what merely having a tool costs.
 */
#include <stddef.h>

#include "bench_ompt.h"

static int null_initialize(bo_function_lookup_t lookup, int initial_device_num,
                           bo_data_t *tool_data) {
  (void)lookup;
  (void)initial_device_num;
  (void)tool_data;
  return 1;
}

static void null_finalize(bo_data_t *tool_data) { (void)tool_data; }

BO_EXPORT bo_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
                                                  const char *runtime_version);

bo_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
                                        const char *runtime_version) {
  static bo_start_tool_result_t result = {null_initialize, null_finalize, {0}};
  (void)omp_version;
  (void)runtime_version;
  return &result;
}
