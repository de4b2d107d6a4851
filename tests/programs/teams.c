/* teams: a league of 2 teams on the host, each opening a parallel region. */
#include <stdio.h>

int main(void) {
  int n = 0;
#pragma omp teams num_teams(2) reduction(+ : n)
  {
#pragma omp parallel num_threads(2) reduction(+ : n)
    n += 1;
  }
  printf("n=%d\n", n);
  return 0;
}
