complete -c mooncdc-compact -l schema -d 'Schemas for tables the stream\'s headers do not describe: a snapshot file or a JSON array of schemas' -r -F
complete -c mooncdc-compact -l output-format -d 'Output format' -r -f -a "jsonl\t'JSON lines (`mooncdc.jsonl.v1`): header, events, commit'
json\t'One JSON document per batch (`mooncdc.batch.v1`)'
objects\t'A view for people and jq, never an input: one object per event, rows as {column: value} with natural JSON values'"
complete -c mooncdc-compact -l spool-dir -d 'Hold the part of a batch past its first 8 MiB in a temporary file in DIR until the batch\'s commit is checked (default: TMPDIR, else /tmp; room for the largest batch)' -r -F
complete -c mooncdc-compact -l max-line-bytes -d 'Refuse a line longer than N bytes (default 64 MiB; a JSON document counts as one line)' -r
complete -c mooncdc-compact -l max-input-bytes -d 'Refuse an input (each file, or standard input) longer than N bytes' -r
complete -c mooncdc-compact -s q -l quiet -d 'No messages but errors and warnings on standard error'
complete -c mooncdc-compact -s v -l verbose -d 'What was compacted, on standard error at the end: batches, events in and out, the time'
complete -c mooncdc-compact -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-compact -s V -l version -d 'Print version'
