/*
 * Task frames in records (see "Frames" in omptpy.h): the kind byte of a
 * task_create or sample record says which of the two frame addresses the
 * runtime gave and with which flags.
 */
#ifndef OMPTPY_FRAMES_H
#define OMPTPY_FRAMES_H

#include <stdint.h>

#include "omptpy_ompt.h"

#define OMPTPY_FRAME_EXIT 0x01
#define OMPTPY_FRAME_ENTER 0x02

/* ompt_frame_flag_t in 3 bits: the application bit, then the address kind
 * (1 cfa, 2 framepointer, 3 stackaddress). */
static inline uint8_t omptpy_frame_flags3(int flags) {
  return (uint8_t)((flags & 0x1) | ((flags >> 4) & 0x3) << 1);
}

/* The inverse of omptpy_frame_flags3: 3 bits -> ompt_frame_flag_t. */
static inline uint8_t omptpy_frame_flags_of3(unsigned bits3) {
  return (uint8_t)((bits3 & 0x1) | ((bits3 >> 1) & 0x3) << 4);
}

/* The frame bits of a task's frame (NULL: none). */
static inline uint8_t omptpy_frame_bits(const ompt_frame_t *f) {
  if (!f) return 0;
  uint8_t bits = 0;
  if (f->exit_frame.ptr) bits |= OMPTPY_FRAME_EXIT | omptpy_frame_flags3(f->exit_frame_flags) << 2;
  if (f->enter_frame.ptr)
    bits |= OMPTPY_FRAME_ENTER | omptpy_frame_flags3(f->enter_frame_flags) << 5;
  return bits;
}

#endif /* OMPTPY_FRAMES_H */
