#!/usr/bin/env bash
# scripts/spdx on a scratch git repository: --check lists the source files without the SPDX line
# (and not the data files), a run adds it as the first line (after a shebang, keeping the mode),
# a second run changes nothing, and --check then passes.
# usage: spdx_test.sh SOURCE_DIR
set -euo pipefail
spdx="$1/scripts/spdx"
fail() { echo "FAIL: $*" >&2; exit 1; }
repo="$(mktemp -d)"
trap 'rm -rf "$repo"' EXIT
cd "$repo"
git init -q .
mkdir -p src scripts conf
printf 'int main() { return 0; }\n' >src/main.cc
printf '// SPDX-License-Identifier: Apache-2.0\n#pragma once\n' >src/done.h
printf '#!/usr/bin/env bash\necho hi\n' >scripts/run && chmod 755 scripts/run
printf 'project(x)\n' >CMakeLists.txt
printf 'print(1)\n' >tool.py
printf '[listen]\naddress = "x"\n' >conf/sample.toml
printf '# Title\n' >README.md
printf 'untracked\n' >src/untracked.cc
git add src/main.cc src/done.h scripts/run CMakeLists.txt tool.py conf/sample.toml README.md

out="$("$spdx" --root . --check)" && fail "--check passed with files lacking the line"
for f in src/main.cc scripts/run CMakeLists.txt tool.py; do
  grep -qx "no SPDX line: $f" <<<"$out" || fail "--check did not list $f: $out"
done
for f in src/done.h conf/sample.toml README.md src/untracked.cc; do
  grep -q "$f" <<<"$out" && fail "--check listed $f: $out"
done

"$spdx" --root . >/dev/null
[ "$(head -1 src/main.cc)" = "// SPDX-License-Identifier: Apache-2.0" ] || fail "main.cc: $(head -1 src/main.cc)"
[ "$(sed -n 2p src/main.cc)" = "int main() { return 0; }" ] || fail "main.cc lost its first line"
[ "$(head -1 scripts/run)" = "#!/usr/bin/env bash" ] || fail "the shebang moved"
[ "$(sed -n 2p scripts/run)" = "# SPDX-License-Identifier: Apache-2.0" ] || fail "scripts/run"
[ "$(stat -c %a scripts/run)" = 755 ] || fail "scripts/run lost its mode"
[ "$(head -1 CMakeLists.txt)" = "# SPDX-License-Identifier: Apache-2.0" ] || fail "CMakeLists.txt"
[ "$(head -1 tool.py)" = "# SPDX-License-Identifier: Apache-2.0" ] || fail "tool.py"
[ "$(head -1 conf/sample.toml)" = "[listen]" ] || fail "a data file was changed"
[ "$(grep -c SPDX src/done.h)" = 1 ] || fail "done.h got a second line"
[ "$(cat src/untracked.cc)" = untracked ] || fail "an untracked file was changed"

before="$(git diff | sha256sum)"
"$spdx" --root . | grep -q "added the SPDX line to 0 files" || fail "the second run added lines"
[ "$(git diff | sha256sum)" = "$before" ] || fail "the second run changed files"
"$spdx" --root . --check >/dev/null || fail "--check failed after the run"
echo "spdx self-test: OK"
