// idemgate-config-reference: prints the configuration reference generated from the key table,
// as Markdown (docs/configuration.md) or as the man page idemgate.toml(5).
//   idemgate-config-reference md
//   idemgate-config-reference man VERSION DATE
#include <cstdio>
#include <string>

#include "conf/config_reference.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  std::string text;
  if (mode == "md" && argc == 2) {
    text = idemgate::conf::ConfigReferenceMarkdown();
  } else if (mode == "man" && argc == 4) {
    text = idemgate::conf::ConfigReferenceMan(argv[2], argv[3]);
  } else {
    fputs("usage: idemgate-config-reference md | man VERSION DATE\n", stderr);
    return 2;
  }
  fwrite(text.data(), 1, text.size(), stdout);
  return ferror(stdout) ? 1 : 0;
}
