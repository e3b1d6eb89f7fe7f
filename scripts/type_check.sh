#!/usr/bin/env bash
# The types tier: basedpyright (basic mode, [tool.pyright] in pyproject.toml) over gpu_envs/.
# The package type-checks at 0 errors (scripts/type_errors_baseline.txt holds 0): any error fails the
# tier. (The baseline file made the count a ratchet while issue 24 item 5's errors were being fixed:
# it fails when the errors exceed it and asks for it to be lowered when they fall below it.) Prints
# the errors by file either way.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
baseline="$(cat scripts/type_errors_baseline.txt)"
report="$(mktemp)"
.venv/bin/basedpyright --pythonpath .venv/bin/python --outputjson gpu_envs > "$report" || true
.venv/bin/python - "$report" "$baseline" <<'PY'
import collections, json, sys
report = json.load(open(sys.argv[1]))
baseline = int(sys.argv[2])
errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
by_file = collections.Counter(d["file"].split("gpu_envs/", 1)[-1] for d in errors)
for name, count in by_file.most_common():
    print(f"{count:4d}  gpu_envs/{name}")
print(f"basedpyright: {len(errors)} errors (baseline {baseline})")
if len(errors) > baseline:
    sys.exit(f"{len(errors) - baseline} new type error(s): run .venv/bin/basedpyright gpu_envs and fix them")
if len(errors) < baseline:
    sys.exit(f"{baseline - len(errors)} fewer errors than the baseline: write {len(errors)} into scripts/type_errors_baseline.txt")
PY
