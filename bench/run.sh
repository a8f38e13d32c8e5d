#!/usr/bin/env bash
# The benchmark harness: measures the tools against named baselines run on the
# same machine in the same run, and prints markdown tables (results recorded
# in docs/BENCHMARKS.md). Benchmarks are a separate command, never a test.
#
#   bash bench/run.sh [stream|sqlite|backfill|writers|postgres|largetxn|identity|clickhouse|cluster|all]   # default: all
#   (writers: the application's write latency during a PostgreSQL backfill;
#   (backfill: the SQLite and the PostgreSQL backfill against the snapshot;
#   largetxn: one large PostgreSQL transaction, protocol 1 against streaming;
#   identity: one update workload under FULL and under the default replica identity)
#
# Scratch data goes to bench/work/ (git-ignored; under 1 GB at the default
# sizes). Progress goes to standard error, the tables to standard output.
# Short measurements are run BENCH_RUNS times (default 3) and the median is
# reported. Sizes can be changed through the environment:
#   BENCH_BIG_MB=160 BENCH_SMALL_MB=40       stream section input sizes (MB = 10^6 bytes)
#   BENCH_BACKLOG_EVENTS=150000              stream section: single-row inserts of the backlog batch
#   BENCH_WRITE_ROWS=200000                  application writes, with and without capture
#   BENCH_APPLY_ROWS=500000                  rows applied into the projection
#   BENCH_AUDIT_ROWS=1000000                 rows audited
#   BENCH_BACKFILL_ROWS=1000000              rows loaded by backfill and by snapshot
#   BENCH_LARGE_ROWS=2000000                 largetxn: rows of the one UPDATE
#   BENCH_IDENTITY_ROWS=20000                identity: rows of the wide table, each updated once
#   BENCH_PG_ROWS=100000 BENCH_PG_CHANGES=300000   postgres: rows updated, changes decoded
#   BENCH_PG_SNAPSHOT_ROWS=1000000           postgres: rows of the snapshot table
#   BENCH_CH_ROWS=1000000                    clickhouse: rows of the applied snapshot
#   BENCH_CH_CHANGES=300000                  clickhouse: changes captured from SQLite end to end
#   BENCH_CLUSTER_ROWS=300000                cluster: snapshot rows applied into the 2 x 2 ClickHouse cluster
# Needs jq, GNU time (/usr/bin/time), sqlite3 and sqldiff; installs the missing
# ones from Debian's packages (as root, or through sudo). The postgres section
# needs Debian's postgresql-15 and postgresql-15-wal2json (run as root: the
# throwaway cluster runs as the postgres user), the clickhouse section Debian's
# clickhouse-server and clickhouse-client (the cluster section also zookeeper);
# all need curl and python3 (to find
# free ports). Each starts its own server in bench/work and stops it by pid at
# the end, whatever way the run ends.
set -euo pipefail
cd "$(dirname "$0")/.."

section=${1:-all}
case $section in
  stream | sqlite | backfill | writers | postgres | largetxn | identity | clickhouse | cluster | all) ;;
  *)
    echo "usage: bench/run.sh [stream|sqlite|backfill|writers|postgres|largetxn|identity|clickhouse|cluster|all]" >&2
    exit 2
    ;;
esac
RUNS=${BENCH_RUNS:-3}
BIG_MB=${BENCH_BIG_MB:-160}
BACKLOG_EVENTS=${BENCH_BACKLOG_EVENTS:-150000}
SMALL_MB=${BENCH_SMALL_MB:-40}
WRITE_ROWS=${BENCH_WRITE_ROWS:-200000}
APPLY_ROWS=${BENCH_APPLY_ROWS:-500000}
AUDIT_ROWS=${BENCH_AUDIT_ROWS:-1000000}
PG_ROWS=${BENCH_PG_ROWS:-100000}
PG_CHANGES=${BENCH_PG_CHANGES:-300000}
PG_SNAP_ROWS=${BENCH_PG_SNAPSHOT_ROWS:-1000000}
PG_BIN=${BENCH_PG_BIN:-/usr/lib/postgresql/15/bin}
CH_ROWS=${BENCH_CH_ROWS:-1000000}
CH_CHANGES=${BENCH_CH_CHANGES:-300000}
CLU_ROWS=${BENCH_CLUSTER_ROWS:-300000}
# Goals (the fast-path issue raised the stream, apply and snapshot ones).
GOAL_JQ_RATIO=15 GOAL_OTHER_RATIO=10 GOAL_RSS_MB=32 GOAL_INSERT=2 GOAL_UPDATE=2.5 GOAL_APPLY=0.6
GOAL_PG_RECV=1.5 GOAL_PG_PEEK=0.8 GOAL_PG_SNAP=0.8 GOAL_CH_APPLY=0.7

log() { printf 'bench: %s\n' "$*" >&2; }

# install_missing PKG...: Debian's packages, as root or through sudo.
install_missing() {
  [ $# -gt 0 ] || return 0
  log "installing $* from Debian's packages"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

need=()
command -v jq >/dev/null 2>&1 || need+=(jq)
[ -x /usr/bin/time ] || need+=(time)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v sqldiff >/dev/null 2>&1 || need+=(sqlite3-tools)
install_missing "${need[@]}"

log "building (release)"
cargo build --release --quiet --bins --examples
B=target/release
E=target/release/examples

# Timings are only comparable on an otherwise idle machine.
busy() { pgrep -x rustc >/dev/null 2>&1 || pgrep -f 'cargo (build|test)' >/dev/null 2>&1; }
if busy; then
  log "warning: a compiler is running; figures will be noisy"
fi

W=bench/work
mkdir -p "$W/tmp"
# The stream tools spool large batches to temporary files: keep those here too.
export TMPDIR=$PWD/$W/tmp
ERR=$W/stderr.log
: >"$ERR"

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
calc() { awk "BEGIN {printf \"$1\", $2}"; }
mb() { calc '%.1f' "$(stat -c %s "$1") / 1e6"; }
met() { if awk "BEGIN {exit !($1)}"; then echo "met"; else echo "**missed**"; fi; }
nothing() { :; }

# measure OUT PREP CMD...: run CMD RUNS times, PREP (untimed) before each, its
# standard output to OUT; @RUN@ in CMD's arguments becomes the run's number
# (0, 1, …). Sets T (median wall seconds), M (median peak RSS, MB), C (median
# CPU seconds, user + system, of CMD and the children it waited for), CU and CS
# (median user and system CPU seconds).
measure() {
  local out=$1 prep=$2
  shift 2
  local ts=() ms=() cs=() us=() ss=() t m u s r a args
  for ((r = 0; r < RUNS; r++)); do
    args=()
    for a in "$@"; do args+=("${a//@RUN@/$r}"); done
    $prep
    if ! /usr/bin/time -f '%e %M %U %S' -o "$W/time.out" "${args[@]}" >"$out" 2>>"$ERR"; then
      log "failed: ${args[*]}"
      tail -n 5 "$ERR" >&2
      exit 1
    fi
    read -r t m u s <"$W/time.out"
    ts+=("$t")
    ms+=("$m")
    cs+=("$(calc '%.2f' "$u + $s")")
    us+=("$u")
    ss+=("$s")
  done
  T=$(median "${ts[@]}")
  M=$(calc '%.1f' "$(median "${ms[@]}") * 1024 / 1e6")
  C=$(median "${cs[@]}")
  CU=$(median "${us[@]}")
  CS=$(median "${ss[@]}")
}

echo "## Run"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(free -g | awk '/^Mem:/ {print $2}') GB memory, Linux $(uname -r)"
echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (src/ modified)')"
echo "- rustc: $(rustc --version | cut -d' ' -f2), SQLite linked into mooncdc: $($E/bench_sqlite version), Debian sqlite3 shell: $(sqlite3 --version | cut -d' ' -f1), $(jq --version)"
echo "- median of $RUNS runs per figure; MB = 10^6 bytes; peak RSS from GNU time (%M)"
if busy; then echo "- warning: other compilations were running"; fi
echo

stream_section() {
  local small=$W/batch-$SMALL_MB.jsonl big=$W/batch-$BIG_MB.jsonl
  log "generating $SMALL_MB MB and $BIG_MB MB batches"
  $E/gen_batch "$SMALL_MB" "$small" 2>>"$ERR"
  $E/gen_batch "$BIG_MB" "$big" 2>>"$ERR"
  local events
  events=$(($(wc -l <"$big") - 2))
  local compacted
  compacted=$(($($B/mooncdc-compact "$big" | wc -l) - 2))

  clear_pieces() { rm -rf "$W/pieces"; }
  local names=("jq -c . (baseline)" "mooncdc-merge" "mooncdc-compact" "mooncdc-split --max-events 10000"
    "mooncdc-split --max-events 10000 --output-dir DIR")
  run_tool() { # INDEX FILE
    case $1 in
      0) measure /dev/null nothing jq -c . "$2" ;;
      1) measure /dev/null nothing $B/mooncdc-merge "$2" ;;
      2) measure /dev/null nothing $B/mooncdc-compact "$2" ;;
      3) measure /dev/null nothing $B/mooncdc-split --max-events 10000 "$2" ;;
      4) measure /dev/null clear_pieces $B/mooncdc-split --max-events 10000 --output-dir "$W/pieces" "$2" ;;
    esac
  }
  local -a t_big m_big m_small cu_big cs_big
  local i
  for i in "${!names[@]}"; do
    log "stream: ${names[$i]} on $BIG_MB MB"
    run_tool "$i" "$big"
    t_big[i]=$T m_big[i]=$M cu_big[i]=$CU cs_big[i]=$CS
    log "stream: ${names[$i]} on $SMALL_MB MB"
    run_tool "$i" "$small"
    m_small[i]=$M
  done
  clear_pieces

  local size
  size=$(mb "$big")
  echo "## Stream tools"
  echo
  echo "Input: one batch of $size MB, $events events on one six-column table"
  echo "(compaction leaves $compacted), written by \`examples/gen_batch.rs\`; output to /dev/null"
  echo "(split --output-dir writes its pieces to bench/work)."
  echo
  echo "| command | wall s | MB/s | vs jq | user CPU s | system CPU s | peak RSS MB | goal: ≥ ${GOAL_JQ_RATIO}× jq | goal: RSS ≤ $GOAL_RSS_MB MB |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
  for i in "${!names[@]}"; do
    local rate ratio g1 g2
    rate=$(calc '%.1f' "$size / ${t_big[i]}")
    ratio=$(calc '%.1f' "${t_big[0]} / ${t_big[i]}")
    if [ "$i" = 0 ]; then
      g1="baseline" g2="(baseline)"
    else
      g1="$(met "${t_big[0]} / ${t_big[i]} >= $GOAL_JQ_RATIO")"
      g2="$(met "${m_big[i]} <= $GOAL_RSS_MB && ${m_small[i]} <= $GOAL_RSS_MB")"
    fi
    echo "| \`${names[$i]}\` | ${t_big[i]} | $rate | ${ratio}× | ${cu_big[i]} | ${cs_big[i]} | ${m_big[i]} | $g1 | $g2 |"
  done
  echo
  echo "Peak RSS against input size (memory must not grow with the input):"
  echo
  echo "| command | RSS at $(mb "$small") MB, MB | RSS at $size MB, MB | growth MB |"
  echo "| --- | ---: | ---: | ---: |"
  for i in "${!names[@]}"; do
    echo "| \`${names[$i]}\` | ${m_small[i]} | ${m_big[i]} | $(calc '%+.1f' "${m_big[i]} - ${m_small[i]}") |"
  done
  echo
  other_spelling_rows "$big"
  backlog_rows
}

