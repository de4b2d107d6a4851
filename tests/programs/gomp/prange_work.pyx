# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Cython prange workloads for the runtime-fallback tests (built with gcc
-fopenmp).  Each call is one parallel region of 2 threads running a
schedule(dynamic, 1) loop; the results do not depend on which thread ran
which iteration."""

from cython.parallel import prange
from libc.math cimport sin
from libc.stdint cimport uint64_t


cdef inline uint64_t mix(uint64_t i) noexcept nogil:
    cdef uint64_t x = i * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL
    x ^= x >> 31
    x *= 0xBF58476D1CE4E5B9ULL
    return x ^ (x >> 29)


def fill(double[::1] out):
    """out[i] = f(i) for every i, in one region (len(out) dispatch events)."""
    cdef Py_ssize_t i, n = out.shape[0]
    for i in prange(n, nogil=True, schedule='dynamic', chunksize=1, num_threads=2):
        out[i] = sin(<double>mix(i) * 1e-12) + <double>i


def mixsum(Py_ssize_t n):
    """Sum of mix(i) over range(n), wrapping at 2**64, in one region."""
    cdef Py_ssize_t i
    cdef uint64_t total = 0
    for i in prange(n, nogil=True, schedule='dynamic', chunksize=1, num_threads=2):
        total += mix(i)
    return total
