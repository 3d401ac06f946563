// SPDX-License-Identifier: Apache-2.0
/* idemgate fault shim: host faults injected for real into an unmodified process (test only).
 *
 *   LD_PRELOAD=/path/libidemgate_fault_shim.so IDEMGATE_FAULT_FILE=/path/faults idemgate ...
 *
 * It interposes libc's listen, fsync and fdatasync (what RocksDB calls to sync its WAL, tables, MANIFEST
 * and directories) and the wall-clock reads (clock_gettime of CLOCK_REALTIME[_COARSE],
 * gettimeofday, time). CLOCK_MONOTONIC and every other call pass through untouched.
 *
 * Control file (the path in $IDEMGATE_FAULT_FILE): text, one `key = value` per line, `#` starts
 * a comment, unknown keys are ignored. A missing file or key means no fault. The file is read
 * again whenever its inode, size or mtime changes (checked with stat(2) on every interposed
 * call), so write it atomically: write a temporary file, then rename(2) it over the path.
 *
 *   sync_fail = N         the next N matching fsync/fdatasync calls fail with EIO without
 *                         syncing (what a failed disk flush looks like: the bytes written before
 *                         may or may not be on the disk); -1: every one. Default 0.
 *   sync_stall_ms = D     matching fsync/fdatasync calls sleep D ms, then sync. Default 0.
 *   sync_stall_count = N  only the next N matching syncs stall; -1 (default): every one.
 *   sync_match = TEXT     a sync matches when the path of its fd contains TEXT (".log" selects
 *                         RocksDB's write-ahead log); empty (default): every sync matches.
 *   clock_offset_s = S    the wall clock reads S seconds ahead (negative: behind): a clock step.
 *   listen_fail_port = P  listen(2) on a socket bound to port P fails with EADDRINUSE (what
 *                         losing a bind race to another process looks like at start-up); bind(2)
 *                         itself is untouched. Default 0: none.
 *
 * The counts (sync_fail, sync_stall_count) start again from the file's values each time the
 * file changes. Every injected fault, and every change of the clock offset, is reported on
 * stderr as a line starting with "idemgate-fault-shim: " (tests wait for those lines):
 *   idemgate-fault-shim: fdatasync failed with EIO: <path>
 *   idemgate-fault-shim: fdatasync stalled for <D> ms: <path>
 *   idemgate-fault-shim: fdatasync stall over: <path>
 *   idemgate-fault-shim: clock offset <S> s
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MATCH_MAX 256

struct controls {
  long sync_fail;
  long sync_stall_ms;
  long sync_stall_count;
  long clock_offset_s;
  long listen_fail_port;
  char sync_match[MATCH_MAX];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct controls ctl; /* guarded by mu */
static struct stat seen;    /* guarded by mu: the control file as last read */
static int have_seen;       /* guarded by mu */

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_clock_gettime)(clockid_t, struct timespec*);
static int (*real_gettimeofday)(struct timeval*, void*);
static int (*real_listen)(int, int);

static void say(const char* text) {
  size_t n = strlen(text);
  while (n > 0) {
    ssize_t w = write(2, text, n);
    if (w <= 0) return;
    text += w;
    n -= (size_t)w;
  }
}

static void resolve(void) {
  if (real_clock_gettime != NULL) return;
  real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
  real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  real_gettimeofday = (int (*)(struct timeval*, void*))dlsym(RTLD_NEXT, "gettimeofday");
  real_clock_gettime = (int (*)(clockid_t, struct timespec*))dlsym(RTLD_NEXT, "clock_gettime");
}

static void parse_line(char* line, struct controls* c) {
  char* hash = strchr(line, '#');
  if (hash != NULL) *hash = '\0';
  char* eq = strchr(line, '=');
  if (eq == NULL) return;
  *eq = '\0';
  char* key = line;
  char* value = eq + 1;
  while (*key == ' ' || *key == '\t') ++key;
  char* end = key + strlen(key);
  while (end > key && (end[-1] == ' ' || end[-1] == '\t')) *--end = '\0';
  while (*value == ' ' || *value == '\t') ++value;
  end = value + strlen(value);
  while (end > value && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) *--end = '\0';
  if (strcmp(key, "sync_match") == 0) {
    snprintf(c->sync_match, sizeof(c->sync_match), "%s", value);
    return;
  }
  long n = strtol(value, NULL, 10);
  if (strcmp(key, "sync_fail") == 0) c->sync_fail = n;
  if (strcmp(key, "sync_stall_ms") == 0) c->sync_stall_ms = n;
  if (strcmp(key, "sync_stall_count") == 0) c->sync_stall_count = n;
  if (strcmp(key, "clock_offset_s") == 0) c->clock_offset_s = n;
  if (strcmp(key, "listen_fail_port") == 0) c->listen_fail_port = n;
}

static void read_controls(const char* path, struct controls* c) {
  memset(c, 0, sizeof(*c));
  c->sync_stall_count = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char text[4096];
  size_t len = 0;
  ssize_t n;
  while (len < sizeof(text) - 1 && (n = read(fd, text + len, sizeof(text) - 1 - len)) > 0) {
    len += (size_t)n;
  }
  close(fd);
  text[len] = '\0';
  char* save = NULL;
  for (char* line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
    parse_line(line, c);
  }
}

