#!/usr/bin/env bash
# Clone the public repositories holding CANN's headers, each at the commit opgen was checked
# against (targets/ascend/cann_headers.py PINNED), into one folder for OPGEN_CANN_HEADERS:
#   scripts/fetch_cann_headers.sh [DIR]      # default: cann-headers
#   OPGEN_CANN_HEADERS=$PWD/cann-headers python -m pytest -q -n 0 tests/test_ascend_cann_headers.py
# Needs git and network; a shallow fetch of one commit each (GitHub serves a commit by its id).
# A folder already holding a repository at its pinned commit is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-cann-headers}
mkdir -p "$DIR"
python3 - <<'EOF' | while read -r name url commit; do
import importlib.util, pathlib
spec = importlib.util.spec_from_file_location("cann_headers", pathlib.Path("targets/ascend/cann_headers.py"))
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
for name, (url, commit) in module.PINNED.items():
    print(name, url, commit)
EOF
    dest="$DIR/$name"
    if [ -d "$dest/.git" ] && [ "$(git -C "$dest" rev-parse HEAD)" = "$commit" ]; then
        echo "$name: already at ${commit:0:12}"
        continue
    fi
    rm -rf "$dest"
    git init -q "$dest"
    git -C "$dest" fetch -q --depth 1 "$url" "$commit"
    git -C "$dest" checkout -q FETCH_HEAD
    echo "$name: $url @ ${commit:0:12}"
done
echo "export OPGEN_CANN_HEADERS=$(cd "$DIR" && pwd)"
