// SPDX-License-Identifier: Apache-2.0
// The origin of the floor measured end to end (bench/http/fresh_breakdown.py): it answers every
// HTTP/1.1 request with 201 and the benchmark's JSON body, after SYNCS writes of 64 B to
// SYNC_FILE, each followed by fdatasync. MODE append appends them (the write the floor's probe
// times); MODE overwrite writes them over blocks of a file filled with zeros and synced first,
// cycling through it (the store's WAL is written so on ext4 and XFS). A request through
// nginx to it with SYNCS = 2 is what any proxy whose request waits for two synced writes in a row
// costs on this host, with the client and the proxy idle through the syncs, as they are through a
// fresh request's; with SYNCS = 0 it shows the origin costs what nginx's own does.
// One thread per connection, blocking I/O; requests carry a Content-Length body or none.
// Usage: synced_origin PORT SYNCS MODE SYNC_FILE BODY_FILE
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_origin.h"

enum { kOverwriteBytes = 16 << 20 };

static int sync_fd;
static int syncs;
static int overwrite;
static pthread_mutex_t offset_mu = PTHREAD_MUTEX_INITIALIZER;
static off_t next_offset;

static void synced_writes(void) {
  static const char record[64] = "synced-origin-record";
  for (int i = 0; i < syncs; i++) {
    ssize_t w;
    if (overwrite) {
      pthread_mutex_lock(&offset_mu);
      off_t at = next_offset;
      next_offset = (next_offset + (off_t)sizeof record) % kOverwriteBytes;
      pthread_mutex_unlock(&offset_mu);
      w = pwrite(sync_fd, record, sizeof record, at);
    } else {
      w = write(sync_fd, record, sizeof record);
    }
    if (w != (ssize_t)sizeof record) die("write");
    if (fdatasync(sync_fd) != 0) die("fdatasync");
  }
}

static int send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void* serve(void* arg) {
  int fd = (int)(long)arg;
  char buf[65536];
  size_t have = 0;
  for (;;) {
    ssize_t r = read(fd, buf + have, sizeof buf - have);
    if (r <= 0) break;
    have += (size_t)r;
    size_t len;
    while ((len = request_length(buf, have)) > 0) {
      synced_writes();
      if (send_all(fd, response, response_len) != 0) goto done;
      memmove(buf, buf + len, have - len);
      have -= len;
    }
    if (have == sizeof buf) break;  // a request larger than the buffer: not the benchmark's
  }
done:
  close(fd);
  return NULL;
}

static void open_sync_file(const char* mode, const char* path) {
  overwrite = strcmp(mode, "overwrite") == 0;
  if (!overwrite && strcmp(mode, "append") != 0) die("MODE is append or overwrite");
  sync_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (overwrite ? 0 : O_APPEND), 0600);
  if (sync_fd < 0) die(path);
  if (!overwrite) return;
  static char zeros[1 << 20];
  for (int i = 0; i < kOverwriteBytes / (int)sizeof zeros; i++)
    if (write(sync_fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) die("zeros");
  if (fsync(sync_fd) != 0) die("fsync");
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s PORT SYNCS MODE SYNC_FILE BODY_FILE\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);  // a connection nginx closed ends its thread, not the origin
  syncs = atoi(argv[2]);
  open_sync_file(argv[3], argv[4]);
  load_response(argv[5], "synced-origin");
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr*)&a, sizeof a) != 0 || listen(ls, 4096) != 0) die("listen");
  printf("listening on %s\n", argv[1]);
  fflush(stdout);
  for (;;) {
    int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t t;
    if (pthread_create(&t, NULL, serve, (void*)(long)c) != 0) die("pthread_create");
    pthread_detach(t);
  }
}