/* Caller holds mu. Re-reads the control file when it changed. */
static void refresh_locked(void) {
  const char* path = getenv("IDEMGATE_FAULT_FILE");
  struct stat st;
  if (path == NULL || stat(path, &st) != 0) {
    if (have_seen) {
      if (ctl.clock_offset_s != 0) say("idemgate-fault-shim: clock offset 0 s\n");
      memset(&ctl, 0, sizeof(ctl));
      have_seen = 0;
    }
    return;
  }
  if (have_seen && st.st_ino == seen.st_ino && st.st_size == seen.st_size &&
      st.st_mtim.tv_sec == seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == seen.st_mtim.tv_nsec) {
    return;
  }
  long old_offset = ctl.clock_offset_s;
  read_controls(path, &ctl);
  seen = st;
  have_seen = 1;
  if (ctl.clock_offset_s != old_offset) {
    char line[96];
    snprintf(line, sizeof(line), "idemgate-fault-shim: clock offset %ld s\n", ctl.clock_offset_s);
    say(line);
  }
}

static long clock_offset(void) {
  pthread_mutex_lock(&mu);
  refresh_locked();
  long s = ctl.clock_offset_s;
  pthread_mutex_unlock(&mu);
  return s;
}

enum sync_fault { SYNC_OK, SYNC_FAIL, SYNC_STALL };

/* Decides what happens to one sync of `fd`; for a stall, *stall_ms is how long. */
static enum sync_fault next_sync_fault(int fd, char* path, size_t path_size, long* stall_ms) {
  char link[64];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, path_size - 1);
  path[n < 0 ? 0 : n] = '\0';
  enum sync_fault f = SYNC_OK;
  pthread_mutex_lock(&mu);
  refresh_locked();
  if (ctl.sync_match[0] == '\0' || strstr(path, ctl.sync_match) != NULL) {
    if (ctl.sync_fail != 0) {
      if (ctl.sync_fail > 0) --ctl.sync_fail;
      f = SYNC_FAIL;
    } else if (ctl.sync_stall_ms > 0 && ctl.sync_stall_count != 0) {
      if (ctl.sync_stall_count > 0) --ctl.sync_stall_count;
      *stall_ms = ctl.sync_stall_ms;
      f = SYNC_STALL;
    }
  }
  pthread_mutex_unlock(&mu);
  return f;
}

static int faulty_sync(const char* name, int fd, int (*real)(int)) {
  char path[512];
  long stall_ms = 0;
  char line[700];
  switch (next_sync_fault(fd, path, sizeof(path), &stall_ms)) {
    case SYNC_FAIL:
      snprintf(line, sizeof(line), "idemgate-fault-shim: %s failed with EIO: %s\n", name, path);
      say(line);
      errno = EIO;
      return -1;
    case SYNC_STALL: {
      snprintf(line, sizeof(line), "idemgate-fault-shim: %s stalled for %ld ms: %s\n", name,
               stall_ms, path);
      say(line);
      struct timespec d = {stall_ms / 1000, (stall_ms % 1000) * 1000000L};
      while (nanosleep(&d, &d) != 0 && errno == EINTR) {
      }
      snprintf(line, sizeof(line), "idemgate-fault-shim: %s stall over: %s\n", name, path);
      say(line);
      break;
    }
    case SYNC_OK:
      break;
  }
  return real(fd);
}

int fsync(int fd) {
  resolve();
  return faulty_sync("fsync", fd, real_fsync);
}

int fdatasync(int fd) {
  resolve();
  return faulty_sync("fdatasync", fd, real_fdatasync);
}

int clock_gettime(clockid_t id, struct timespec* ts) {
  resolve();
  int rc = real_clock_gettime(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    ts->tv_sec += clock_offset();
  }
  return rc;
}

#pragma GCC diagnostic ignored "-Wnonnull-compare" /* glibc marks tv nonnull; Linux allows NULL */
int gettimeofday(struct timeval* tv, void* tz) {
  resolve();
  int rc = real_gettimeofday(tv, tz);
  if (rc == 0 && tv != NULL) tv->tv_sec += clock_offset();
  return rc;
}

time_t time(time_t* out) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
  if (out != NULL) *out = ts.tv_sec;
  return ts.tv_sec;
}

/* The port `fd` is bound to (IPv4 or IPv6), or -1. */
static long bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr*)&ss, &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in*)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6*)&ss)->sin6_port);
  return -1;
}

int listen(int fd, int backlog) {
  resolve();
  pthread_mutex_lock(&mu);
  refresh_locked();
  long fail_port = ctl.listen_fail_port;
  pthread_mutex_unlock(&mu);
  if (fail_port > 0 && bound_port(fd) == fail_port) {
    char line[96];
    snprintf(line, sizeof(line), "idemgate-fault-shim: listen on port %ld failed\n", fail_port);
    say(line);
    errno = EADDRINUSE;
    return -1;
  }
  return real_listen(fd, backlog);
}
