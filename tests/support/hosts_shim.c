// SPDX-License-Identifier: Apache-2.0
// A test hosts file for one gateway process (LD_PRELOAD): getaddrinfo() of a name listed in the
// file named by IDEMGATE_TEST_HOSTS ("ADDRESS NAME" lines, as /etc/hosts) resolves to the
// addresses listed for it, in order. The file is read on every call, so a test changes a name's
// addresses by rewriting it (a DNS change). Other names go to the real getaddrinfo.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*getaddrinfo_fn)(const char*, const char*, const struct addrinfo*, struct addrinfo**);

int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                struct addrinfo** res) {
  static getaddrinfo_fn real = NULL;
  if (real == NULL) real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
  const char* path = getenv("IDEMGATE_TEST_HOSTS");
  FILE* file = path != NULL && node != NULL ? fopen(path, "r") : NULL;
  if (file == NULL) return real(node, service, hints, res);
  // glibc's freeaddrinfo frees node by node, so the lists of several calls can be chained.
  struct addrinfo* head = NULL;
  struct addrinfo** tail = &head;
  char line[512];
  while (fgets(line, sizeof line, file) != NULL) {
    char address[256], name[256];
    struct addrinfo* found = NULL;
    if (sscanf(line, "%255s %255s", address, name) != 2 || strcmp(name, node) != 0) continue;
    if (real(address, service, hints, &found) != 0) continue;
    *tail = found;
    while (*tail != NULL) tail = &(*tail)->ai_next;
  }
  fclose(file);
  if (head == NULL) return real(node, service, hints, res);
  *res = head;
  return 0;
}
