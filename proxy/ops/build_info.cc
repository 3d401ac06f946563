#include "proxy/ops/build_info.h"

#include <event2/event.h>
#include <openssl/crypto.h>

#include "store/rocks_version.h"

#ifndef IDEMGATE_VERSION
#define IDEMGATE_VERSION "dev"
#endif
#ifndef IDEMGATE_GIT_COMMIT
#define IDEMGATE_GIT_COMMIT "unknown"
#endif

namespace idemgate {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{IDEMGATE_VERSION, IDEMGATE_GIT_COMMIT, event_get_version(),
                              OpenSSL_version(OPENSSL_VERSION), RocksDbVersion()};
  return info;
}

std::string VersionText() {
  const BuildInfo& b = GetBuildInfo();
  return "idemgate " + b.version + " (commit " + b.commit + ")\n" +  //
         "  libevent " + b.libevent + "\n" +                         //
         "  " + b.openssl + "\n" +                                   //
         "  RocksDB " + b.rocksdb + "\n";
}

}  // namespace idemgate
