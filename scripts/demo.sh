#!/usr/bin/env bash
# The main job end to end on the embedded default (SQLite -> SQLite):
# a sample application database, capture, snapshot, a burst of changes,
# catch-up through compact, and an audit that must say "equal".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bins --example sample_app
B=target/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
app="sqlite:$work/app.db" proj="sqlite:$work/proj.db"

step() { printf '\n== %s\n' "$*"; }
step "sample application database (1000 customers, orders, settings)"
$B/examples/sample_app create "$work/app.db" 1000
step "install capture (triggers into a change log in the same file)"
$B/mooncdc-capture init --source "$app"
step "a first burst of changes, then a snapshot into the projection"
$B/examples/sample_app burst "$work/app.db" 500 1
$B/mooncdc-snapshot --source "$app" | $B/mooncdc-apply --target "$proj"
step "more changes: inserts, updates, deletes, key changes, rolled-back transactions"
$B/examples/sample_app burst "$work/app.db" 3000 2
$B/mooncdc-capture status --source "$app"
step "catch up: capture after the projection's cursor | compact | apply"
$B/mooncdc-capture --source "$app" --after "$($B/mooncdc-apply cursor --target "$proj")" \
  | $B/mooncdc-compact | $B/mooncdc-apply --target "$proj"
step "acknowledge what the projection durably holds"
$B/mooncdc-capture ack --source "$app" --cursor "$($B/mooncdc-apply cursor --target "$proj")"
step "audit"
$B/mooncdc-audit --source "$app" --target "$proj"
