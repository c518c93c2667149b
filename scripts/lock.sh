#!/usr/bin/env bash
# The lock of README's set-up on this CPU machine: every package version, with its hashes, that
# `pip install torch==2.13.0 -e ".[dev]"` installs, compiled by uv from pyproject.toml (dev extra)
# and requirements/cpu.in (torch's CPU build, from the folder PIP_FIND_LINKS names, as pip takes it
# there). docs/training.md says why uv.
#
#   bash scripts/lock.sh           rewrite requirements/cpu.lock (after changing pyproject.toml)
#   bash scripts/lock.sh --check   is it current with pyproject.toml? (.ci/run asks)
#
# The versions already in the lock are kept where pyproject.toml still allows them (uv reads the
# output file's pins as preferences), so a new release on PyPI does not make the lock stale.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/cpu.lock

# The folder holding torch's CPU wheel: where pip finds it for README's set-up (PIP_FIND_LINKS);
# uv reads no pip configuration, so it is passed on by hand, and not written into the lock.
: "${PIP_FIND_LINKS:?set PIP_FIND_LINKS to the folder holding the torch 2.13.0 CPU wheel (torch-2.13.0+cpu-*.whl)}"

compile_into() {
  uv pip compile pyproject.toml requirements/cpu.in --extra dev --generate-hashes \
    --find-links "$PIP_FIND_LINKS" --python-version 3.11 \
    --custom-compile-command "bash scripts/lock.sh" --quiet --output-file "$1"
}

scratch=$(mktemp -d requirements/.lock.XXXXXX)  # beside the lock: the new one replaces it whole
trap 'rm -rf "$scratch"' EXIT
[[ -f $LOCK ]] && cp "$LOCK" "$scratch/cpu.lock"
compile_into "$scratch/cpu.lock"
if [[ ${1:-} == --check ]]; then
  if ! cmp -s "$LOCK" "$scratch/cpu.lock"; then
    echo "requirements/cpu.lock is not current with pyproject.toml: run \`bash scripts/lock.sh\` and commit requirements/cpu.lock." >&2
    exit 1
  fi
  echo "requirements/cpu.lock is current with pyproject.toml."
else
  mv "$scratch/cpu.lock" "$LOCK"
  echo "Wrote $LOCK."
fi
