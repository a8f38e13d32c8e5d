complete -c mooncdc-split -l max-events -d 'At most N events per batch' -r
complete -c mooncdc-split -l max-bytes -d 'At most B bytes per batch written as JSONL (a single larger event gets its own batch)' -r
complete -c mooncdc-split -l output-dir -d 'Write one file per batch into DIR, named P-<start>-<end>.jsonl (or .json)' -r -F
complete -c mooncdc-split -l prefix -d 'File name prefix with --output-dir (a name, not a path)' -r
complete -c mooncdc-split -l output-format -d 'Output format' -r -f -a "jsonl\t'JSON lines (`mooncdc.jsonl.v1`): header, events, commit'
json\t'One JSON document per batch (`mooncdc.batch.v1`)'
objects\t'A view for people and jq, never an input: one object per event, rows as {column: value} with natural JSON values'"
complete -c mooncdc-split -l spool-dir -d 'Hold the part of a batch past its first 8 MiB in a temporary file in DIR until the batch\'s commit is checked (default: TMPDIR, else /tmp; room for the largest batch)' -r -F
complete -c mooncdc-split -l max-line-bytes -d 'Refuse a line longer than N bytes (default 64 MiB; a JSON document counts as one line)' -r
complete -c mooncdc-split -l max-input-bytes -d 'Refuse an input (each file, or standard input) longer than N bytes' -r
complete -c mooncdc-split -s q -l quiet -d 'No messages but errors and warnings on standard error'
complete -c mooncdc-split -s v -l verbose -d 'What was split, on standard error at the end: batches in, pieces out, events, the time'
complete -c mooncdc-split -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-split -s V -l version -d 'Print version'
