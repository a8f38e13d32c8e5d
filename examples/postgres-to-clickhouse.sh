#!/usr/bin/env bash
# PostgreSQL → ClickHouse, continuously: the walkthrough of
# docs/QUICKSTART.md, step by step. CI runs this very file
# against throwaway servers (tests/quickstart.rs).
#
#   OWNER  a PostgreSQL URL of the tables' owner, with REPLICATION (init, backfill)
#   PG     a PostgreSQL URL of the capture role (docs/POSTGRES.md, "Rights")
#   CH     a ClickHouse URL naming an existing database
set -euo pipefail
set -m   # the pipeline below runs as a job of its own, stopped as one
: "${OWNER:?a PostgreSQL URL of the owner of the tables}" "${PG:?a PostgreSQL URL of the capture role}"
: "${CH:?a ClickHouse URL, e.g. clickhouse://mooncdc@127.0.0.1:8123/shop}"

# 1. Something to replicate.
psql -qX -v ON_ERROR_STOP=1 "$OWNER" <<'SQL'
CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, joined timestamptz NOT NULL DEFAULT now());
INSERT INTO customers (id, name) SELECT g, 'customer ' || g FROM generate_series(1, 25000) g;
SQL

# 2. Set capture up (the owner): a publication, FULL replica identity, a slot.
mooncdc-capture init --source "$OWNER" --table public.customers

# 3. The first copy, then follow from the position it holds.
mooncdc-snapshot -q --source "$PG" | mooncdc-apply -q --target "$CH"
mooncdc-capture --source "$PG" --after "$(mooncdc-apply cursor --target "$CH")" \
    --follow --ack-from-target "$CH" \
  | mooncdc-apply -q --target "$CH" &

# 4. The application goes on; a table is added to the running pipeline,
#    rows and all.
psql -qX -v ON_ERROR_STOP=1 "$OWNER" <<'SQL'
UPDATE customers SET name = 'renamed' WHERE id <= 10;
DELETE FROM customers WHERE id > 24990;
CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL, total numeric(12,2) NOT NULL);
INSERT INTO orders SELECT g, g % 100 + 1, g * 1.25 FROM generate_series(1, 5000) g;
-- The backfill's chunks read the table as any query does (docs/BACKFILL.md).
GRANT SELECT ON orders TO mooncdc_capture;
SQL
mooncdc-capture backfill --source "$OWNER" --table public.orders

# 5. Wait until the target has everything, checking as the audit does.
for _ in $(seq 120); do
  if mooncdc-audit -q --source "$PG" --target "$CH" >/dev/null 2>&1; then break; fi
  sleep 1
done

# 6. Stop the pipeline (as systemd would: SIGTERM), then the verdict.
kill -TERM %1
wait %1
mooncdc-audit -q --source "$PG" --target "$CH"
mooncdc-apply cursor --target "$CH" --position
