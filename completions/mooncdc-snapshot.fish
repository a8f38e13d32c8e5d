complete -c mooncdc-snapshot -l source -d 'The source database URL (sqlite:PATH or postgres://…)' -r
complete -c mooncdc-snapshot -l table -d 'Only this table (repeatable; default: every captured table)' -r
complete -c mooncdc-snapshot -l output-format -d 'Output format' -r -f -a "jsonl\t'JSON lines (`mooncdc.snapshot-jsonl.v1`): header, rows, commit'
json\t'One JSON document (`mooncdc.snapshot.v1`)'"
complete -c mooncdc-snapshot -s o -l output -d 'Write to FILE (atomically) instead of standard output (- is standard output)' -r -F
complete -c mooncdc-snapshot -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-snapshot -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-snapshot -l slot-timeout -d 'PostgreSQL: how long to wait for open transactions when creating the snapshot\'s slot, in seconds' -r
complete -c mooncdc-snapshot -l jobs -d 'PostgreSQL: copy up to N tables at once, each session importing the same snapshot' -r
complete -c mooncdc-snapshot -l spool-dir -d 'PostgreSQL with --jobs N (N > 1): hold each table\'s rows, past their first 4 MiB, in a temporary file in DIR until every table has been copied (default: TMPDIR, else /tmp; room for about the whole snapshot)' -r -F
complete -c mooncdc-snapshot -s q -l quiet -d 'No progress on standard error'
complete -c mooncdc-snapshot -s v -l verbose -d 'One line per table written and a summary on standard error (rows, the cursor, the time)'
complete -c mooncdc-snapshot -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-snapshot -s V -l version -d 'Print version'
