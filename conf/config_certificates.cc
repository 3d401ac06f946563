// SPDX-License-Identifier: Apache-2.0
// [[listen.certificates]] (see config_certificates.h).
#include "conf/config_certificates.h"

#include <string>
#include <vector>

namespace idemgate::conf {

void ReadCertificates(const Context& ctx, Config* config) {
  Config::Listen& listen = config->listen;
  listen.certificate_files.clear();
  if (!listen.tls_cert.empty()) listen.certificate_files = {listen.tls_cert, listen.tls_key};
  const toml::table* section = (*ctx.root)["listen"].as_table();
  const toml::node* node = section == nullptr ? nullptr : section->get("certificates");
  if (node == nullptr) return;
  const toml::array* array = node->as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    throw ConfigError(FormatError(ctx.file, node->source().begin.line, "listen.certificates",
                                  "expected [[listen.certificates]] tables (cert, key), got " +
                                      std::string(TypeName(*node))));
  }
  for (size_t i = 0; i < array->size(); ++i) {
    const std::string name = "listen.certificates[" + std::to_string(i + 1) + "]";
    SectionReader r(array->get(i)->as_table(), name, ctx.file, {"cert", "key"});
    r.RejectUnknownKeys();
    std::string files[2];
    for (int k = 0; k < 2; ++k) {
      const char* key = k == 0 ? "cert" : "key";
      if (!r.String(key, &files[k]) || files[k].empty()) {
        r.Fail(key, "is required (a PEM file: each entry has its cert and its key)");
      }
      files[k] = ctx.Resolve(files[k]);
      std::string data, why;
      if (!ReadWholeFile(files[k], &data, &why)) {
        r.Fail(key, "cannot read \"" + files[k] + "\": " + why);
      }
      if (data.empty()) r.Fail(key, "the file \"" + files[k] + "\" is empty");
    }
    listen.certificate_files.push_back(files[0]);
    listen.certificate_files.push_back(files[1]);
  }
}

}  // namespace idemgate::conf