# The same batch as another producer writes it: each line re-serialized by
# Python's json.dumps with its defaults (", " and ": " separators, non-ASCII
# as \uXXXX escapes, emoji as surrogate pairs). Not one line is canonical,
# so every event goes through the rewriting path (src/wire/canon.rs) before
# the canonical fast path.
other_spelling_rows() { # CANONICAL-BATCH
  local py=$W/batch-$BIG_MB-python.jsonl
  log "stream: re-serializing the batch with Python's json.dumps"
  python3 -c 'import json, sys
out = sys.stdout
for line in sys.stdin:
    out.write(json.dumps(json.loads(line)) + "\n")' <"$1" >"$py"
  local names=("jq -c . (baseline)" "mooncdc-merge" "mooncdc-compact" "mooncdc-split --max-events 10000")
  local -a t cu m
  local i
  for i in "${!names[@]}"; do
    log "stream: ${names[$i]} on the Python spelling"
    case $i in
      0) measure /dev/null nothing jq -c . "$py" ;;
      1) measure /dev/null nothing $B/mooncdc-merge "$py" ;;
      2) measure /dev/null nothing $B/mooncdc-compact "$py" ;;
      3) measure /dev/null nothing $B/mooncdc-split --max-events 10000 "$py" ;;
    esac
    t[i]=$T cu[i]=$CU m[i]=$M
  done
  # The tools write the canonical spelling: the same bytes as from the original.
  if ! cmp -s <($B/mooncdc-merge "$py") <($B/mooncdc-merge "$1"); then
    log "merge of the Python spelling differs from merge of the original"
    exit 1
  fi
  local size
  size=$(mb "$py")
  echo "The same batch as another producer spells it: every line re-serialized by"
  echo "Python's \`json.dumps\` with its defaults (\`\", \"\` and \`\": \"\` separators, non-ASCII"
  echo "escaped), $size MB; no line is canonical. merge's output is checked to be the"
  echo "same bytes as from the original batch."
  echo
  echo "| command | wall s | MB/s | vs jq | user CPU s | peak RSS MB | goal: ≥ ${GOAL_OTHER_RATIO}× jq |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  for i in "${!names[@]}"; do
    local g
    if [ "$i" = 0 ]; then g="baseline"; else g="$(met "${t[0]} / ${t[i]} >= $GOAL_OTHER_RATIO")"; fi
    echo "| \`${names[$i]}\` | ${t[i]} | $(calc '%.1f' "$size / ${t[i]}") | $(calc '%.1f' "${t[0]} / ${t[i]}")× | ${cu[i]} | ${m[i]} | $g |"
  done
  echo
}

