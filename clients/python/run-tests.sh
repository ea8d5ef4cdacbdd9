#!/usr/bin/env bash
# The Python client's tests: a venv in clients/python/.venv (made once, gitignored), the client
# installed editable with its [test] extra (pytest, pandas), then pytest. Arguments go to pytest
# (e.g. `-m "not live"` for the offline tests alone, `-k events`, `-x`).
#
# The live tests (tests/test_live.py) build a namespace testbed with the project's own binary
# ($MGRP_BIN, default target/release/mgrp, built here if missing) and run two agents on it: they
# need root, iproute2 (ip, tc) and the kernel's namespaces; without root they fail and say so.
#
# Needs: python3 >= 3.9 with the venv module (Debian/Ubuntu: apt-get install python3-venv), and
# the first time (or after pyproject.toml changes) access to a package index for pip (PyPI, or
# PIP_INDEX_URL / PIP_FIND_LINKS): setuptools to build, pytest and pandas to test.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
venv="$here/.venv"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || {
        echo "run-tests.sh: cannot make a venv with $python (Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 1
    }
fi

# Install once per version of pyproject.toml, so that later runs need no network.
stamp="$venv/.mgrp-client-installed"
want="$(cat "$here/pyproject.toml" | cksum)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade "pip>=21.3"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$here[test]"
    echo "$want" >"$stamp"
fi

if [ -z "${MGRP_BIN:-}" ]; then
    export MGRP_BIN="$repo/target/release/mgrp"
    if [ ! -x "$MGRP_BIN" ]; then
        (cd "$repo" && "${CARGO:-cargo}" build --release -p mgrp-cli)
    fi
fi

cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider "$@"
