// SPDX-License-Identifier: Apache-2.0
// PgStore's start-up: connect once (blocking; before any event loop runs), create the schema
// when absent, refuse a version this gateway does not know (SPEC M7).
#pragma once

#include <cstdint>
#include <string>

namespace idemgate::pg {

bool PrepareSchema(const std::string& dsn, uint64_t* records, std::string* error);

}  // namespace idemgate::pg
