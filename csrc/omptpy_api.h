/*
 * The functions libomptpy.so exports besides ompt_start_tool, used by the
 * Python extension module (csrc/module.c).  Implemented in tool.c.
 */
#ifndef OMPTPY_API_H
#define OMPTPY_API_H

#include <stddef.h>
#include <stdint.h>

/* Reads the configuration once; 0, or -EINVAL with omptpy_config_error() set. */
int omptpy_init(void);
const char *omptpy_config_error(void);
/* Checks the OMPTPY_* variables of the environment as it is now (for launchers). */
int omptpy_config_check(char *error, size_t size);
void omptpy_set_recording(int on);
int omptpy_is_recording(void);
/* Moves every buffered record, partial chunks included, into the sink. */
void omptpy_flush_all(void);
/* Memory sink: takes the records gathered so far (release with omptpy_release). */
void *omptpy_take(size_t *nrecs, size_t *mapped);
void omptpy_release(void *base, size_t mapped);
/* JSON documents to free() with free(), or NULL when out of memory. */
char *omptpy_meta(void);
char *omptpy_stats(void);
char *omptpy_runtime_info(void);
const char *omptpy_tool_path(void);

#endif /* OMPTPY_API_H */
