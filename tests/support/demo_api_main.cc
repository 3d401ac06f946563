// demo-payment-api: the demo payment API as a program (README "What a client sees"), stopped by
// SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/support/demo_api.h"

namespace {

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --port N [--host 127.0.0.1] [--delay-ms D]\n"
               "          [--pg-dsn DSN [--no-fence] [--hold-first-ms H]]\n"
               "  --pg-dsn: intents go to that PostgreSQL database (the gateway's), each in a\n"
               "  transaction that calls idemgate_fence first (--no-fence: it does not)\n",
               argv0);
}

bool ParseInt(const char* s, long max, long* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v > max) return false;
  *out = v;
  return true;
}

// Fills `options` from argv; false (after a message) on anything unknown or malformed.
bool ParseArgs(int argc, char** argv, idemgate::test::DemoApi::Options* options) {
  bool have_port = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg == "--no-fence") {
      options->fence = false;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    long n = 0;
    if (arg == "--port" && ParseInt(value, 65535, &n)) {
      options->port = static_cast<uint16_t>(n);
      have_port = true;
    } else if (arg == "--delay-ms" && ParseInt(value, 3'600'000, &n)) {
      options->delay_ms = static_cast<int>(n);
    } else if (arg == "--hold-first-ms" && ParseInt(value, 3'600'000, &n)) {
      options->hold_first_ms = static_cast<int>(n);
    } else if (arg == "--pg-dsn") {
      options->pg_dsn = value;
    } else if (arg == "--host") {
      options->host = value;
    } else {
      std::fprintf(stderr, "bad argument: %s %s\n", arg.c_str(), value);
      return false;
    }
  }
  return have_port;
}

}  // namespace

int main(int argc, char** argv) {
  idemgate::test::DemoApi::Options options;
  if (!ParseArgs(argc, argv, &options)) {
    Usage(argv[0]);
    return 2;
  }
  // Block the stop signals before any thread starts, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  idemgate::test::DemoApi api;
  if (!api.Start(options)) {
    std::fprintf(stderr, "cannot listen on %s:%u: %s\n", options.host.c_str(), options.port,
                 std::strerror(errno));
    return 1;
  }
  std::printf("listening on %s:%u\n", options.host.c_str(), api.port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  api.Stop();
  std::printf("stopped by signal %d after %lld executions\n", sig,
              static_cast<long long>(api.executions()));
  return 0;
}
