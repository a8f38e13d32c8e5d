#!/usr/bin/env bash
# Every test, on a fresh Debian machine: installs what the tests need
# (sqlite3, sqldiff, PostgreSQL 15 with wal2json from Debian's packages),
# then runs the whole suite. Server tests start and stop their own servers.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v sqldiff >/dev/null 2>&1 || need+=(sqlite3-tools)
# PostgreSQL 15 with wal2json: the server tests start throwaway clusters.
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
[ -e /usr/lib/postgresql/15/lib/wal2json.so ] || need+=(postgresql-15-wal2json)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]} from Debian's packages"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The example application writes the sample databases some tests use.
cargo build --quiet --example sample_app
cargo test --no-fail-fast "$@"
