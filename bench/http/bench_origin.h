// SPDX-License-Identifier: Apache-2.0
// What the benchmark's C origins share (synced_origin.c, grouped_origin.c): the answer they give
// every request (201 and the benchmark's JSON body, keep-alive), how they find where a request
// ends, and how they fail. Each is compiled alone with cc, so everything here is static.
#ifndef IDEMGATE_BENCH_ORIGIN_H
#define IDEMGATE_BENCH_ORIGIN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static char response[4096];
static size_t response_len;

static void die(const char* what) {
  perror(what);
  exit(1);
}

// The length of the first complete request in buf[0..n), or 0 while it is incomplete.
static size_t request_length(const char* buf, size_t n) {
  const char* end = memmem(buf, n, "\r\n\r\n", 4);
  if (!end) return 0;
  size_t head = (size_t)(end - buf) + 4;
  size_t body = 0;
  for (const char* line = buf; line < end;) {
    const char* eol = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
    if (eol - line > 15 && strncasecmp(line, "content-length:", 15) == 0)
      body = strtoul(line + 15, NULL, 10);
    line = eol + 2;
  }
  return n >= head + body ? head + body : 0;
}

// Fills response: the head (Server: `server`) and BODY_FILE's bytes.
static void load_response(const char* body_file, const char* server) {
  char body[2048];
  FILE* f = fopen(body_file, "r");
  if (!f) die(body_file);
  size_t n = fread(body, 1, sizeof body, f);
  fclose(f);
  int head = snprintf(response, sizeof response,
                      "HTTP/1.1 201 Created\r\nServer: %s\r\n"
                      "Date: Sun, 06 Dec 2026 00:00:00 GMT\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: keep-alive\r\n\r\n",
                      server, n);
  if (head < 0 || (size_t)head + n > sizeof response) die("response too large");
  memcpy(response + head, body, n);
  response_len = (size_t)head + n;
}

#endif
