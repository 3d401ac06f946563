// SPDX-License-Identifier: Apache-2.0
// [[listen.certificates]]: more certificate and key pairs for the client-facing listener, chosen
// by the client's SNI (the first pair whose certificate names the host; listen.tls_cert and
// tls_key, when set, come first). The first pair is the default: a client that sends no SNI,
// or a name no certificate has, gets it.
#pragma once

#include "conf/config.h"
#include "conf/config_reader.h"

namespace idemgate::conf {

// Fills config->listen.certificate_files (cert, key, cert, key, ...) from listen.tls_cert /
// tls_key and every [[listen.certificates]] table (cert and key both required, paths relative
// to the config file, readable and not empty). Throws ConfigError naming the entry and the key.
void ReadCertificates(const Context& ctx, Config* config);

}  // namespace idemgate::conf
