// SPDX-License-Identifier: Apache-2.0
// Sealing benchmark (SPEC §13): seal, open, and both, of one stored answer (1 KiB body and a few
// headers by default; 64 B and 16 KiB too), as SealedStore does per Complete and per replay.
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "store/sealing.h"

namespace idemgate {
namespace {

std::shared_ptr<const SealKeys> BenchKeys() {
  static std::shared_ptr<const SealKeys> keys = [] {
    std::string dir = (std::filesystem::temp_directory_path() / "idemgate-seal-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) abort();
    const std::string path = dir + "/k.key";
    FILE* f = fopen(path.c_str(), "w");
    fprintf(f, "%s\n", std::string(64, '7').c_str());
    fclose(f);
    chmod(path.c_str(), 0600);
    std::string error;
    auto loaded = LoadSealKeys({{"bench", path}}, "bench", &error);
    std::filesystem::remove_all(dir);
    if (!loaded) abort();
    return loaded;
  }();
  return keys;
}

StoredResponse Answer(size_t body) {
  StoredResponse r;
  r.status = 201;
  r.reason = "Created";
  r.headers = {{"Content-Type", "application/json"},
               {"Location", "/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa"},
               {"Request-Id", "req_8e1d3c2a5b"}};
  r.body.assign(body, 'x');
  return r;
}

const std::string kRecordKey = std::string(32, 's') + "order-7f3a-2026-12-01";

void BM_Seal(benchmark::State& state) {
  auto keys = BenchKeys();
  const StoredResponse answer = Answer(state.range(0));
  for (auto _ : state) {
    auto sealed = SealResponse(*keys->active(), {kRecordKey, 1}, answer);
    benchmark::DoNotOptimize(sealed);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_Open(benchmark::State& state) {
  auto keys = BenchKeys();
  const StoredResponse sealed =
      *SealResponse(*keys->active(), {kRecordKey, 1}, Answer(state.range(0)));
  StoredResponse out;
  std::string key_id;
  for (auto _ : state) {
    if (OpenResponse(*keys, {kRecordKey, 1}, sealed, &out, &key_id) != OpenResult::kOk) abort();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_SealAndOpen(benchmark::State& state) {
  auto keys = BenchKeys();
  const StoredResponse answer = Answer(state.range(0));
  StoredResponse out;
  std::string key_id;
  for (auto _ : state) {
    auto sealed = SealResponse(*keys->active(), {kRecordKey, 1}, answer);
    if (OpenResponse(*keys, {kRecordKey, 1}, *sealed, &out, &key_id) != OpenResult::kOk) abort();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

BENCHMARK(BM_Seal)->Arg(64)->Arg(1024)->Arg(16384);
BENCHMARK(BM_Open)->Arg(64)->Arg(1024)->Arg(16384);
BENCHMARK(BM_SealAndOpen)->Arg(1024);

}  // namespace
}  // namespace idemgate

BENCHMARK_MAIN();
