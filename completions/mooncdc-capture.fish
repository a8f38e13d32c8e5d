# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_mooncdc_capture_global_optspecs
    string join \n q/quiet v/verbose source= after= after-file= max-events= max-bytes= max-line-bytes= follow poll-ms= idle-batch-ms= heartbeat-ms= max-retries= retry-delay-ms= receive-timeout-ms= log-format= metrics-listen= stall-timeout-ms= backfill-chunk-rows= ack-from-target= pgoutput-protocol= spool-memory= max-spool-bytes= spool-dir= messages= slot= publication= h/help V/version
end

function __fish_mooncdc_capture_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_mooncdc_capture_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_mooncdc_capture_using_subcommand
    set -l cmd (__fish_mooncdc_capture_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l source -d 'The source database URL (sqlite:PATH or postgres://…)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l after -d 'Start after this cursor (JSON: {"source":"…","sequence":"…"}); default: the acknowledged position' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l after-file -d 'Start after the cursor in this file' -r -F
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l max-events -d 'Stop after N events (the batch then ends at the last event written)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l max-bytes -d 'Stop before the events written exceed B bytes (at least one event is written)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l max-line-bytes -d 'Refuse an event whose line is longer than N bytes (default 64 MiB, the line cap readers apply by default)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l poll-ms -d 'With --follow: how often to look for new changes, in milliseconds' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l idle-batch-ms -d 'With --follow: while the captured tables are idle but the source moves on, write an empty batch advancing the cursor at most every N milliseconds (PostgreSQL; keeps the slot\'s retained WAL bounded)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l heartbeat-ms -d 'With --follow: write a transactional heartbeat into the source every N milliseconds (PostgreSQL: pg_logical_emit_message; never an event), so an idle database keeps its slot and lag figures moving' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l max-retries -d 'With --follow: reconnect after a broken connection or a restarting server at most N times in a row (PostgreSQL)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l retry-delay-ms -d 'With --follow: wait this long before the first reconnect, doubled each time up to 30 s' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l receive-timeout-ms -d 'With --follow: reconnect when nothing (no change, no keepalive) came from the server for this long, in milliseconds; 0: never (PostgreSQL)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l log-format -d 'Messages on standard error as plain text or JSON lines (for a supervisor or journald)' -r -f -a "text\t'`mooncdc-x: message`'
json\t'One JSON object a line: ts, level, tool, message, fields'"
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l metrics-listen -d 'With --follow: serve Prometheus metrics on /metrics and health on /livez and /readyz at ADDR:PORT (e.g. 127.0.0.1:9187)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l stall-timeout-ms -d 'With --metrics-listen: /readyz says 503 after this long without progress' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l backfill-chunk-rows -d 'With --follow: rows each backfill chunk reads (mooncdc-capture backfill)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l ack-from-target -d 'With --follow: acknowledge up to the cursor this target (sqlite: or clickhouse:) durably holds' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l pgoutput-protocol -d 'PostgreSQL: the pgoutput protocol: auto, the highest the server has with large transactions sent as they happen (2 on 14 and 15, 4 on 16+), or 1, where the server holds each transaction until it commits' -r -f -a "auto\t'The highest the server has, with streaming of large transactions'
1\t'Protocol 1: the server holds each transaction until it commits'"
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l spool-memory -d 'PostgreSQL: bytes that large transactions in progress hold in memory, all together, until they commit; the rest waits in spool files' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l max-spool-bytes -d 'PostgreSQL: fail when large transactions in progress hold more than B bytes in all (memory and spool files); default: as much as the spool folder has room for' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l spool-dir -d 'PostgreSQL: the folder for the spool files of large transactions in progress (default: TMPDIR, else /tmp)' -r -F
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l messages -d 'PostgreSQL: write the logical messages (pg_logical_emit_message) of this prefix as message records; repeatable (prefixes starting with mooncdc are the capture\'s own)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -l follow -d 'Keep writing batches as changes commit'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -s V -l version -d 'Print version'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "init" -d 'Install capture: change log, metadata and triggers (default: every user table)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "verify" -d 'Check that capture is installed and current; exit 1 on drift'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "upgrade" -d 'Rebuild capture for the current version and schema, keeping unacknowledged changes'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "migrate" -d 'SQLite: run the application\'s schema change and rebuild capture in one transaction (so DROP COLUMN works and no change is logged with a stale column list)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "backfill" -d 'Bring tables\' current rows into the stream, chunk by chunk, through the capture that follows this source'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "grants" -d 'PostgreSQL: print the SQL that gives a capture role what snapshot, follow, audit and backfill need on this publication\'s tables'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "status" -d 'Print identity, acknowledged position, high water and backlog'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "ack" -d 'Acknowledge (and discard) changes through a position'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "read" -d 'Write one batch stream of the changes after a cursor (the default)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l source -d 'The source database URL (sqlite:PATH or postgres://…)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l table -d 'Capture only this table (repeatable; PostgreSQL: schema.table)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l replica-identity -d 'PostgreSQL: the replica identity to set, `full` (the default: updates and deletes carry the whole old row) or `default` (the key only, and unchanged TOASTed values unsent: far less WAL; the targets fill them); for every table this init sets up, or one table as TABLE=MODE (repeatable)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l ddl -d 'PostgreSQL: also install the DDL trigger, so renamed columns are carried (needs the right to create event triggers)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l failover -d 'PostgreSQL 17+: make the slot a failover slot, which a standby with sync_replication_slots keeps, so capture goes on after the standby is promoted (an existing slot is altered)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -l no-slot -d 'PostgreSQL: make the publication and replica identities but no slot (on a primary whose standby will hold the slot: run init against the standby next)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand init" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -l source -d 'The source database URL' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -l output-format -d 'Output format: each table\'s replica identity (PostgreSQL) and the verdict on standard output, drift lines on standard error; or one JSON object on standard output' -r -f -a "text\t''
json\t''"
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand verify" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand upgrade" -l source -d 'The source database URL' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand upgrade" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand upgrade" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand upgrade" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand upgrade" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand upgrade" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand migrate" -l source -d 'The source database URL (sqlite:PATH)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand migrate" -l sql -d 'The SQL to run, from a file' -r -F
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand migrate" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand migrate" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand migrate" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -l source -d 'The source database URL (sqlite:PATH or postgres://…)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -l table -d 'Backfill this table (repeatable; PostgreSQL: schema.table)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -l all -d 'Backfill every captured table (a new pipeline\'s initial load)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -l resync -d 'Re-read a table the targets hold already (the repair for what an audit found)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand backfill" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -l source -d 'The source database URL' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -l role -d 'The capture role the script is for' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand grants" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -l source -d 'The source database URL' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -l output-format -d 'Output format: `key: value` lines, or one JSON object (numbers as numbers)' -r -f -a "text\t''
json\t''"
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand status" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -l source -d 'The source database URL' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -l through -d 'Acknowledge through this sequence' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -l cursor-file -d 'Acknowledge through the cursor in this file' -r -F
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -l cursor -d 'Acknowledge through this cursor (JSON)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand ack" -s h -l help -d 'Print help'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l source -d 'The source database URL (sqlite:PATH or postgres://…)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l after -d 'Start after this cursor (JSON: {"source":"…","sequence":"…"}); default: the acknowledged position' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l after-file -d 'Start after the cursor in this file' -r -F
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l max-events -d 'Stop after N events (the batch then ends at the last event written)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l max-bytes -d 'Stop before the events written exceed B bytes (at least one event is written)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l max-line-bytes -d 'Refuse an event whose line is longer than N bytes (default 64 MiB, the line cap readers apply by default)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l poll-ms -d 'With --follow: how often to look for new changes, in milliseconds' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l idle-batch-ms -d 'With --follow: while the captured tables are idle but the source moves on, write an empty batch advancing the cursor at most every N milliseconds (PostgreSQL; keeps the slot\'s retained WAL bounded)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l heartbeat-ms -d 'With --follow: write a transactional heartbeat into the source every N milliseconds (PostgreSQL: pg_logical_emit_message; never an event), so an idle database keeps its slot and lag figures moving' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l max-retries -d 'With --follow: reconnect after a broken connection or a restarting server at most N times in a row (PostgreSQL)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l retry-delay-ms -d 'With --follow: wait this long before the first reconnect, doubled each time up to 30 s' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l receive-timeout-ms -d 'With --follow: reconnect when nothing (no change, no keepalive) came from the server for this long, in milliseconds; 0: never (PostgreSQL)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l log-format -d 'Messages on standard error as plain text or JSON lines (for a supervisor or journald)' -r -f -a "text\t'`mooncdc-x: message`'
json\t'One JSON object a line: ts, level, tool, message, fields'"
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l metrics-listen -d 'With --follow: serve Prometheus metrics on /metrics and health on /livez and /readyz at ADDR:PORT (e.g. 127.0.0.1:9187)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l stall-timeout-ms -d 'With --metrics-listen: /readyz says 503 after this long without progress' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l backfill-chunk-rows -d 'With --follow: rows each backfill chunk reads (mooncdc-capture backfill)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l ack-from-target -d 'With --follow: acknowledge up to the cursor this target (sqlite: or clickhouse:) durably holds' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l pgoutput-protocol -d 'PostgreSQL: the pgoutput protocol: auto, the highest the server has with large transactions sent as they happen (2 on 14 and 15, 4 on 16+), or 1, where the server holds each transaction until it commits' -r -f -a "auto\t'The highest the server has, with streaming of large transactions'
1\t'Protocol 1: the server holds each transaction until it commits'"
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l spool-memory -d 'PostgreSQL: bytes that large transactions in progress hold in memory, all together, until they commit; the rest waits in spool files' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l max-spool-bytes -d 'PostgreSQL: fail when large transactions in progress hold more than B bytes in all (memory and spool files); default: as much as the spool folder has room for' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l spool-dir -d 'PostgreSQL: the folder for the spool files of large transactions in progress (default: TMPDIR, else /tmp)' -r -F
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l messages -d 'PostgreSQL: write the logical messages (pg_logical_emit_message) of this prefix as message records; repeatable (prefixes starting with mooncdc are the capture\'s own)' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -l follow -d 'Keep writing batches as changes commit'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -s q -l quiet -d 'No messages but errors and warnings on standard error (every subcommand)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -s v -l verbose -d 'read/follow: one line per batch written on standard error (its end, its events)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand read" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "init" -d 'Install capture: change log, metadata and triggers (default: every user table)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "verify" -d 'Check that capture is installed and current; exit 1 on drift'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "upgrade" -d 'Rebuild capture for the current version and schema, keeping unacknowledged changes'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "migrate" -d 'SQLite: run the application\'s schema change and rebuild capture in one transaction (so DROP COLUMN works and no change is logged with a stale column list)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "backfill" -d 'Bring tables\' current rows into the stream, chunk by chunk, through the capture that follows this source'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "grants" -d 'PostgreSQL: print the SQL that gives a capture role what snapshot, follow, audit and backfill need on this publication\'s tables'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "status" -d 'Print identity, acknowledged position, high water and backlog'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "ack" -d 'Acknowledge (and discard) changes through a position'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "read" -d 'Write one batch stream of the changes after a cursor (the default)'
complete -c mooncdc-capture -n "__fish_mooncdc_capture_using_subcommand help; and not __fish_seen_subcommand_from init verify upgrade migrate backfill grants status ack read help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
