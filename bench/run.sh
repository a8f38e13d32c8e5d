#!/usr/bin/env bash
# The benchmark harness: measures the tools against named baselines run on the
# same machine in the same run, and prints markdown tables (results recorded
# in docs/BENCHMARKS.md). Benchmarks are a separate command, never a test.
#
#   bash bench/run.sh [stream|sqlite|all]      # default: all
#
# Scratch data goes to bench/work/ (git-ignored; under 1 GB at the default
# sizes). Progress goes to standard error, the tables to standard output.
# Short measurements are run BENCH_RUNS times (default 3) and the median is
# reported. Sizes can be changed through the environment:
#   BENCH_BIG_MB=160 BENCH_SMALL_MB=40       stream section input sizes (MB = 10^6 bytes)
#   BENCH_WRITE_ROWS=200000                  application writes, with and without capture
#   BENCH_APPLY_ROWS=500000                  rows applied into the projection
#   BENCH_AUDIT_ROWS=1000000                 rows audited
# Needs jq, GNU time (/usr/bin/time), sqlite3 and sqldiff; installs the missing
# ones from Debian's packages (as root, or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

section=${1:-all}
case $section in
  stream | sqlite | all) ;;
  *)
    echo "usage: bench/run.sh [stream|sqlite|all]" >&2
    exit 2
    ;;
esac
RUNS=${BENCH_RUNS:-3}
BIG_MB=${BENCH_BIG_MB:-160}
SMALL_MB=${BENCH_SMALL_MB:-40}
WRITE_ROWS=${BENCH_WRITE_ROWS:-200000}
APPLY_ROWS=${BENCH_APPLY_ROWS:-500000}
AUDIT_ROWS=${BENCH_AUDIT_ROWS:-1000000}
# Goals of the issue.
GOAL_JQ_RATIO=10 GOAL_RSS_MB=32 GOAL_INSERT=2 GOAL_UPDATE=2.5 GOAL_APPLY=0.5

log() { printf 'bench: %s\n' "$*" >&2; }

need=()
command -v jq >/dev/null 2>&1 || need+=(jq)
[ -x /usr/bin/time ] || need+=(time)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v sqldiff >/dev/null 2>&1 || need+=(sqlite3-tools)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} from Debian's packages"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

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
# standard output to OUT. Sets T (median wall seconds) and M (median peak RSS, MB).
measure() {
  local out=$1 prep=$2
  shift 2
  local ts=() ms=() t m r
  for ((r = 0; r < RUNS; r++)); do
    $prep
    if ! /usr/bin/time -f '%e %M' -o "$W/time.out" "$@" >"$out" 2>>"$ERR"; then
      log "failed: $*"
      tail -n 5 "$ERR" >&2
      exit 1
    fi
    read -r t m <"$W/time.out"
    ts+=("$t")
    ms+=("$m")
  done
  T=$(median "${ts[@]}")
  M=$(calc '%.1f' "$(median "${ms[@]}") * 1024 / 1e6")
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
  local -a t_big m_big m_small
  local i
  for i in "${!names[@]}"; do
    log "stream: ${names[$i]} on $BIG_MB MB"
    run_tool "$i" "$big"
    t_big[i]=$T m_big[i]=$M
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
  echo "| command | wall s | MB/s | vs jq | peak RSS MB | goal: ≥ ${GOAL_JQ_RATIO}× jq | goal: RSS ≤ $GOAL_RSS_MB MB |"
  echo "| --- | ---: | ---: | ---: | ---: | --- | --- |"
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
    echo "| \`${names[$i]}\` | ${t_big[i]} | $rate | ${ratio}× | ${m_big[i]} | $g1 | $g2 |"
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
  local t_apply=$T m_apply=$M
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
  local t_shell=$T m_shell=$M

  echo "## SQLite projection: apply throughput"
  echo
  echo "$APPLY_ROWS inserts of the same five-column rows: a capture stream read by"
  echo "\`mooncdc-capture\` from a source with capture installed ($(mb "$stream") MB of JSONL, one"
  echo "batch, so one transaction), applied to a new projection, against loading the same"
  echo "rows into a new WAL database in one transaction."
  echo
  echo "| loader | wall s | rows/s | vs prepared-insert loop | peak RSS MB | goal: ≥ ${GOAL_APPLY}× the loop |"
  echo "| --- | ---: | ---: | ---: | ---: | --- |"
  echo "| baseline: rusqlite prepared INSERT loop, one transaction (rows already in memory; times the loop and commit) | $t_loop | $(calc '%.0f' "$APPLY_ROWS / $t_loop") | 1.00× | | baseline |"
  echo "| baseline: \`sqlite3\` shell reading its own \`.dump\` (SQL text, one transaction) | $t_shell | $(calc '%.0f' "$APPLY_ROWS / $t_shell") | $(calc '%.2f' "$t_loop / $t_shell")× | $m_shell | (baseline) |"
  echo "| \`mooncdc-apply --target sqlite:… FILE\` (whole process) | $t_apply | $(calc '%.0f' "$APPLY_ROWS / $t_apply") | $(calc '%.2f' "$t_loop / $t_apply")× | $m_apply | $(met "$t_loop / $t_apply >= $GOAL_APPLY") |"
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

# A compiler that started during the run makes the figures noisy: say so.
check_idle() {
  if busy; then
    log "warning: a compiler is running"
    printf '(warning: other compilations were running by the end of this section)\n\n'
  fi
}
# (Not `section && check_idle`: bash ignores `set -e` inside a function called that way.)
if [ "$section" != sqlite ]; then
  stream_section
  check_idle
fi
if [ "$section" != stream ]; then
  sqlite_section
  check_idle
fi
log "done"
