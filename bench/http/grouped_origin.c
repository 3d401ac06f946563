// SPDX-License-Identifier: Apache-2.0
// The origin of the floor at many connections (bench/http/fresh_floor.py): it answers every
// HTTP/1.1 request with 201 and the benchmark's JSON body after SYNCS writes of 64 B to
// SYNC_FILE in a row, each durable before the next, committed in groups as the gateway's store
// does: one thread and one epoll loop; each pass reads every request that has arrived, writes
// each request's next record over blocks of a file filled with zeros and synced first (as the
// store's WAL is written on ext4 and XFS), makes one fdatasync for all of them, then answers the
// requests whose last write it covered. A request through nginx to it with SYNCS = 2 is what any
// proxy whose request waits for two synced writes in a row, doing nginx's work and nothing more,
// reaches on this host; with SYNCS = 0 it shows the origin costs what nginx's own does.
// Requests carry a Content-Length body or none, one at a time on a connection (as nginx sends
// them upstream).
// Usage: grouped_origin PORT SYNCS SYNC_FILE BODY_FILE
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_origin.h"

enum { kOverwriteBytes = 16 << 20, kMaxFd = 65536, kBuf = 16384 };

struct conn {
  char buf[kBuf];
  size_t have;
  size_t request;  // the length of the request being answered, or 0
  int left;        // its synced writes still to make
};

static struct conn* conns[kMaxFd];
static int batch[kMaxFd], next_batch[kMaxFd];  // fds whose write the next fdatasync covers
static int batch_n, next_n;
static int sync_fd, syncs;
static off_t offset;

static void close_conn(int fd) {
  free(conns[fd]);
  conns[fd] = NULL;
  close(fd);
}

static void write_record(int fd) {
  static const char record[64] = "grouped-origin-record";
  if (pwrite(sync_fd, record, sizeof record, offset) != (ssize_t)sizeof record) die("write");
  offset = (offset + (off_t)sizeof record) % kOverwriteBytes;
  next_batch[next_n++] = fd;
}

// Answers the request at the head of c's buffer, then starts the next one if it has arrived.
static void answer(int fd) {
  struct conn* c = conns[fd];
  if (write(fd, response, response_len) != (ssize_t)response_len) return close_conn(fd);
  memmove(c->buf, c->buf + c->request, c->have - c->request);
  c->have -= c->request;
  c->request = 0;
}

static void start_request(int fd) {
  struct conn* c = conns[fd];
  while (c && c->request == 0 && (c->request = request_length(c->buf, c->have)) > 0) {
    c->left = syncs;
    if (c->left > 0) return write_record(fd);
    answer(fd);
    c = conns[fd];
  }
}

static void on_readable(int fd) {
  struct conn* c = conns[fd];
  ssize_t r = read(fd, c->buf + c->have, kBuf - c->have);
  if (r == 0 || (r < 0 && errno != EAGAIN) || (r > 0 && c->have + (size_t)r == kBuf))
    return close_conn(fd);  // closed, failed, or a request larger than the benchmark's
  if (r < 0) return;
  c->have += (size_t)r;
  start_request(fd);
}

static void on_accept(int ep, int ls) {
  int one = 1;
  for (int fd; (fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
    if (fd >= kMaxFd) {
      close(fd);
      continue;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conns[fd] = calloc(1, sizeof(struct conn));
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (!conns[fd] || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
  }
}

// One fdatasync for every write made since the last; each request it covered makes its next
// write or, with none left, is answered.
static void commit(void) {
  memcpy(batch, next_batch, sizeof(int) * (size_t)next_n);
  batch_n = next_n;
  next_n = 0;
  if (fdatasync(sync_fd) != 0) die("fdatasync");
  for (int i = 0; i < batch_n; i++) {
    int fd = batch[i];
    struct conn* c = conns[fd];
    if (!c || c->left <= 0) continue;  // closed while waiting (its fd perhaps reused)
    if (--c->left > 0) {
      write_record(fd);
    } else {
      answer(fd);
      start_request(fd);
    }
  }
}

static void open_sync_file(const char* path) {
  sync_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (sync_fd < 0) die(path);
  static char zeros[1 << 20];
  for (int i = 0; i < kOverwriteBytes / (int)sizeof zeros; i++)
    if (write(sync_fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) die("zeros");
  if (fsync(sync_fd) != 0) die("fsync");
}

static int listen_on(const char* port) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr*)&a, sizeof a) != 0 || listen(ls, 4096) != 0) die("listen");
  return ls;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s PORT SYNCS SYNC_FILE BODY_FILE\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  syncs = atoi(argv[2]);
  open_sync_file(argv[3]);
  load_response(argv[4], "grouped-origin");
  int ls = listen_on(argv[1]);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev) != 0) die("epoll");
  printf("listening on %s\n", argv[1]);
  fflush(stdout);
  struct epoll_event evs[256];
  for (;;) {
    // Waits only when no write is waiting for its fdatasync.
    int n = epoll_wait(ep, evs, 256, next_n > 0 ? 0 : -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == ls) {
        on_accept(ep, ls);
      } else if (conns[fd]) {
        on_readable(fd);
      }
    }
    if (next_n > 0) commit();
  }
}
