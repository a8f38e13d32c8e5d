complete -c mooncdc-audit -l source -d 'The source database URL' -r
complete -c mooncdc-audit -l target -d 'The target database URL' -r
complete -c mooncdc-audit -l table -d 'Only this table (repeatable)' -r
complete -c mooncdc-audit -l format -l output-format -d 'Output format (`--output-format`, as the other tools say, is the same)' -r -f -a "text\t''
jsonl\t''"
complete -c mooncdc-audit -l slot -d 'PostgreSQL: the replication slot' -r
complete -c mooncdc-audit -l publication -d 'PostgreSQL: the publication' -r
complete -c mooncdc-audit -s q -l quiet -d 'No progress on standard error'
complete -c mooncdc-audit -s v -l verbose -d 'A closing line on standard error: tables, rows compared, the time (the report itself names each table)'
complete -c mooncdc-audit -s h -l help -d 'Print help'
complete -c mooncdc-audit -s V -l version -d 'Print version'
