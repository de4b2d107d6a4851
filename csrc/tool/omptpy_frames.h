/*
 * Task frames in records (see "Frames" in omptpy.h): the kind byte of a
 * task_create, parallel_begin or sample record says which of the two frame
 * addresses the runtime gave and with which flags.
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

/* A frame packed into 96 bits (parallel_begin and sample records, which have
 * no room for two addresses): returns the exit frame, or the enter frame when
 * there is no exit frame; *below = exit frame - enter frame (int32) when
 * there are both, INT32_MIN when they are too far apart to say (the enter
 * frame is then not kept), else 0. */
static inline uint64_t omptpy_frame_pack(const ompt_frame_t *f, uint32_t *below) {
  uint64_t exit_frame = f ? f->exit_frame.value : 0, enter_frame = f ? f->enter_frame.value : 0;
  *below = 0;
  if (exit_frame && enter_frame) {
    int64_t d = (int64_t)(exit_frame - enter_frame);
    *below = d > INT32_MIN && d <= INT32_MAX ? (uint32_t)(int32_t)d : (uint32_t)INT32_MIN;
  }
  return exit_frame ? exit_frame : enter_frame;
}

/* The inverse of omptpy_frame_pack, given the frame bits: the exit and enter
 * frames (0 where the runtime gave none); returns 0 when the enter frame was
 * not kept (too far from the exit frame). */
static inline int omptpy_frame_unpack(uint8_t bits, uint64_t packed, uint32_t below,
                                      uint64_t *exit_frame, uint64_t *enter_frame) {
  int has_exit = (bits & OMPTPY_FRAME_EXIT) != 0, has_enter = (bits & OMPTPY_FRAME_ENTER) != 0;
  *exit_frame = has_exit ? packed : 0;
  *enter_frame = !has_enter ? 0 : has_exit ? packed - (uint64_t)(int64_t)(int32_t)below : packed;
  return !(has_exit && has_enter && (int32_t)below == INT32_MIN);
}

#endif /* OMPTPY_FRAMES_H */