# A catch-up backlog read as one batch: single-row inserts on distinct keys.
# Nothing folds, so compact holds every insert (one could still vanish) until
# its memory cap, then writes out the oldest one per event: the case that was
# quadratic. Compared with merge, which only re-encodes, at N and 2N events.
backlog_rows() {
  gen_inserts() { # N OUT
    awk -v n="$1" 'BEGIN {
      s = "{\"source\":\"bench:backlog\",\"sequence\":\""
      printf "{\"kind\":\"header\",\"format\":\"mooncdc.jsonl.v1\",\"start\":%s0\"},\"high_water\":\"%d\",\"schemas\":[{\"table\":\"t\",\"columns\":[{\"name\":\"id\",\"type\":\"INTEGER\",\"nullable\":false},{\"name\":\"v\",\"type\":\"TEXT\",\"nullable\":true}],\"key\":[\"id\"]}]}\n", s, n
      for (i = 1; i <= n; i++)
        printf "{\"kind\":\"event\",\"event\":{\"sequence\":\"%d\",\"table\":\"t\",\"operation\":\"insert\",\"after\":[[\"integer\",\"%d\"],[\"text\",\"row %d of a backlog of single-row inserts\"]]}}\n", i, i, i
      printf "{\"kind\":\"commit\",\"end\":%s%d\"},\"count\":\"%d\"}\n", s, n, n
    }' >"$2"
  }
  local one=$W/backlog-1.jsonl two=$W/backlog-2.jsonl
  gen_inserts "$BACKLOG_EVENTS" "$one"
  gen_inserts "$((2 * BACKLOG_EVENTS))" "$two"
  local tm1 tm2 tc1 tc2 mc2
  log "stream: backlog of $BACKLOG_EVENTS and $((2 * BACKLOG_EVENTS)) inserts"
  measure /dev/null nothing $B/mooncdc-merge "$one"
  tm1=$T
  measure /dev/null nothing $B/mooncdc-merge "$two"
  tm2=$T
  measure /dev/null nothing $B/mooncdc-compact "$one"
  tc1=$T
  measure /dev/null nothing $B/mooncdc-compact "$two"
  tc2=$T mc2=$M
  echo "A backlog read as one batch: single-row inserts on distinct keys (nothing"
  echo "folds, so compact holds inserts up to its 8 MiB cap and then writes out the"
  echo "oldest per event). Linear means the 2N column is about twice the N column."
  echo
  echo "| command | $BACKLOG_EVENTS events, s | $((2 * BACKLOG_EVENTS)) events, s | 2N / N | compact / merge at 2N | peak RSS at 2N, MB | goal: compact ≤ 2× merge |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  echo "| \`mooncdc-merge\` (baseline) | $tm1 | $tm2 | $(calc '%.2f' "$tm2 / $tm1") | | | baseline |"
  echo "| \`mooncdc-compact\` | $tc1 | $tc2 | $(calc '%.2f' "$tc2 / $tc1") | $(calc '%.2f' "$tc2 / $tm2") | $mc2 | $(met "$tc2 <= 2 * $tm2") |"
  echo
}

sqlite_section() {
  # (a) Application writes with and without capture triggers.
  log "sqlite: application writes, $WRITE_ROWS rows, $RUNS runs per mode"
  local writes
  writes=$($E/bench_sqlite writes "$W/writes" "$WRITE_ROWS" "$RUNS")
  echo "## SQLite capture: application write throughput"
  echo
  echo "Two identical WAL databases, table of five columns (integer key, TEXT, REAL,"
  echo "BLOB, INTEGER); one has capture installed (\`mooncdc::source::sqlite::init\`)."
  echo "$WRITE_ROWS rows inserted, then every row updated (all four non-key columns), in"
  echo "transactions of 1,000 rows, prepared statements (\`examples/bench_sqlite.rs\`)."
  echo
  echo "| synchronous | operation | without capture, rows/s | with capture, rows/s | slowdown | goal |"
  echo "| --- | --- | ---: | ---: | ---: | --- |"
  while IFS=$'\t' read -r sync op plain captured rows; do
    [ "${sync:0:1}" = "#" ] && continue
    local goal=$GOAL_INSERT
    [ "$op" = update ] && goal=$GOAL_UPDATE
    local slow
    slow=$(calc '%.2f' "$captured / $plain")
    echo "| $sync | $op | $(calc '%.0f' "$rows / $plain") | $(calc '%.0f' "$rows / $captured") | ${slow}× | ≤ ${goal}×: $(met "$captured / $plain <= $goal") |"
  done <<<"$writes"
  echo

  # (b) Applying a capture stream of inserts against plain loading of the same rows.
  log "sqlite: $APPLY_ROWS-row source with capture, and its capture stream"
  local src=$W/apply-src.db stream=$W/apply.jsonl
  $E/bench_sqlite source "$src" "$APPLY_ROWS" before
  $B/mooncdc-capture --source "sqlite:$src" >"$stream"
  fresh_proj() { rm -f "$W"/apply-proj.db*; }
  log "sqlite: mooncdc-apply"
  measure /dev/null fresh_proj $B/mooncdc-apply --quiet --target "sqlite:$W/apply-proj.db" "$stream"
  local t_apply=$T m_apply=$M c_apply=$C
  log "sqlite: mooncdc-merge of the same stream (reading and decoding, no SQLite)"
  measure /dev/null nothing $B/mooncdc-merge "$stream"
  local t_merge=$T c_merge=$C m_merge=$M
  local held
  held=$(sqlite3 "$W/apply-proj.db" 'SELECT count(*) FROM items')
  if [ "$held" != "$APPLY_ROWS" ]; then
    log "the projection holds $held rows, expected $APPLY_ROWS"
    exit 1
  fi
  log "sqlite: prepared-insert baseline"
  local ts=() r
  for ((r = 0; r < RUNS; r++)); do
    ts+=("$($E/bench_sqlite insert-baseline "$src" "$W/baseline.db" | cut -f1)")
  done
  local t_loop
  t_loop=$(median "${ts[@]}")
  log "sqlite: sqlite3 shell baseline"
  sqlite3 "$W/baseline.db" .dump >"$W/rows.sql"
  fresh_shell() { rm -f "$W"/shell.db*; }
  measure /dev/null fresh_shell sqlite3 -cmd 'PRAGMA journal_mode = WAL' "$W/shell.db" ".read $W/rows.sql"
  local t_shell=$T m_shell=$M c_shell=$C

  echo "## SQLite projection: apply throughput"
  echo
  echo "$APPLY_ROWS inserts of the same five-column rows: a capture stream read by"
  echo "\`mooncdc-capture\` from a source with capture installed ($(mb "$stream") MB of JSONL, one"
  echo "batch, so one transaction), applied to a new projection, against loading the same"
  echo "rows into a new WAL database in one transaction."
  echo
  echo "| loader | wall s | rows/s | vs prepared-insert loop | CPU s | peak RSS MB | goal: ≥ ${GOAL_APPLY}× the loop |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: rusqlite prepared INSERT loop, one transaction (rows already in memory; times the loop and commit) | $t_loop | $(calc '%.0f' "$APPLY_ROWS / $t_loop") | 1.00× | | | baseline |"
  echo "| baseline: \`sqlite3\` shell reading its own \`.dump\` (SQL text, one transaction) | $t_shell | $(calc '%.0f' "$APPLY_ROWS / $t_shell") | $(calc '%.2f' "$t_loop / $t_shell")× | $c_shell | $m_shell | (baseline) |"
  echo "| reference: \`mooncdc-merge FILE > /dev/null\` (reads, decodes and re-encodes the same stream; no SQLite) | $t_merge | $(calc '%.0f' "$APPLY_ROWS / $t_merge") | $(calc '%.2f' "$t_loop / $t_merge")× | $c_merge | $m_merge | (reference) |"
  echo "| \`mooncdc-apply --target sqlite:… FILE\` (whole process) | $t_apply | $(calc '%.0f' "$APPLY_ROWS / $t_apply") | $(calc '%.2f' "$t_loop / $t_apply")× | $c_apply | $m_apply | $(met "$t_loop / $t_apply >= $GOAL_APPLY") |"
  echo
  rm -f "$W"/apply-proj.db* "$W"/baseline.db* "$W"/shell.db* "$W/rows.sql"

  # (c) Audit of a large table.
  log "sqlite: $AUDIT_ROWS-row source, snapshot into its projection"
  local asrc=$W/audit-src.db aproj=$W/audit-proj.db
  rm -f "$aproj"*
  $E/bench_sqlite source "$asrc" "$AUDIT_ROWS" after
  local t0 t_snap
  t0=$(date +%s.%N)
  $B/mooncdc-snapshot --quiet --source "sqlite:$asrc" | $B/mooncdc-apply --quiet --target "sqlite:$aproj" 2>>"$ERR"
  t_snap=$(calc '%.2f' "$(date +%s.%N) - $t0")
  log "sqlite: mooncdc-audit"
  measure "$W/audit.out" nothing $B/mooncdc-audit --quiet --source "sqlite:$asrc" --target "sqlite:$aproj"
  local t_audit=$T m_audit=$M
  if [ "$(tail -n 1 "$W/audit.out")" != equal ]; then
    log "the audit did not say equal"
    exit 1
  fi
  log "sqlite: sqldiff baseline"
  measure "$W/sqldiff.out" nothing sqldiff --table items "$asrc" "$aproj"
  local t_diff=$T m_diff=$M
  if [ -s "$W/sqldiff.out" ]; then
    log "sqldiff found differences"
    exit 1
  fi

  echo "## SQLite audit"
  echo
  echo "A source table of $AUDIT_ROWS five-column rows with capture installed, loaded into a"
  echo "projection by \`mooncdc-snapshot | mooncdc-apply\` (one run: ${t_snap} s, $(calc '%.0f' "$AUDIT_ROWS / $t_snap") rows/s),"
  echo "then compared row by row. No numeric goal; memory must not depend on the table size."
  echo
  echo "| command | wall s | rows/s | peak RSS MB |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| baseline: \`sqldiff --table items SRC PROJ\` (SQLite's own diff tool) | $t_diff | $(calc '%.0f' "$AUDIT_ROWS / $t_diff") | $m_diff |"
  echo "| \`mooncdc-audit --source sqlite:SRC --target sqlite:PROJ\` | $t_audit | $(calc '%.0f' "$AUDIT_ROWS / $t_audit") | $m_audit |"
  echo
}

# A writer beside a load: inserts into its own table (not captured) every
# 10 ms until STOP exists, then prints the longest an insert waited (ms) and
# the largest the source's WAL file grew (MB).
probe_writer() { # DB STOP
  python3 - "$1" "$2" <<'PY'
import os, sqlite3, sys, time
db, stop = sys.argv[1], sys.argv[2]
c = sqlite3.connect(db, timeout=60, isolation_level=None)
c.execute("CREATE TABLE IF NOT EXISTS bench_probe(t REAL)")
worst = wal = 0.0
while not os.path.exists(stop):
    t0 = time.monotonic()
    c.execute("INSERT INTO bench_probe VALUES (?)", (t0,))
    worst = max(worst, time.monotonic() - t0)
    try:
        wal = max(wal, os.path.getsize(db + "-wal"))
    except OSError:
        pass
    time.sleep(0.01)
print(f"{worst * 1000:.1f} {wal / 1e6:.1f}")
PY
}

# (d) One table loaded by backfill through a following pipeline, against
# mooncdc-snapshot | mooncdc-apply, with a writer beside each.
sqlite_backfill_section() {
  local rows=${BENCH_BACKFILL_ROWS:-1000000} src=$W/bf-src.db r
  log "sqlite: $rows-row source for backfill against snapshot"
  local ts=() ws=() wals=() tb=() wb=() walb=()
  for ((r = 0; r < RUNS; r++)); do
    rm -f "$src"* "$W"/bf-proj.db* "$W/bf.stop"
    $E/bench_sqlite source "$src" "$rows" after
    probe_writer "$src" "$W/bf.stop" >"$W/probe.out" &
    local probe=$! t0
    sleep 0.2
    t0=$(date +%s.%N)
    $B/mooncdc-snapshot --quiet --source "sqlite:$src" | $B/mooncdc-apply --quiet --target "sqlite:$W/bf-proj.db" 2>>"$ERR"
    ts+=("$(calc '%.2f' "$(date +%s.%N) - $t0")")
    touch "$W/bf.stop"
    wait $probe
    read -r w wal <"$W/probe.out"
    ws+=("$w")
    wals+=("$wal")
    # The same load by backfill: a follower from the start, then the request.
    rm -f "$src"* "$W"/bf-proj.db* "$W/bf.stop"
    $E/bench_sqlite source "$src" "$rows" after
    rm -f "$W/bf.pipe"
    mkfifo "$W/bf.pipe"
    $B/mooncdc-capture --quiet --source "sqlite:$src" --follow --poll-ms 100 --ack-from-target "sqlite:$W/bf-proj.db" >"$W/bf.pipe" 2>>"$ERR" &
    local cap=$!
    $B/mooncdc-apply --quiet --target "sqlite:$W/bf-proj.db" <"$W/bf.pipe" 2>>"$ERR" &
    local app=$!
    probe_writer "$src" "$W/bf.stop" >"$W/probe.out" &
    probe=$!
    sleep 0.2
    t0=$(date +%s.%N)
    $B/mooncdc-capture backfill --quiet --source "sqlite:$src" --table items
    local hw
    while :; do
      local st
      st=$($B/mooncdc-capture status --source "sqlite:$src" --output-format json)
      if [ "$(jq -r '.backfills[0].state' <<<"$st")" = done ]; then
        hw=$(jq -r '.backfills[0].done_at' <<<"$st")
        local held
        held=$($B/mooncdc-apply cursor --target "sqlite:$W/bf-proj.db" 2>/dev/null | jq -r .sequence || echo 0)
        [ "$held" -ge "$hw" ] 2>/dev/null && break
      fi
      sleep 0.05
    done
    tb+=("$(calc '%.2f' "$(date +%s.%N) - $t0")")
    touch "$W/bf.stop"
    wait $probe
    read -r w wal <"$W/probe.out"
    wb+=("$w")
    walb+=("$wal")
    # Stop the follower: SIGTERM ends capture after its batch, apply at the
    # end of its input.
    kill -TERM "$cap"
    wait "$cap" "$app"
    if [ "$($B/mooncdc-audit --quiet --source "sqlite:$src" --target "sqlite:$W/bf-proj.db" --table items | tail -n 1)" != equal ]; then
      log "the backfilled projection is not equal to the source"
      exit 1
    fi
  done
  local t_s t_b
  t_s=$(median "${ts[@]}")
  t_b=$(median "${tb[@]}")
  echo "## SQLite backfill against snapshot"
  echo
  echo "A $rows-row table of the five-column rows (capture installed, log empty) loaded"
  echo "into a new projection two ways, with a writer beside each inserting a row into"
  echo "another table every 10 ms: \`mooncdc-snapshot | mooncdc-apply\` (one read"
  echo "transaction for the whole copy), and a following \`capture --follow"
  echo "--ack-from-target | apply\` that carries out \`capture backfill --table items\`"
  echo "(chunks of the default 4,096 rows, each one short write transaction), timed"
  echo "from the request until the target holds the done marker. Goal: the backfill at"
  echo "least half the snapshot's rate."
  echo
  echo "| load | wall s | rows/s | vs snapshot | longest writer wait, ms | largest source WAL, MB | goal |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: \`mooncdc-snapshot \| mooncdc-apply\` | $t_s | $(calc '%.0f' "$rows / $t_s") | 1.00× | $(median "${ws[@]}") | $(median "${wals[@]}") | baseline |"
  echo "| \`mooncdc-capture backfill\` through a follower | $t_b | $(calc '%.0f' "$rows / $t_b") | $(calc '%.2f' "$t_s / $t_b")× | $(median "${wb[@]}") | $(median "${walb[@]}") | ≥ 0.5×: $(met "$t_s / $t_b >= 0.5") |"
  echo
  rm -f "$src"* "$W"/bf-proj.db* "$W/bf.stop" "$W/probe.out" "$W/bf.pipe"
}

# Servers started by this run, stopped by pid (or pg_ctl) on any exit.
PG_DIR="" PG_STARTED="" CH_DIR="" CH_PID=""
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_ping PORT PID DIR: until the clickhouse-server started as PID answers
# on HTTP port PORT; its logs (DIR/log) are shown if it exits, and the run
# stops if it never answers.
wait_ping() {
  local i
  for ((i = 0; i < 600; i++)); do
    [ "$(curl -s "http://127.0.0.1:$1/ping" 2>/dev/null)" = "Ok." ] && return 0
    if ! kill -0 "$2" 2>/dev/null; then
      log "clickhouse-server exited"
      cat "$3/log/stdout.log" "$3/log/err.log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  log "clickhouse-server on port $1 did not answer in 60 s"
  exit 1
}

# sqlite_snapshot ROWS SRC FILE: a new SQLite source of ROWS rows with
# capture installed, and its snapshot written to FILE.
sqlite_snapshot() {
  rm -f "$2"*
  $E/bench_sqlite source "$2" "$1" after
  $B/mooncdc-snapshot --quiet --source "sqlite:$2" >"$3"
}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_stop() {
  if [ -n "$PG_STARTED" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -t 30 -w stop >/dev/null 2>&1 ||
      as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    PG_STARTED=""
  fi
  if [ -n "$PG_DIR" ]; then rm -rf "$PG_DIR"; PG_DIR=""; fi
}
ch_stop() {
  if [ -n "$CH_PID" ]; then
    kill "$CH_PID" 2>/dev/null || true
    local i
    for ((i = 0; i < 150; i++)); do
      kill -0 "$CH_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$CH_PID" 2>/dev/null && kill -9 "$CH_PID" 2>/dev/null
    wait "$CH_PID" 2>/dev/null || true
    CH_PID=""
  fi
  if [ -n "$CH_DIR" ]; then rm -rf "$CH_DIR"; CH_DIR=""; fi
}
# The cluster section's processes (ZooKeeper and four servers), by pid.
CLU_PIDS=()
clu_stop() {
  local p i
  for p in "${CLU_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${CLU_PIDS[@]}"; do
    for ((i = 0; i < 150; i++)); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null || true
  done
  CLU_PIDS=()
  if [ -n "${CLU_DIR:-}" ]; then rm -rf "$CLU_DIR"; CLU_DIR=""; fi
}
cleanup() { pg_stop; ch_stop; clu_stop; }
trap cleanup EXIT
trap 'exit 130' INT TERM

postgres_section() {
  local need=()
  [ -x "$PG_BIN/initdb" ] || need+=(postgresql-15)
  [ -f "$("$PG_BIN/pg_config" --pkglibdir 2>/dev/null)/wal2json.so" ] || need+=(postgresql-15-wal2json)
  install_missing "${need[@]}"
  PG_DIR=$PWD/$W/pg
  rm -rf "$PG_DIR"
  mkdir -p "$PG_DIR"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_DIR"
  log "postgres: initdb"
  as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --locale=C -N >>"$ERR" 2>&1
  local describe port
  describe=$(as_pg "$PG_BIN/postgres" --describe-config)
  port=$(free_port)
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $port"
    echo "unix_socket_directories = '$PG_DIR'"
    echo "wal_level = logical"
    echo "max_wal_senders = 10"
    echo "max_replication_slots = $((2 * RUNS + 10))"
    echo "fsync = off"
    echo "full_page_writes = off"
    echo "shared_buffers = 256MB"
    echo "max_wal_size = 8GB"
    echo "checkpoint_timeout = 1h"
    if awk -F'\t' '$1 == "output_plugin_libraries" {found = 1} END {exit !found}' <<<"$describe"; then
      echo "output_plugin_libraries = 'pgoutput, test_decoding, wal2json'"
    fi
  } >>"$PG_DIR/data/postgresql.conf"
  printf '%s\n' "local all all trust" "host replication all 127.0.0.1/32 trust" \
    "host all all 127.0.0.1/32 trust" >"$PG_DIR/data/pg_hba.conf"
  PG_STARTED=1
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start >>"$ERR" 2>&1
  local conn="host=127.0.0.1 port=$port user=postgres"
  psql -X -q -v ON_ERROR_STOP=1 -d "$conn dbname=postgres" -c "CREATE DATABASE bench" >>"$ERR"
  local url="postgres://postgres@127.0.0.1:$port/bench" db="$conn dbname=bench"
  q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
  local version
  version=$(q "SHOW server_version")
  log "postgres: $version on port $port; $PG_ROWS rows and a $PG_SNAP_ROWS-row snapshot table"
  q "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, price double precision,
       data bytea, qty integer NOT NULL, note text)" >/dev/null
  q "CREATE TABLE snap (id bigint PRIMARY KEY, name text NOT NULL, price double precision,
       data bytea, qty integer NOT NULL, note text)" >/dev/null
  local fill="SELECT g, 'item ' || g || ' é', g * 1.25, decode(md5(g::text), 'hex'), g % 1000,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, NROWS) g"
  q "INSERT INTO items ${fill//NROWS/$PG_ROWS}" >/dev/null
  q "INSERT INTO snap ${fill//NROWS/$PG_SNAP_ROWS}" >/dev/null
  q "VACUUM ANALYZE" >/dev/null
  $B/mooncdc-capture init --source "$url" >>"$ERR" 2>&1
  # The baselines' slots, created before the workload: one wal2json slot per
  # run (pg_recvlogical confirms what it received, so a slot serves one run),
  # and a pgoutput slot that is only peeked at.
  local r
  for ((r = 0; r < RUNS; r++)); do
    q "SELECT pg_create_logical_replication_slot('bench_wal2json_$r', 'wal2json')" >/dev/null
    q "SELECT pg_create_logical_replication_slot('bench_pgoutput_recv_$r', 'pgoutput')" >/dev/null
  done
  q "SELECT pg_create_logical_replication_slot('bench_pgoutput', 'pgoutput')" >/dev/null
  # A wal2json slot only peeked at: wal2json's decoding inside the server.
  q "SELECT pg_create_logical_replication_slot('bench_wal2json_peek', 'wal2json')" >/dev/null
  # The workload: PG_CHANGES updates, PG_ROWS per transaction.
  local done_changes=0 n
  log "postgres: $PG_CHANGES updates"
  while [ "$done_changes" -lt "$PG_CHANGES" ]; do
    n=$((PG_CHANGES - done_changes))
    [ "$n" -gt "$PG_ROWS" ] && n=$PG_ROWS
    q "UPDATE items SET price = price + 1, qty = qty + 1, name = name || 'x' WHERE id <= $n" >/dev/null
    done_changes=$((done_changes + n))
  done
  local endpos
  endpos=$(q "SELECT pg_current_wal_lsn()")

  # (a) mooncdc-capture (never acknowledges: every run reads the same WAL).
  $B/mooncdc-capture --source "$url" >"$W/pg-capture.jsonl" 2>>"$ERR"
  local events
  events=$(grep -c '^{"kind":"event"' "$W/pg-capture.jsonl" || true)
  if [ "$events" != "$PG_CHANGES" ]; then
    log "mooncdc-capture wrote $events events, expected $PG_CHANGES"
    exit 1
  fi
  log "postgres: mooncdc-capture ($events events)"
  measure /dev/null nothing $B/mooncdc-capture --source "$url"
  local t_cap=$T m_cap=$M c_cap=$C
  # (b) pg_recvlogical with wal2json.
  log "postgres: pg_recvlogical (wal2json)"
  # (Each run on a slot of its own: pg_recvlogical confirms what it received.)
  measure /dev/null nothing "$PG_BIN/pg_recvlogical" -d "$db" --slot bench_wal2json_@RUN@ \
    --start -o format-version=2 --endpos="$endpos" --no-loop -f /dev/null
  local t_recv=$T m_recv=$M c_recv=$C
  # The same transport with pgoutput: what the server's decoding and sending
  # cost a client that writes the raw messages away.
  log "postgres: pg_recvlogical (pgoutput, raw)"
  measure /dev/null nothing "$PG_BIN/pg_recvlogical" -d "$db" --slot bench_pgoutput_recv_@RUN@ \
    --start -o proto_version=1 -o publication_names=mooncdc_main --endpos="$endpos" --no-loop -f /dev/null
  local t_recvp=$T c_recvp=$C
  # (c) the server's own pgoutput decoding.
  log "postgres: pg_logical_slot_peek_binary_changes (pgoutput)"
  local peek="SELECT count(*) FROM pg_logical_slot_peek_binary_changes('bench_pgoutput', NULL, NULL,
    'proto_version', '1', 'publication_names', 'mooncdc_main')"
  measure "$W/pg-peek.out" nothing psql -X -At -d "$db" -c "$peek"
  local t_peek=$T messages
  messages=$(cat "$W/pg-peek.out")
  # wal2json decoded inside the server, for reference.
  log "postgres: pg_logical_slot_peek_changes (wal2json)"
  measure "$W/pg-peek2.out" nothing psql -X -At -d "$db" -c \
    "SELECT count(*) FROM pg_logical_slot_peek_changes('bench_wal2json_peek', NULL, NULL, 'format-version', '2')"
  local t_peek2=$T w2j_lines
  w2j_lines=$(cat "$W/pg-peek2.out")

  # Snapshots.
  log "postgres: mooncdc-snapshot of the $PG_SNAP_ROWS-row table"
  measure "$W/pg-snap.jsonl" nothing $B/mooncdc-snapshot --quiet --source "$url" --table public.snap
  local t_snap=$T m_snap=$M snap_rows
  snap_rows=$(grep -c '"row"' "$W/pg-snap.jsonl" || true)
  log "postgres: psql COPY baseline"
  measure /dev/null nothing psql -X -d "$db" -c "COPY (SELECT * FROM snap ORDER BY id) TO STDOUT"
  local t_copy=$T m_copy=$M
  # What mooncdc-snapshot asks the server for when every column has a binary
  # form: the same rows in COPY's binary format (less formatting in the server).
  measure /dev/null nothing psql -X -d "$db" -c "COPY (SELECT * FROM snap ORDER BY id) TO STDOUT (FORMAT binary)"
  local t_copyb=$T
  log "postgres: mooncdc-snapshot of both tables, --jobs 1 and --jobs 2"
  measure /dev/null nothing $B/mooncdc-snapshot --quiet --source "$url" --jobs 1
  local t_j1=$T
  measure /dev/null nothing $B/mooncdc-snapshot --quiet --source "$url" --jobs 2
  local t_j2=$T m_j2=$M
  measure /dev/null nothing sh -c "psql -X -d '$db' -c 'COPY (SELECT * FROM snap ORDER BY id) TO STDOUT' &
    psql -X -d '$db' -c 'COPY (SELECT * FROM items ORDER BY id) TO STDOUT'; wait"
  local t_copy2=$T
  local both=$((PG_ROWS + PG_SNAP_ROWS))

  # The PostgreSQL target. (1) The snapshot of `snap` loaded into an empty
  # database, against psql's \copy of the same rows into the same table.
  local tconn="$conn dbname=bench_t" turl="postgres://postgres@127.0.0.1:$port/bench_t"
  q "COPY (SELECT * FROM snap ORDER BY id) TO STDOUT" >"$W/snap.copy"
  pgt_db() {
    psql -X -q -v ON_ERROR_STOP=1 -d "$conn dbname=postgres" -c "DROP DATABASE IF EXISTS bench_t" -c "CREATE DATABASE bench_t" >>"$ERR"
  }
  pgt_table() {
    pgt_db
    psql -X -q -v ON_ERROR_STOP=1 -d "$tconn" -c "CREATE TABLE snap (id bigint, name text NOT NULL,
      price double precision, data bytea, qty integer NOT NULL, note text, PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED)" >>"$ERR"
  }
  log "postgres target: psql \\copy baseline"
  measure /dev/null pgt_table psql -X -q -d "$tconn" -c "\\copy snap FROM '$W/snap.copy'"
  local t_tcopy=$T
  log "postgres target: mooncdc-apply of the snapshot"
  measure /dev/null pgt_db $B/mooncdc-apply -q --target "$turl" "$W/pg-snap.jsonl"
  local t_tsnap=$T m_tsnap=$M
  # (2) A mixed stream (inserts, updates, deletes, in batches of 10,000),
  # against the same statements sent by psql in one transaction.
  python3 - "$W/mixed.jsonl" "$W/mixed.sql" "$PG_CHANGES" <<'PY'
import json, sys
out, sql, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = "sqlite:bench-mixed"
schema = {"table": "m", "columns": [{"name": "id", "type": "INTEGER", "nullable": False},
          {"name": "name", "type": "TEXT", "nullable": True}, {"name": "price", "type": "REAL", "nullable": True},
          {"name": "qty", "type": "INTEGER", "nullable": True}], "key": ["id"]}
ins, upd = n // 2, n * 3 // 10
dele = n - ins - upd
rows = {}
events = []
for i in range(1, ins + 1):
    rows[i] = [i, "item %d é" % i, i * 1.25, i % 1000]
    events.append(("insert", None, list(rows[i])))
for j in range(upd):
    i = 1 + (j * 7919) % ins
    old = list(rows[i]); new = [i, old[1] + "x", old[2] + 1, old[3] + 1]
    rows[i] = new
    events.append(("update", old, new))
gone = [i for i in range(1, ins + 1, max(1, ins // dele))][:dele]
for i in gone:
    events.append(("delete", list(rows.pop(i)), None))
def img(r):
    return [["integer", str(r[0])], ["text", r[1]], ["real", repr(float(r[2]))], ["integer", str(r[3])]]
with open(out, "w") as f, open(sql, "w") as g:
    g.write("BEGIN;\n")
    seq = 0
    for b in range(0, len(events), 10000):
        chunk = events[b:b + 10000]
        f.write(json.dumps({"kind": "header", "format": "mooncdc.jsonl.v1", "start": {"source": src, "sequence": str(seq)},
                            "high_water": str(len(events)), "schemas": [schema]}, ensure_ascii=False, separators=(",", ":")) + "\n")
        for op, before, after in chunk:
            seq += 1
            e = {"sequence": str(seq), "table": "m", "operation": op}
            if before: e["before"] = img(before)
            if after: e["after"] = img(after)
            f.write(json.dumps({"kind": "event", "event": e}, ensure_ascii=False, separators=(",", ":")) + "\n")
            q = lambda s: "'" + s.replace("'", "''") + "'"
            if op == "insert":
                g.write("INSERT INTO m VALUES (%d, %s, %r, %d);\n" % (after[0], q(after[1]), float(after[2]), after[3]))
            elif op == "update":
                g.write("UPDATE m SET name = %s, price = %r, qty = %d WHERE id = %d;\n" % (q(after[1]), float(after[2]), after[3], after[0]))
            else:
                g.write("DELETE FROM m WHERE id = %d;\n" % before[0])
        f.write(json.dumps({"kind": "commit", "end": {"source": src, "sequence": str(seq)}, "count": str(len(chunk))}, separators=(",", ":")) + "\n")
    g.write("COMMIT;\n")
PY
  local mixed
  mixed=$(grep -c '^{"kind":"event"' "$W/mixed.jsonl")
  pgt_mtable() {
    pgt_db
    psql -X -q -v ON_ERROR_STOP=1 -d "$tconn" -c "CREATE TABLE m (id bigint, name text, price double precision,
      qty bigint, PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED)" >>"$ERR"
  }
  log "postgres target: psql statements baseline ($mixed changes)"
  measure /dev/null pgt_mtable psql -X -q -v ON_ERROR_STOP=1 -d "$tconn" -f "$W/mixed.sql"
  local t_tsql=$T
  log "postgres target: mooncdc-apply of the mixed stream"
  measure /dev/null pgt_db $B/mooncdc-apply -q --target "$turl" "$W/mixed.jsonl"
  local t_tapply=$T m_tapply=$M
  rm -f "$W/pg-capture.jsonl" "$W/pg-snap.jsonl" "$W/snap.copy" "$W/mixed.jsonl" "$W/mixed.sql"
  pg_stop

  echo "## PostgreSQL capture and snapshot"
  echo
  echo "A throwaway PostgreSQL $version cluster (fsync off, trust authentication on"
  echo "loopback). Table \`items\` (six columns: bigint key, text, double precision,"
  echo "bytea, integer, nullable text; REPLICA IDENTITY FULL through \`mooncdc-capture init\`) of"
  echo "$PG_ROWS rows; $PG_CHANGES updates of three columns in transactions of up to $PG_ROWS rows,"
  echo "after the slots were created. Every reader decodes the same WAL, up to LSN $endpos."
  echo "mooncdc-capture wrote $events events; the pgoutput peek returned $messages messages"
  echo "(changes plus begin, commit and relation messages); wal2json $w2j_lines lines."
  echo
  echo "| reader | wall s | changes/s | vs pg_recvlogical | vs server decoding | client CPU s | peak RSS MB | goal |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: \`pg_recvlogical --start -o format-version=2 --endpos=… -f /dev/null\` (wal2json) | $t_recv | $(calc '%.0f' "$PG_CHANGES / $t_recv") | 1.00× | $(calc '%.2f' "$t_peek / $t_recv")× | $c_recv | $m_recv | baseline |"
  echo "| ceiling: \`SELECT count(*) FROM pg_logical_slot_peek_binary_changes(…pgoutput…)\` (server only) | $t_peek | $(calc '%.0f' "$PG_CHANGES / $t_peek") | $(calc '%.2f' "$t_recv / $t_peek")× | 1.00× | | | ceiling |"
  echo "| reference: \`pg_recvlogical … -o proto_version=1 -o publication_names=mooncdc_main … -f /dev/null\` (pgoutput, raw messages, no decoding in the client) | $t_recvp | $(calc '%.0f' "$PG_CHANGES / $t_recvp") | $(calc '%.2f' "$t_recv / $t_recvp")× | $(calc '%.2f' "$t_peek / $t_recvp")× | $c_recvp | | (reference) |"
  echo "| reference: \`SELECT count(*) FROM pg_logical_slot_peek_changes(…wal2json…)\` (server only) | $t_peek2 | $(calc '%.0f' "$PG_CHANGES / $t_peek2") | $(calc '%.2f' "$t_recv / $t_peek2")× | $(calc '%.2f' "$t_peek / $t_peek2")× | | | (reference) |"
  echo "| \`mooncdc-capture --source postgres://… > /dev/null\` | $t_cap | $(calc '%.0f' "$PG_CHANGES / $t_cap") | $(calc '%.2f' "$t_recv / $t_cap")× | $(calc '%.2f' "$t_peek / $t_cap")× | $c_cap | $m_cap | ≥ ${GOAL_PG_RECV}× pg_recvlogical: $(met "$t_recv / $t_cap >= $GOAL_PG_RECV"); ≥ ${GOAL_PG_PEEK}× server: $(met "$t_peek / $t_cap >= $GOAL_PG_PEEK") |"
  echo
  echo "Snapshot: table \`snap\` of $PG_SNAP_ROWS rows of the same shape ($snap_rows rows written); both"
  echo "captured tables together hold $both rows."
  echo
  echo "| command | wall s | rows/s | vs COPY | peak RSS MB | goal: ≥ ${GOAL_PG_SNAP}× COPY |"
  echo "| --- | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: \`psql -c \"COPY (SELECT * FROM snap ORDER BY id) TO STDOUT\" > /dev/null\` | $t_copy | $(calc '%.0f' "$PG_SNAP_ROWS / $t_copy") | 1.00× | $m_copy | baseline |"
  echo "| reference: the same COPY in binary form, \`... TO STDOUT (FORMAT binary)\` (what the snapshot reads) | $t_copyb | $(calc '%.0f' "$PG_SNAP_ROWS / $t_copyb") | $(calc '%.2f' "$t_copy / $t_copyb")× | | (reference) |"
  echo "| \`mooncdc-snapshot --source postgres://… --table public.snap > /dev/null\` | $t_snap | $(calc '%.0f' "$PG_SNAP_ROWS / $t_snap") | $(calc '%.2f' "$t_copy / $t_snap")× | $m_snap | $(met "$t_copy / $t_snap >= $GOAL_PG_SNAP") |"
  echo "| baseline: two \`psql … COPY\` at once, one per table (both tables) | $t_copy2 | $(calc '%.0f' "$both / $t_copy2") | | | (baseline) |"
  echo "| \`mooncdc-snapshot --jobs 1\` (both tables) | $t_j1 | $(calc '%.0f' "$both / $t_j1") | $(calc '%.2f' "$t_copy2 / $t_j1")× | | |"
  echo "| \`mooncdc-snapshot --jobs 2\` (both tables) | $t_j2 | $(calc '%.0f' "$both / $t_j2") | $(calc '%.2f' "$t_copy2 / $t_j2")× | $m_j2 | |"
  echo
  echo "## PostgreSQL target"
  echo
  echo "The same cluster, into a fresh database each run. Snapshot: the $snap_rows rows of \`snap\`"
  echo "(bigint key, text, double precision, bytea, integer, text) against psql's \`\\copy\` of the same"
  echo "rows (COPY text form) into the same table with the same deferred key. Batches: a generated"
  echo "stream of $mixed changes (half inserts, then updates, then deletes; batches of 10,000) against the"
  echo "same statements sent by \`psql -f\` in one transaction."
  echo
  echo "| command | wall s | rows/s | vs baseline | peak RSS MB | goal |"
  echo "| --- | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: \`psql -c \"\\copy snap FROM …\"\` | $t_tcopy | $(calc '%.0f' "$snap_rows / $t_tcopy") | 1.00× | | baseline |"
  echo "| \`mooncdc-apply --target postgres://… snapshot.jsonl\` | $t_tsnap | $(calc '%.0f' "$snap_rows / $t_tsnap") | $(calc '%.2f' "$t_tcopy / $t_tsnap")× | $m_tsnap | ≥ 0.7×: $(met "$t_tcopy / $t_tsnap >= 0.7") |"
  echo "| baseline: \`psql -f changes.sql\` (one statement per change, one transaction) | $t_tsql | $(calc '%.0f' "$mixed / $t_tsql") | 1.00× | | baseline |"
  echo "| \`mooncdc-apply --target postgres://… changes.jsonl\` (image checks on) | $t_tapply | $(calc '%.0f' "$mixed / $t_tapply") | $(calc '%.2f' "$t_tsql / $t_tapply")× | $m_tapply | ≥ 2×: $(met "$t_tsql / $t_tapply >= 2") |"
  echo
}

# A throwaway server in bench/work/pg with database `bench` (trust, loopback,
# a free port): sets PG_URL (postgres://…) and PG_DB (a libpq conninfo).
pg_bench_server() {
  [ -x "$PG_BIN/initdb" ] || install_missing postgresql-15
  PG_DIR=$PWD/$W/pg
  rm -rf "$PG_DIR"
  mkdir -p "$PG_DIR"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_DIR"
  log "$1: initdb"
  as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --locale=C -N >>"$ERR" 2>&1
  local port
  port=$(free_port)
  printf '%s\n' "listen_addresses = '127.0.0.1'" "port = $port" "unix_socket_directories = '$PG_DIR'" \
    "wal_level = logical" "fsync = off" "full_page_writes = off" "shared_buffers = 256MB" \
    "max_wal_size = 8GB" "checkpoint_timeout = 1h" >>"$PG_DIR/data/postgresql.conf"
  printf '%s\n' "local all all trust" "host replication all 127.0.0.1/32 trust" \
    "host all all 127.0.0.1/32 trust" >"$PG_DIR/data/pg_hba.conf"
  PG_STARTED=1
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start >>"$ERR" 2>&1
  local conn="host=127.0.0.1 port=$port user=postgres"
  psql -X -q -v ON_ERROR_STOP=1 -d "$conn dbname=postgres" -c "CREATE DATABASE bench" >>"$ERR"
  PG_URL="postgres://postgres@127.0.0.1:$port/bench"
  PG_DB="$conn dbname=bench"
}

# One large transaction (an UPDATE of BENCH_LARGE_ROWS rows) followed into a
# SQLite projection, with pgoutput protocol 1 (the server holds the
# transaction until its commit, spilling past logical_decoding_work_mem, 64 MB)
# against streaming (the server sends it as it runs; capture holds it in
# spool files): the time from the source's commit to the batch applied, the
# peak RSS of capture and apply, and the server's spill and stream bytes.
pg_large_txn_section() {
  local rows=${BENCH_LARGE_ROWS:-2000000}
  pg_bench_server largetxn
  local url=$PG_URL db=$PG_DB
  q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
  log "largetxn: a $rows-row table"
  q "CREATE TABLE u (id bigint PRIMARY KEY, v text NOT NULL, n bigint NOT NULL)" >/dev/null
  q "INSERT INTO u SELECT g, md5(g::text), g FROM generate_series(1, $rows) g" >/dev/null
  q "VACUUM ANALYZE u" >/dev/null
  rm -f "$W"/large-*.db*
  local lines=() mode
  for mode in 1 auto; do
    # A slot and a snapshot for each read, made just before it: a slot made
    # before the other read's UPDATE would decode that transaction too
    # (twice the server's work and stream_bytes, timed into this read).
    rm -f "$W"/large-proj.db* "$W/large.pipe"
    $B/mooncdc-capture init --source "$url" --slot "large_$mode" --table public.u >>"$ERR" 2>&1
    $B/mooncdc-snapshot --quiet --source "$url" --slot "large_$mode" |
      $B/mooncdc-apply --quiet --target "sqlite:$W/large-proj.db" 2>>"$ERR"
    local after
    after=$($B/mooncdc-apply cursor --target "sqlite:$W/large-proj.db")
    q "SELECT pg_stat_reset_replication_slot(NULL)" >/dev/null
    mkfifo "$W/large.pipe"
    /usr/bin/time -f %M -o "$W/large-cap.rss" $B/mooncdc-capture --quiet --source "$url" --slot "large_$mode" --follow \
      --after "$after" --ack-from-target "sqlite:$W/large-proj.db" --pgoutput-protocol "$mode" \
      --spool-dir "$W" >"$W/large.pipe" 2>>"$ERR" &
    local cap=$!
    /usr/bin/time -f %M -o "$W/large-app.rss" $B/mooncdc-apply --quiet --target "sqlite:$W/large-proj.db" \
      <"$W/large.pipe" 2>>"$ERR" &
    local app=$!
    sleep 1
    log "largetxn: protocol $mode: UPDATE of $rows rows"
    q "UPDATE u SET n = n + 1, v = v || 'x'" >/dev/null
    local t0 want held
    t0=$(date +%s.%N)
    want=$(q "SELECT pg_current_wal_insert_lsn()")
    want=$(python3 -c "import sys; h, l = sys.argv[1].split('/'); print((int(h, 16) << 32 | int(l, 16)) << 64)" "$want")
    # Polled with one process a look (no jq or python3 in the loop: they
    # took a fifth of the two cores from the pipeline being timed).
    local re='"sequence":"([0-9]+)"'
    while :; do
      held=0
      [[ $($B/mooncdc-apply cursor --target "sqlite:$W/large-proj.db" 2>/dev/null) =~ $re ]] && held=${BASH_REMATCH[1]}
      # Decimal strings without leading zeros: longer is larger.
      if ((${#held} > ${#want})) || { ((${#held} == ${#want})) && [[ ! $held < $want ]]; }; then break; fi
      if ! kill -0 "$cap" 2>/dev/null; then
        log "largetxn: capture ended before the target caught up (see $ERR)"
        exit 1
      fi
      sleep 0.05
    done
    local t
    t=$(calc '%.2f' "$(date +%s.%N) - $t0")
    # The server reports its figures when the transaction is done decoding.
    sleep 1
    local stats
    stats=$(q "SELECT spill_bytes, stream_bytes FROM pg_stat_replication_slots WHERE slot_name = 'large_$mode'")
    # $cap is GNU time: the stop goes to capture, its child.
    pkill -TERM -P "$cap"
    wait "$cap" "$app" || true
    if [ "$($B/mooncdc-audit --quiet --source "$url" --slot "large_$mode" --target "sqlite:$W/large-proj.db" | tail -n 1)" != equal ]; then
      log "the projection is not equal to the source after protocol $mode"
      exit 1
    fi
    local label="protocol 1 (the server holds it)"
    [ "$mode" = auto ] && label="streaming (protocol $( [ "$("$PG_BIN/postgres" -V | grep -o '[0-9]*' | head -1)" -ge 16 ] && echo 4 || echo 2))"
    lines+=("| $label | $t | $(calc '%.1f' "$(tail -n 1 "$W/large-cap.rss") / 1024") | $(calc '%.1f' "$(tail -n 1 "$W/large-app.rss") / 1024") | $(calc '%.1f' "${stats%%|*} / 1e6") | $(calc '%.1f' "${stats##*|} / 1e6") |")
  done
  echo "## PostgreSQL large transaction: protocol 1 against streaming"
  echo
  echo "One \`UPDATE\` of all $rows rows of a three-column table (bigint key, text,"
  echo "bigint) in one transaction, followed by \`capture --follow --ack-from-target |"
  echo "apply\` into a SQLite projection that holds the rows; the server's default"
  echo "\`logical_decoding_work_mem\` (64 MB). Time from the \`UPDATE\`'s commit until"
  echo "the target's cursor is past it; peak RSS of the two processes (GNU time);"
  echo "the slot's \`spill_bytes\` and \`stream_bytes\` (\`pg_stat_replication_slots\`)."
  echo "One run each. Goal: the server spills nothing when it can stream, and"
  echo "capture's memory does not grow with the transaction."
  echo
  echo "| read | commit to applied, s | capture peak RSS MB | apply peak RSS MB | server spill MB | server stream MB |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  printf '%s\n' "${lines[@]}"
  echo
  rm -f "$W"/large-*.db* "$W/large.pipe" "$W"/large-*.rss
  pg_stop
}

# Replica identity: the same update workload on a wide-row table under FULL
# and under the default identity (BENCH_IDENTITY_ROWS rows of a bigint key,
# a bigint and a 3.2 kB text that PostgreSQL stores out of line; one UPDATE
# of the bigint of every row): the WAL it writes, the stream capture reads
# and how fast, and the apply into ClickHouse, which fills the key-only
# changes by reading the rows it holds, against the FULL stream's apply.
identity_section() {
  local rows=${BENCH_IDENTITY_ROWS:-20000}
  pg_bench_server identity
  local url=$PG_URL db=$PG_DB
  q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
  ch_bench_server
  local CH=$CH_URL
  log "identity: a $rows-row table with a 3.2 kB text"
  q "CREATE TABLE w (id bigint PRIMARY KEY, n bigint NOT NULL, body text NOT NULL)" >/dev/null
  q "INSERT INTO w SELECT g, g, (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 100) i)
     FROM generate_series(1, $rows) g" >/dev/null
  q "VACUUM ANALYZE w" >/dev/null
  local lines=() mode
  for mode in full default; do
    $B/mooncdc-capture init --source "$url" --slot "id_$mode" --table public.w --replica-identity "$mode" >>"$ERR" 2>&1
    chq "CREATE DATABASE IF NOT EXISTS id_$mode"
    $B/mooncdc-snapshot --quiet --source "$url" --slot "id_$mode" |
      $B/mooncdc-apply --quiet --target "$CH/id_$mode" 2>>"$ERR"
    local after lsn0 lsn1 wal
    after=$($B/mooncdc-apply cursor --target "$CH/id_$mode")
    lsn0=$(q "SELECT pg_current_wal_insert_lsn()")
    log "identity: $mode: UPDATE of $rows rows"
    q "UPDATE w SET n = n + 1" >/dev/null
    lsn1=$(q "SELECT pg_current_wal_insert_lsn()")
    wal=$(q "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
    local t0 t_cap t_app
    t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$W/id-cap.rss" $B/mooncdc-capture --quiet --source "$url" --slot "id_$mode" --after "$after" \
      >"$W/id-$mode.jsonl" 2>>"$ERR"
    t_cap=$(calc '%.2f' "$(date +%s.%N) - $t0")
    local events
    events=$(grep -c '"kind":"event"' "$W/id-$mode.jsonl")
    t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$W/id-app.rss" $B/mooncdc-apply --quiet --target "$CH/id_$mode" "$W/id-$mode.jsonl" 2>>"$ERR"
    t_app=$(calc '%.2f' "$(date +%s.%N) - $t0")
    if [ "$mode" = default ] &&
      [ "$($B/mooncdc-audit --quiet --source "$url" --slot id_default --target "$CH/id_$mode" | tail -n 1)" != equal ]; then
      log "identity: ClickHouse is not equal to the source after the default identity's changes"
      exit 1
    fi
    local label="FULL"
    [ "$mode" = default ] && label="DEFAULT (key-only, unchanged filled)"
    lines+=("| $label | $events | $(calc '%.2f' "$wal / 1e6") | $(mb "$W/id-$mode.jsonl") | $t_cap | $(calc '%.0f' "$events / $t_cap") | $t_app | $(calc '%.0f' "$events / $t_app") | $(calc '%.1f' "$(tail -n 1 "$W/id-app.rss") / 1024") |")
    eval "wal_$mode=$wal"
  done
  echo "## Replica identity: FULL against the default"
  echo
  echo "$rows rows of \`(id bigint PRIMARY KEY, n bigint, body text)\`, \`body\` 3.2 kB of"
  echo "hex text (stored out of line), one \`UPDATE w SET n = n + 1\` of every row under"
  echo "each identity. WAL: \`pg_wal_lsn_diff\` around the \`UPDATE\`. Capture: a read of"
  echo "the slot to a file. Apply: that file into a ClickHouse target holding the"
  echo "table (\`replacing\`); under DEFAULT every update names its row by the key and"
  echo "leaves \`body\` unchanged, so apply reads each row's \`body\` back from ClickHouse."
  echo "One run each; the DEFAULT target is audited equal to the source."
  echo
  echo "| identity | changes | WAL MB | stream MB | capture s | capture changes/s | apply s | apply changes/s | apply peak RSS MB |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  printf '%s\n' "${lines[@]}"
  echo
  echo "WAL under FULL: $(calc '%.1f' "$wal_full / $wal_default")× the default identity's."
  echo
  rm -f "$W"/id-*.jsonl "$W"/id-*.rss
  pg_stop
  ch_stop
}

# The PostgreSQL backfill against the snapshot: one table of
# BENCH_BACKFILL_ROWS rows into a new SQLite projection, by
# `mooncdc-snapshot | mooncdc-apply` and by `capture backfill` through a
# following pipeline, with the oldest transaction of capture's sessions
# sampled every 100 ms during each (pg_stat_activity).
pg_backfill_section() {
  local rows=${BENCH_BACKFILL_ROWS:-1000000}
  pg_bench_server pgbackfill
  local url=$PG_URL db=$PG_DB
  q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
  log "pgbackfill: a $rows-row table"
  q "CREATE TABLE bf (id bigint PRIMARY KEY, name text NOT NULL, price double precision,
       data bytea, qty integer NOT NULL, note text)" >/dev/null
  q "INSERT INTO bf SELECT g, 'item ' || g || ' é', g * 1.25, decode(md5(g::text), 'hex'), g % 1000,
       CASE WHEN g % 3 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, $rows) g" >/dev/null
  q "VACUUM ANALYZE bf" >/dev/null
  q "CREATE TABLE other (id int PRIMARY KEY)" >/dev/null
  $B/mooncdc-capture init --source "$url" --table public.bf >>"$ERR" 2>&1
  # sample STOP: the oldest transaction (ms) of capture's sessions until STOP exists.
  sample() {
    local worst=0 ms
    while [ ! -e "$1" ]; do
      ms=$(q "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start) * 1000), 0)::bigint
              FROM pg_stat_activity WHERE application_name LIKE 'mooncdc%' AND xact_start IS NOT NULL")
      [ "$ms" -gt "$worst" ] && worst=$ms
      sleep 0.1
    done
    echo "$worst"
  }
  local ts=() tb=() os=() ob=() r t0
  for ((r = 0; r < RUNS; r++)); do
    rm -f "$W"/pgbf-proj.db* "$W/pgbf.stop"
    sample "$W/pgbf.stop" >"$W/sample.out" &
    local sampler=$!
    t0=$(date +%s.%N)
    $B/mooncdc-snapshot --quiet --source "$url" | $B/mooncdc-apply --quiet --target "sqlite:$W/pgbf-proj.db" 2>>"$ERR"
    ts+=("$(calc '%.2f' "$(date +%s.%N) - $t0")")
    touch "$W/pgbf.stop"
    wait $sampler
    os+=("$(cat "$W/sample.out")")
    # The backfill: a follower from the slot into a new projection, then the
    # request (a resync after the first run), until the target holds its end.
    rm -f "$W"/pgbf-proj.db* "$W/pgbf.stop" "$W/pgbf.pipe"
    mkfifo "$W/pgbf.pipe"
    $B/mooncdc-capture --quiet --source "$url" --follow --ack-from-target "sqlite:$W/pgbf-proj.db" >"$W/pgbf.pipe" 2>>"$ERR" &
    local cap=$!
    $B/mooncdc-apply --quiet --target "sqlite:$W/pgbf-proj.db" <"$W/pgbf.pipe" 2>>"$ERR" &
    local app=$!
    sample "$W/pgbf.stop" >"$W/sample.out" &
    sampler=$!
    sleep 0.5
    t0=$(date +%s.%N)
    if [ "$r" = 0 ]; then
      $B/mooncdc-capture backfill --quiet --source "$url" --table public.bf
    else
      $B/mooncdc-capture backfill --quiet --source "$url" --table public.bf --resync
    fi
    local st done_at
    while :; do
      st=$($B/mooncdc-capture status --source "$url" --output-format json)
      [ "$(jq -r '.backfills[-1].state' <<<"$st")" = done ] && [ "$(jq -r '.backfills[-1].done_at' <<<"$st")" != null ] && break
      sleep 0.1
    done
    done_at=$(jq -r '.backfills[-1].done_at' <<<"$st")
    # The done position, as a number to compare with the target's cursor.
    local want held
    want=$(python3 -c "import sys; h, l = sys.argv[1].split('/'); print(((int(h, 16) << 32 | int(l, 16)) + 1) << 64)" "$done_at")
    while :; do
      held=$($B/mooncdc-apply cursor --target "sqlite:$W/pgbf-proj.db" 2>/dev/null | jq -r .sequence || echo 0)
      python3 -c "import sys; sys.exit(0 if int(sys.argv[1]) >= int(sys.argv[2]) else 1)" "$held" "$want" && break
      sleep 0.05
    done
    tb+=("$(calc '%.2f' "$(date +%s.%N) - $t0")")
    touch "$W/pgbf.stop"
    wait $sampler
    ob+=("$(cat "$W/sample.out")")
    kill -TERM "$cap"
    wait "$cap" "$app" || true
    if [ "$($B/mooncdc-audit --quiet --source "$url" --target "sqlite:$W/pgbf-proj.db" | tail -n 1)" != equal ]; then
      log "the backfilled projection is not equal to the source"
      exit 1
    fi
  done
  local t_s t_b
  t_s=$(median "${ts[@]}")
  t_b=$(median "${tb[@]}")
  echo "## PostgreSQL backfill against snapshot"
  echo
  echo "A $rows-row table (six columns: bigint key, text, float8, bytea, int, text)"
  echo "loaded into a new SQLite projection: by \`mooncdc-snapshot | mooncdc-apply\`"
  echo "(one exported snapshot, held for the whole copy), and by \`capture backfill\`"
  echo "carried out by a following \`capture --follow --ack-from-target | apply\`"
  echo "(chunks of the default 4,096 rows, each one short transaction), timed from the"
  echo "request until the target holds the end. The oldest transaction of capture's"
  echo "sessions is sampled every 100 ms from \`pg_stat_activity\`. Goal: the"
  echo "backfill at least half the snapshot's rate, with no transaction older than a"
  echo "few seconds."
  echo
  echo "| load | wall s | rows/s | vs snapshot | oldest capture transaction, ms | goal |"
  echo "| --- | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: \`mooncdc-snapshot \| mooncdc-apply\` | $t_s | $(calc '%.0f' "$rows / $t_s") | 1.00× | $(median "${os[@]}") | baseline |"
  echo "| \`mooncdc-capture backfill\` through a follower | $t_b | $(calc '%.0f' "$rows / $t_b") | $(calc '%.2f' "$t_s / $t_b")× | $(median "${ob[@]}") | ≥ 0.5×: $(met "$t_s / $t_b >= 0.5"); < 5 s: $(met "$(median "${ob[@]}") < 5000") |"
  echo
  rm -f "$W"/pgbf-proj.db* "$W/pgbf.stop" "$W/pgbf.pipe" "$W/sample.out"
  pg_stop
}

# The application's writers during a PostgreSQL backfill: pgbench updating
# random rows of the table at a steady BENCH_WRITER_TPS, each transaction's
# latency logged, with no backfill (the baseline), during a backfill of the
# table (--resync), and during one with a write transaction held open on the
# table and CREATE INDEX CONCURRENTLY waiting on it. Goal (the backfill
# issue): p99 within 2× the baseline's plus 2 ms, max under 50 ms.
pg_writers_section() {
  local rows=${BENCH_WRITER_ROWS:-500000} tps=${BENCH_WRITER_TPS:-200} secs=${BENCH_WRITER_SECS:-12}
  pg_bench_server writers
  local url=$PG_URL db=$PG_DB
  q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$1"; }
  log "writers: a $rows-row table, $tps updates/s"
  q "CREATE TABLE w (id bigint PRIMARY KEY, qty bigint NOT NULL, note text NOT NULL)" >/dev/null
  q "INSERT INTO w SELECT g, g, repeat('x', 100) FROM generate_series(1, $rows) g" >/dev/null
  q "VACUUM ANALYZE w" >/dev/null
  $B/mooncdc-capture init --source "$url" --table public.w >>"$ERR" 2>&1
  rm -f "$W"/wr-proj.db*
  $B/mooncdc-snapshot --quiet --source "$url" | $B/mooncdc-apply --quiet --target "sqlite:$W/wr-proj.db" 2>>"$ERR"
  printf '\\set id random(1, %d)\nUPDATE w SET qty = qty + 1 WHERE id = :id;\n' "$rows" >"$W/wr.sql"
  # pgbench_run NAME: the writers for $secs s; prints "p50 p99 max" in ms.
  pgbench_run() {
    rm -f "$W"/wr-"$1".[0-9]*
    "$PG_BIN/pgbench" -n -c 4 -j 2 -R "$tps" -T "$secs" -f "$W/wr.sql" --log --log-prefix="$W/wr-$1" \
      "$db" >>"$ERR" 2>&1
    cat "$W"/wr-"$1".[0-9]* | python3 -c '
import sys
lat = sorted(int(l.split()[2]) / 1000 for l in sys.stdin if l.strip())
pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print("%.2f %.2f %.2f %d" % (pick(0.5), pick(0.99), lat[-1], len(lat)))'
  }
  # backfill_during NAME: a follower, the resync request, and the writers
  # at once; the follower runs until the end is in the target.
  backfill_during() {
    rm -f "$W/wr.pipe"
    mkfifo "$W/wr.pipe"
    $B/mooncdc-capture --quiet --source "$url" --follow --ack-from-target "sqlite:$W/wr-proj.db" >"$W/wr.pipe" 2>>"$ERR" &
    local cap=$!
    $B/mooncdc-apply --quiet --target "sqlite:$W/wr-proj.db" <"$W/wr.pipe" 2>>"$ERR" &
    local app=$!
    sleep 0.5
    pgbench_run "$1" >"$W/wr.out" &
    local bench=$!
    sleep 1
    local t0 st
    t0=$(date +%s.%N)
    $B/mooncdc-capture backfill --quiet --source "$url" --table public.w --resync
    while :; do
      st=$($B/mooncdc-capture status --source "$url" --output-format json)
      [ "$(jq -r '.backfills[-1].state' <<<"$st")" = done ] && break
      sleep 0.1
    done
    echo "$(calc '%.2f' "$(date +%s.%N) - $t0")" >"$W/wr.took"
    wait $bench
    sleep 1
    kill -TERM "$cap"
    wait "$cap" "$app" || true
  }
  local base during held t_during t_held
  base=$(pgbench_run base)
  backfill_during during
  during=$(cat "$W/wr.out")
  t_during=$(cat "$W/wr.took")
  # A write transaction on the table held open for the whole run, and an
  # index built concurrently waiting on it.
  psql -X -q -d "$db" -c "BEGIN; UPDATE w SET qty = 0 WHERE id = $rows; SELECT pg_sleep($secs + 5); COMMIT" >>"$ERR" 2>&1 &
  local holder=$!
  sleep 0.3
  psql -X -q -d "$db" -c "CREATE INDEX CONCURRENTLY w_qty ON w (qty)" >>"$ERR" 2>&1 &
  local indexer=$!
  backfill_during held
  held=$(cat "$W/wr.out")
  t_held=$(cat "$W/wr.took")
  wait "$holder" "$indexer" || true
  # The held transaction committed after the follower stopped: read it.
  $B/mooncdc-capture --quiet --source "$url" --after "$($B/mooncdc-apply cursor --target "sqlite:$W/wr-proj.db")" |
    $B/mooncdc-apply --quiet --target "sqlite:$W/wr-proj.db" 2>>"$ERR"
  if [ "$($B/mooncdc-audit --quiet --source "$url" --target "sqlite:$W/wr-proj.db" | tee -a "$ERR" | tail -n 1)" != equal ]; then
    log "the backfilled projection is not equal to the source"
    exit 1
  fi
  local b50 b99 bmax bn
  read -r b50 b99 bmax bn <<<"$base"
  row() {
    local name=$1 v=$2 took=$3 p50 p99 max n
    read -r p50 p99 max n <<<"$v"
    echo "| $name | $took | $n | $p50 | $p99 | $max | p99 ≤ $(calc '%.2f' "2 * $b99 + 2"): $(met "$p99 <= 2 * $b99 + 2"); max < 50: $(met "$max < 50") |"
  }
  echo "## Writers during a PostgreSQL backfill"
  echo
  echo "pgbench (4 clients, \`-R $tps\`, ${secs} s) updating random rows of a $rows-row"
  echo "table (bigint key, bigint, 100-byte text), each transaction's latency from"
  echo "pgbench's log; during a \`capture backfill --resync\` of the same table carried"
  echo "out by \`capture --follow --ack-from-target | apply\` (chunks of 4,096 rows),"
  echo "and during one with a write transaction on the table held open for the whole"
  echo "run and \`CREATE INDEX CONCURRENTLY\` waiting on it. Goal: p99 within 2× the"
  echo "baseline's plus 2 ms, max under 50 ms. Backfill s: from the request until"
  echo "\`status\` says done."
  echo
  echo "| writers | backfill s | transactions | p50 ms | p99 ms | max ms | goal |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: no backfill | – | $bn | $b50 | $b99 | $bmax | baseline |"
  row "during a backfill" "$during" "$t_during"
  row "during a backfill, a write transaction held open, CREATE INDEX CONCURRENTLY waiting" "$held" "$t_held"
  echo
  rm -f "$W"/wr-* "$W"/wr.* "$W"/wr-proj.db*
  pg_stop
}

# A throwaway ClickHouse server in bench/work/ch (loopback, free ports):
# sets CH_URL (clickhouse://…), CH_TCP and CH_PID.
ch_bench_server() {
  local need=()
  command -v clickhouse-server >/dev/null 2>&1 || need+=(clickhouse-server)
  command -v clickhouse-client >/dev/null 2>&1 || need+=(clickhouse-client)
  command -v curl >/dev/null 2>&1 || need+=(curl)
  install_missing "${need[@]}"
  CH_DIR=$PWD/$W/ch
  rm -rf "$CH_DIR"
  mkdir -p "$CH_DIR"/{data,tmp,user_files,format_schemas,log}
  local http tcp
  http=$(free_port)
  tcp=$(free_port)
  while [ "$tcp" = "$http" ]; do tcp=$(free_port); done
  cat >"$CH_DIR/users.xml" <<XML
<yandex>
<profiles><default></default></profiles>
<users>
<default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
</users>
<quotas><default></default></quotas>
</yandex>
XML
  cat >"$CH_DIR/config.xml" <<XML
<yandex>
<logger><level>warning</level><log>$CH_DIR/log/server.log</log><errorlog>$CH_DIR/log/err.log</errorlog><console>0</console></logger>
<http_port>$http</http_port>
<tcp_port>$tcp</tcp_port>
<listen_host>127.0.0.1</listen_host>
<path>$CH_DIR/data/</path>
<tmp_path>$CH_DIR/tmp/</tmp_path>
<user_files_path>$CH_DIR/user_files/</user_files_path>
<format_schema_path>$CH_DIR/format_schemas/</format_schema_path>
<users_config>$CH_DIR/users.xml</users_config>
<default_profile>default</default_profile>
<default_database>default</default_database>
<mark_cache_size>5368709</mark_cache_size>
</yandex>
XML
  (cd "$CH_DIR" && exec clickhouse-server --config-file="$CH_DIR/config.xml" >"$CH_DIR/log/stdout.log" 2>&1) &
  CH_PID=$!
  wait_ping "$http" "$CH_PID" "$CH_DIR"
  CH_TCP=$tcp
  local version
  version=$(chq "SELECT version()")
  log "clickhouse: $version, http $http, tcp $tcp"
  CH_URL="clickhouse://default@127.0.0.1:$http"
}
chq() { clickhouse-client --port "$CH_TCP" --query "$1"; }

clickhouse_section() {
  ch_bench_server
  local CH=$CH_URL

  # (a) A snapshot of CH_ROWS rows applied, against inserting the same rows as RowBinary.
  log "clickhouse: $CH_ROWS-row SQLite source and its snapshot"
  local src=$W/ch-src.db snapfile=$W/ch-snap.jsonl
  sqlite_snapshot "$CH_ROWS" "$src" "$snapfile"
  fresh_a() { chq "DROP DATABASE IF EXISTS a"; chq "CREATE DATABASE a"; }
  log "clickhouse: mooncdc-apply of the snapshot"
  measure /dev/null fresh_a $B/mooncdc-apply --quiet --target "$CH/a" "$snapfile"
  local t_apply=$T m_apply=$M c_apply=$C held
  held=$(chq "SELECT count() FROM a.items")
  if [ "$held" != "$CH_ROWS" ]; then
    log "clickhouse holds $held rows, expected $CH_ROWS"
    exit 1
  fi
  chq "SELECT * FROM a.items FORMAT RowBinary" >"$W/ch-items.bin"
  fresh_b() { chq "DROP DATABASE IF EXISTS b"; chq "CREATE DATABASE b"; chq "CREATE TABLE b.items AS a.items"; }
  log "clickhouse: clickhouse-client RowBinary baseline"
  measure /dev/null fresh_b sh -c "clickhouse-client --port $CH_TCP --query 'INSERT INTO b.items FORMAT RowBinary' <'$W/ch-items.bin'"
  local t_bin=$T m_bin=$M c_bin=$C
  held=$(chq "SELECT count() FROM b.items")
  if [ "$held" != "$CH_ROWS" ]; then
    log "the RowBinary baseline inserted $held rows, expected $CH_ROWS"
    exit 1
  fi
  log "clickhouse: curl RowBinary over HTTP"
  measure /dev/null fresh_b curl -sS --fail --data-binary "@$W/ch-items.bin" \
    "http://127.0.0.1:$http/?query=INSERT%20INTO%20b.items%20FORMAT%20RowBinary"
  local t_curl=$T c_curl=$C

  # (b) End to end: SQLite capture piped into apply.
  log "clickhouse: $CH_CHANGES-change SQLite source, capture | apply"
  local esrc=$W/ch-e2e.db
  rm -f "$esrc"*
  $E/bench_sqlite source "$esrc" "$CH_CHANGES" before
  fresh_e() { chq "DROP DATABASE IF EXISTS e"; chq "CREATE DATABASE e"; }
  measure /dev/null fresh_e sh -c "$B/mooncdc-capture --source 'sqlite:$esrc' | $B/mooncdc-apply --quiet --target '$CH/e'"
  local t_e2e=$T
  held=$(chq "SELECT count() FROM e.items")
  if [ "$held" != "$CH_CHANGES" ]; then
    log "clickhouse holds $held rows after capture | apply, expected $CH_CHANGES"
    exit 1
  fi
  log "clickhouse: capture alone"
  measure /dev/null nothing $B/mooncdc-capture --source "sqlite:$esrc"
  local t_capo=$T
  local size
  size=$(mb "$snapfile")
  rm -f "$W/ch-items.bin" "$snapfile" "$src"* "$esrc"*
  ch_stop

  echo "## ClickHouse target"
  echo
  echo "A throwaway ClickHouse $version server (Debian's), loopback only. The rows are"
  echo "the five-column SQLite table of the sections above (integer key, TEXT, REAL, BLOB,"
  echo "INTEGER). A snapshot of $CH_ROWS rows ($size MB of JSONL) applied by \`mooncdc-apply\`"
  echo "into a new database (replacing engine), against inserting the same rows, read back from"
  echo "the table mooncdc filled as RowBinary, into an identical empty table."
  echo
  echo "| loader | wall s | rows/s | vs clickhouse-client | client CPU s | peak RSS MB | goal: ≥ ${GOAL_CH_APPLY}× clickhouse-client |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: \`clickhouse-client --query \"INSERT INTO t FORMAT RowBinary\" < FILE\` | $t_bin | $(calc '%.0f' "$CH_ROWS / $t_bin") | 1.00× | $c_bin | $m_bin | baseline |"
  echo "| reference: \`curl --data-binary @FILE\` (RowBinary over HTTP, as mooncdc sends it) | $t_curl | $(calc '%.0f' "$CH_ROWS / $t_curl") | $(calc '%.2f' "$t_bin / $t_curl")× | $c_curl | | (reference) |"
  echo "| \`mooncdc-apply --target clickhouse://… SNAPSHOT\` (whole process) | $t_apply | $(calc '%.0f' "$CH_ROWS / $t_apply") | $(calc '%.2f' "$t_bin / $t_apply")× | $c_apply | $m_apply | $(met "$t_bin / $t_apply >= $GOAL_CH_APPLY") |"
  echo
  echo "End to end: a SQLite source with capture installed before $CH_CHANGES inserts,"
  echo "\`mooncdc-capture --source sqlite:… | mooncdc-apply --target clickhouse://…\` into a new"
  echo "database (one batch). No numeric goal."
  echo
  echo "| command | wall s | events/s |"
  echo "| --- | ---: | ---: |"
  echo "| \`mooncdc-capture --source sqlite:… > /dev/null\` (alone) | $t_capo | $(calc '%.0f' "$CH_CHANGES / $t_capo") |"
  echo "| \`mooncdc-capture --source sqlite:… \\| mooncdc-apply --target clickhouse://…\` | $t_e2e | $(calc '%.0f' "$CH_CHANGES / $t_e2e") |"
  echo
}

# A ClickHouse cluster on loopback: one ZooKeeper, 2 shards x 2 replicas
# (the layout of tests/common/cluster.rs). The same snapshot applied into one
# node as a single server, into the cluster, and clickhouse-client inserting
# the same RowBinary into a Distributed table with the same durability
# settings (synchronous, quorum 2).
cluster_section() {
  local need=()
  command -v clickhouse-server >/dev/null 2>&1 || need+=(clickhouse-server)
  command -v clickhouse-client >/dev/null 2>&1 || need+=(clickhouse-client)
  [ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
  command -v curl >/dev/null 2>&1 || need+=(curl)
  install_missing "${need[@]}"
  CLU_DIR=$PWD/$W/cluster
  rm -rf "$CLU_DIR"
  mkdir -p "$CLU_DIR/zk/data"
  local zk http=() tcp=() inter=() i s r
  zk=$(free_port)
  for i in 0 1 2 3; do
    http+=("$(free_port)")
    tcp+=("$(free_port)")
    inter+=("$(free_port)")
  done
  printf 'tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n' \
    "$CLU_DIR/zk/data" "$zk" >"$CLU_DIR/zk/zoo.cfg"
  java -Xmx256m -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain "$CLU_DIR/zk/zoo.cfg" \
    >"$CLU_DIR/zk/out.log" 2>&1 &
  CLU_PIDS+=($!)
  for ((i = 0; i < 600; i++)); do
    python3 -c "import socket,sys; c=socket.create_connection(('127.0.0.1',$zk),1); c.sendall(b'srvr'); sys.exit(0 if b'Mode: standalone' in c.recv(4096) else 1)" 2>/dev/null && break
    sleep 0.1
  done
  cat >"$CLU_DIR/users.xml" <<XML
<yandex><profiles><default></default></profiles><users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users><quotas><default></default></quotas></yandex>
XML
  local remote="<remote_servers><bench>"
  for s in 0 1; do
    remote+="<shard><internal_replication>true</internal_replication>"
    for r in 0 1; do remote+="<replica><host>127.0.0.1</host><port>${tcp[$((s * 2 + r))]}</port></replica>"; done
    remote+="</shard>"
  done
  remote+="</bench></remote_servers>"
  for i in 0 1 2 3; do
    local n=$CLU_DIR/node$i
    mkdir -p "$n"/{data,tmp,log}
    cat >"$n/config.xml" <<XML
<yandex>
<logger><level>warning</level><log>$n/log/server.log</log><errorlog>$n/log/err.log</errorlog><console>0</console></logger>
<http_port>${http[$i]}</http_port><tcp_port>${tcp[$i]}</tcp_port>
<interserver_http_port>${inter[$i]}</interserver_http_port><interserver_http_host>127.0.0.1</interserver_http_host>
<listen_host>127.0.0.1</listen_host>
<path>$n/data/</path><tmp_path>$n/tmp/</tmp_path>
<users_config>$CLU_DIR/users.xml</users_config>
<default_profile>default</default_profile><default_database>default</default_database>
<mark_cache_size>5368709</mark_cache_size>
$remote
<zookeeper><node><host>127.0.0.1</host><port>$zk</port></node></zookeeper>
<macros><shard>0$((i / 2 + 1))</shard><replica>r$((i % 2 + 1))</replica></macros>
<distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
</yandex>
XML
    (cd "$n" && exec clickhouse-server --config-file="$n/config.xml" >"$n/log/stdout.log" 2>&1) &
    CLU_PIDS+=($!)
  done
  for i in 0 1 2 3; do
    wait_ping "${http[$i]}" "${CLU_PIDS[$((i + 1))]}" "$CLU_DIR/node$i"
  done
  cq() { clickhouse-client --port "${tcp[0]}" --query "$1"; }
  local version
  version=$(cq "SELECT version()")
  log "cluster: $version, 2 shards x 2 replicas, ZooKeeper on $zk"
  local CH="clickhouse://default@127.0.0.1:${http[0]}"

  log "cluster: $CLU_ROWS-row SQLite source and its snapshot"
  local src=$W/clu-src.db snapfile=$W/clu-snap.jsonl
  sqlite_snapshot "$CLU_ROWS" "$src" "$snapfile"
  # A new database for every run (dropped ones leave ZooKeeper paths behind
  # for a while).
  CLU_RUN=0
  fresh_cluster() { CLU_RUN=$((CLU_RUN + 1)); echo "$CLU_RUN" >"$W/clu-run"; cq "CREATE DATABASE c$CLU_RUN ON CLUSTER bench" >/dev/null; }
  fresh_single() { CLU_RUN=$((CLU_RUN + 1)); echo "$CLU_RUN" >"$W/clu-run"; cq "CREATE DATABASE s$CLU_RUN"; }
  log "cluster: mooncdc-apply into one node as a single server"
  measure /dev/null fresh_single sh -c "$B/mooncdc-apply --quiet --target \"$CH/s\$(cat $W/clu-run)\" '$snapfile'"
  local t_single=$T m_single=$M
  log "cluster: mooncdc-apply into the cluster"
  measure /dev/null fresh_cluster sh -c "$B/mooncdc-apply --quiet --target \"$CH/c\$(cat $W/clu-run)?cluster=bench\" '$snapfile'"
  local t_clu=$T m_clu=$M c=$CLU_RUN held
  # What making the tables costs (ON CLUSTER statements wait for every node):
  # a one-row snapshot into a new database.
  log "cluster: a one-row snapshot into a new cluster database (the tables' setup)"
  local tiny=$W/clu-tiny.db
  rm -f "$tiny"*
  $E/bench_sqlite source "$tiny" 1 after
  $B/mooncdc-snapshot --quiet --source "sqlite:$tiny" >"$W/clu-tiny.jsonl"
  measure /dev/null fresh_cluster sh -c "$B/mooncdc-apply --quiet --target \"$CH/c\$(cat $W/clu-run)?cluster=bench\" '$W/clu-tiny.jsonl'"
  local t_setup=$T
  rm -f "$tiny"* "$W/clu-tiny.jsonl"
  held=$(cq "SELECT count() FROM c$c.items")
  if [ "$held" != "$CLU_ROWS" ]; then
    log "the cluster holds $held rows, expected $CLU_ROWS"
    exit 1
  fi
  cq "SELECT * FROM c$c.items FORMAT RowBinary" >"$W/clu-items.bin"
  fresh_dist() {
    CLU_RUN=$((CLU_RUN + 1))
    cq "CREATE DATABASE b$CLU_RUN ON CLUSTER bench" >/dev/null
    cq "CREATE TABLE b$CLU_RUN.items_local ON CLUSTER bench AS c$c.items_local ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/b$CLU_RUN/items_local', '{replica}', _etl_version) ORDER BY id" >/dev/null
    cq "CREATE TABLE b$CLU_RUN.items ON CLUSTER bench AS b$CLU_RUN.items_local ENGINE = Distributed(bench, b$CLU_RUN, items_local, cityHash64(id))" >/dev/null
    echo "$CLU_RUN" >"$W/clu-run"
  }
  log "cluster: clickhouse-client RowBinary into the Distributed table (synchronous, quorum 2)"
  measure /dev/null fresh_dist sh -c "clickhouse-client --port ${tcp[0]} --insert_distributed_sync=1 --insert_quorum=2 --query \"INSERT INTO b\$(cat $W/clu-run).items FORMAT RowBinary\" <'$W/clu-items.bin'"
  local t_bin=$T
  held=$(cq "SELECT count() FROM b$CLU_RUN.items")
  if [ "$held" != "$CLU_ROWS" ]; then
    log "the RowBinary baseline inserted $held rows, expected $CLU_ROWS"
    exit 1
  fi
  local size
  size=$(mb "$snapfile")
  rm -f "$W/clu-items.bin" "$W/clu-run" "$snapfile" "$src"*
  clu_stop

  echo "## ClickHouse cluster target"
  echo
  echo "ClickHouse $version (Debian's) as a cluster on loopback: one ZooKeeper, 2 shards × 2"
  echo "replicas, all on this machine's 2 cores. A snapshot of $CLU_ROWS rows ($size MB of"
  echo "JSONL, the five-column table of the sections above) applied into one node used as a"
  echo "single server, into the cluster (\`?cluster=bench\`: replicated tables, a Distributed"
  echo "table, synchronous quorum inserts), and the same rows as RowBinary inserted by"
  echo "\`clickhouse-client\` into an identical Distributed table with the same settings. No goal"
  echo "was set; in the cluster each row is written by two replicas and every insert waits for ZooKeeper."
  echo
  echo "| loader | wall s | rows/s | vs clickhouse-client into the cluster | peak RSS MB |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  echo "| \`mooncdc-apply --target clickhouse://node1/db SNAPSHOT\` (one node, no cluster) | $t_single | $(calc '%.0f' "$CLU_ROWS / $t_single") | | $m_single |"
  echo "| baseline: \`clickhouse-client --insert_distributed_sync=1 --insert_quorum=2 --query \"INSERT INTO dist FORMAT RowBinary\" < FILE\` | $t_bin | $(calc '%.0f' "$CLU_ROWS / $t_bin") | 1.00× | |"
  echo "| \`mooncdc-apply --target 'clickhouse://node1/db?cluster=bench' SNAPSHOT\` | $t_clu | $(calc '%.0f' "$CLU_ROWS / $t_clu") | $(calc '%.2f' "$t_bin / $t_clu")× | $m_clu |"
  echo "| the same, a one-row snapshot (making the tables and the cursor table on every node) | $t_setup | | | |"
  echo
  echo "The baseline's tables exist before it is timed; mooncdc-apply's figures include making"
  echo "them (the last row: \`ON CLUSTER\` statements wait for every node). Without that, the"
  echo "cluster load takes $(calc '%.2f' "$t_clu - $t_setup") s, $(calc '%.2f' "$t_bin / ($t_clu - $t_setup)")× clickhouse-client."
  echo
}

# A compiler that started during the run makes the figures noisy: say so.
check_idle() {
  if busy; then
    log "warning: a compiler is running"
    printf '(warning: other compilations were running by the end of this section)\n\n'
  fi
}
# (Not `section && check_idle`: bash ignores `set -e` inside a function called that way.)
if [ "$section" = all ] || [ "$section" = stream ]; then
  stream_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = sqlite ]; then
  sqlite_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = sqlite ] || [ "$section" = backfill ]; then
  sqlite_backfill_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = postgres ]; then
  postgres_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = postgres ] || [ "$section" = backfill ]; then
  pg_backfill_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = postgres ] || [ "$section" = backfill ] || [ "$section" = writers ]; then
  pg_writers_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = postgres ] || [ "$section" = largetxn ]; then
  pg_large_txn_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = identity ]; then
  identity_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = clickhouse ]; then
  clickhouse_section
  check_idle
fi
if [ "$section" = all ] || [ "$section" = cluster ]; then
  cluster_section
  check_idle
fi
log "done"
