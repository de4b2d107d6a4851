/*
 * The raw trace file the file sink writes (OMPTPY_OUTPUT), one per process:
 * a sequence of blocks, each a header and `length` bytes of payload: META
 * (JSON, first), RECORDS (the omptpy_record array of one thread, in order),
 * STATS (JSON counters with a clock anchor, written as the run goes and once
 * more at the end) and STACKS (JSON: the interpreter call stacks added since
 * the previous STACKS block, see omptpy_stacks in omptpy_api.h).  Readers
 * take these values from here (ompt_py through _core's FILE_MAGIC, BLOCK_*
 * and BLOCK_HEADER_SIZE).
 */
#ifndef OMPTPY_FILE_H
#define OMPTPY_FILE_H

#include <stdint.h>

#define OMPTPY_FILE_MAGIC 0x5450504fu /* "OPPT" in the file's (little-endian) bytes */

enum { OMPTPY_BLOCK_META = 1, OMPTPY_BLOCK_RECORDS = 2, OMPTPY_BLOCK_STATS = 3,
       OMPTPY_BLOCK_STACKS = 4 };

typedef struct omptpy_block_header {
  uint32_t magic;
  uint32_t type;   /* OMPTPY_BLOCK_* */
  uint64_t length; /* of the payload, in bytes */
} omptpy_block_header;

_Static_assert(sizeof(omptpy_block_header) == 16, "a block header is 16 bytes, no padding");

#endif /* OMPTPY_FILE_H */
