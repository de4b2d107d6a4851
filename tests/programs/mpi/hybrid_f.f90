! A hybrid MPI + OpenMP program in Fortran for tests/live/test_mpi.py: each rank
! runs STEPS parallel regions, each followed by a barrier, between MPI_Init and
! MPI_Finalize (mpif.h bindings through `use mpi`), and prints "rank R of N".
program hybrid_f
  use mpi
  implicit none
  integer, parameter :: steps = 10
  integer :: ierr, rank, nranks, step, i
  double precision :: total
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  total = 0
  do step = 1, steps
!$omp parallel do reduction(+:total)
    do i = 1, 10000
      total = total + mod(i + rank + step, 7)
    end do
!$omp end parallel do
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  end do
  print '(a, i0, a, i0)', 'rank ', rank, ' of ', nranks
  call MPI_Finalize(ierr)
end program hybrid_f
