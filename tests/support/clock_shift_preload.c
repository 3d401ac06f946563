// SPDX-License-Identifier: Apache-2.0
// LD_PRELOAD shim for tests: shifts the wall clock (CLOCK_REALTIME, gettimeofday, time) of the
// process by IDEMGATE_CLOCK_SHIFT_S seconds (may be negative). Monotonic clocks are untouched.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long Shift(void) {
  const char* s = getenv("IDEMGATE_CLOCK_SHIFT_S");
  return s == NULL ? 0 : atol(s);
}

int clock_gettime(clockid_t id, struct timespec* ts) {
  static int (*real)(clockid_t, struct timespec*) = NULL;
  if (real == NULL) real = (int (*)(clockid_t, struct timespec*))dlsym(RTLD_NEXT, "clock_gettime");
  int rc = real(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += Shift();
  return rc;
}

// glibc declares tv nonnull, but a caller through this shim may still pass NULL: keep the check.
#pragma GCC diagnostic ignored "-Wnonnull-compare"
int gettimeofday(struct timeval* tv, void* tz) {
  struct timespec ts;
  int rc = clock_gettime(CLOCK_REALTIME, &ts);
  if (rc == 0 && tv != NULL) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  (void)tz;
  return rc;
}

time_t time(time_t* out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out != NULL) *out = ts.tv_sec;
  return ts.tv_sec;
}
