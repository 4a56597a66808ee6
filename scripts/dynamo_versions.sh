#!/usr/bin/env bash
# Opt-in job (not in the default test command or CI): run the Dynamo proofs of the DYN rules on
# each torch release they are stated to hold on (`torch_proven`, the table's `proven`), each in its
# own venv. A venv is made on first use: `pip install torch==<release>.0`, xlalint editable with
# --no-deps, and the few packages the proofs import. Usage:
#   scripts/dynamo_versions.sh                 # torch 2.11 and 2.13, venvs under .venvs/
#   TORCH_RELEASES="2.11" scripts/dynamo_versions.sh
#   VENV_2_11=/path/to/venv scripts/dynamo_versions.sh   # reuse a venv that has that torch
# Extra pip arguments (an index such as https://download.pytorch.org/whl/cpu) go in PIP_TORCH_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
PROOFS=(tests/rules/test_dynamo_rules.py tests/rules/test_dynamo_versions.py tests/test_compile_example.py
        tests/test_compiled_analysis.py)
DEPS=(pytest numpy libcst click pathspec pyyaml hypothesis)
status=0
for release in ${TORCH_RELEASES:-2.11 2.13}; do
    var="VENV_${release//./_}"
    venv=${!var:-.venvs/torch-$release}
    if [ ! -x "$venv/bin/python" ]; then
        echo "== making $venv (torch==$release.0)"
        "$PYTHON" -m venv "$venv"
        # shellcheck disable=SC2086
        "$venv/bin/pip" install -q "torch==$release.0" ${PIP_TORCH_ARGS:-}
        "$venv/bin/pip" install -q "${DEPS[@]}"
        "$venv/bin/pip" install -q --no-deps -e .
    fi
    have=$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("torch"))')
    case "$have" in
        "$release".*) ;;
        *) echo "$venv has torch $have, not $release" >&2; exit 2 ;;
    esac
    echo "== torch $have ($venv)"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs "${PROOFS[@]}" | tail -n 12 || status=1
done
exit $status
