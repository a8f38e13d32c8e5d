complete -c mooncdc-merge -l output-format -d 'Output format' -r -f -a "jsonl\t'JSON lines (`mooncdc.jsonl.v1`): header, events, commit'
json\t'One JSON document per batch (`mooncdc.batch.v1`)'
objects\t'A view for people and jq, never an input: one object per event, rows as {column: value} with natural JSON values'"
complete -c mooncdc-merge -s o -l output -d 'Write the merged batch to FILE (atomically) instead of standard output (- is standard output)' -r -F
complete -c mooncdc-merge -l spool-dir -d 'Hold the part of a batch past its first 8 MiB in a temporary file in DIR until the batch\'s commit is checked (default: TMPDIR, else /tmp; room for the largest batch)' -r -F
complete -c mooncdc-merge -l max-line-bytes -d 'Refuse a line longer than N bytes (default 64 MiB; a JSON document counts as one line)' -r
complete -c mooncdc-merge -l max-input-bytes -d 'Refuse an input (each file, or standard input) longer than N bytes' -r
complete -c mooncdc-merge -s q -l quiet -d 'No messages but errors and warnings on standard error'
complete -c mooncdc-merge -s v -l verbose -d 'What was merged, on standard error at the end: batches in, events, the time'
complete -c mooncdc-merge -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-merge -s V -l version -d 'Print version'
