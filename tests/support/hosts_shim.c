// A test hosts file for one gateway process (LD_PRELOAD): getaddrinfo() of a name listed in the
// file named by IDEMGATE_TEST_HOSTS ("ADDRESS NAME" lines, as /etc/hosts) resolves that address.
// The file is read on every call, so a test changes a name's address by rewriting it (a DNS
// change). Other names go to the real getaddrinfo.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*getaddrinfo_fn)(const char*, const char*, const struct addrinfo*, struct addrinfo**);

// The address listed for `node` in the test hosts file, copied to `out`; 0 when none.
static int Lookup(const char* node, char* out, size_t size) {
  const char* path = getenv("IDEMGATE_TEST_HOSTS");
  if (path == NULL || node == NULL) return 0;
  FILE* file = fopen(path, "r");
  if (file == NULL) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, file) != NULL) {
    char address[256], name[256];
    if (sscanf(line, "%255s %255s", address, name) == 2 && strcmp(name, node) == 0) {
      snprintf(out, size, "%s", address);
      found = 1;
    }
  }
  fclose(file);
  return found;
}

int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                struct addrinfo** res) {
  static getaddrinfo_fn real = NULL;
  if (real == NULL) real = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
  char address[256];
  if (Lookup(node, address, sizeof address)) return real(address, service, hints, res);
  return real(node, service, hints, res);
}
