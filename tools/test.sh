#!/usr/bin/env bash
# Sets up fuserc with its test extra and runs every test (lit + pytest + e2e
# under mpiexec on the CPU backend). torch is installed first, pinned, so that
# no other torch build is pulled.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "tools/test.sh: installing torch==2.13.0 and fuserc[test] (the first time: a few minutes)" >&2
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[test]'
echo "tools/test.sh: running the tests (about 15 minutes on 2 cores)" >&2
exec python3 -m pytest -q -p no:cacheprovider tests "$@"
