# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_mooncdc_apply_global_optspecs
    string join \n target= engine= on-conflict= existing-rows= log-format= metrics-listen= stall-timeout-ms= q/quiet v/verbose spool-dir= max-line-bytes= max-input-bytes= h/help V/version
end

function __fish_mooncdc_apply_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_mooncdc_apply_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_mooncdc_apply_using_subcommand
    set -l cmd (__fish_mooncdc_apply_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l target -d 'The target URL: sqlite:PATH, postgres://…, clickhouse://user@host:8123/db, or dir:PATH (an archive of batch files)' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l engine -d 'Table engine (ClickHouse targets; also engine= in the URL) [default: replacing]' -r -f -a "replacing\t'Current state (ReplacingMergeTree)'
history\t'Append-only change history (MergeTree)'"
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l on-conflict -d 'What to do when a stored row contradicts an event\'s image' -r -f -a "error\t'Refuse the batch: the target diverges from the source'
overwrite\t'Make the row what the event says'"
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l existing-rows -d 'What a snapshot does with rows a target table already holds' -r -f -a "refuse\t'Refuse the snapshot, naming the table'
replace\t'Empty those tables first, in the snapshot\'s transaction'
keep\t'Load the snapshot\'s rows beside them (--on-conflict decides clashes)'"
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l log-format -d 'Messages on standard error as plain text or JSON lines (for a supervisor or journald)' -r -f -a "text\t'`mooncdc-x: message`'
json\t'One JSON object a line: ts, level, tool, message, fields'"
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l metrics-listen -d 'Serve Prometheus metrics on /metrics and health on /livez and /readyz at ADDR:PORT (e.g. 127.0.0.1:9188)' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l stall-timeout-ms -d 'With --metrics-listen: /readyz says 503 after this long without progress' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l spool-dir -d 'ClickHouse targets: hold a batch\'s rows past the first 8 MiB of a table in a temporary file in DIR until the batch\'s commit is checked (default: TMPDIR, else /tmp; room for the largest batch\'s rows)' -r -F
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l max-line-bytes -d 'Refuse a line longer than N bytes (default 64 MiB; a JSON document counts as one line)' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -l max-input-bytes -d 'Refuse an input (each file, or standard input) longer than N bytes' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -s q -l quiet -d 'No progress on standard error'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -s v -l verbose -d 'One line per batch committed on standard error (its end, its events, the time)'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -s V -l version -d 'Print version'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -a "cursor" -d 'Print the target\'s stored cursor as JSON; exit 1 if it holds none'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -a "cleanup" -d 'ClickHouse targets: remove deleted rows from storage (the replacing engine\'s cleanup merge, OPTIMIZE … FINAL CLEANUP), one table at a time'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cursor" -l target -d 'The target database URL' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cursor" -l source-identity -d 'Exit 1 unless the stored cursor is of this source' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cursor" -l position -d 'Print the position in the source\'s own terms instead of the JSON (PostgreSQL: the LSN as capture status shows it, with the event inside its transaction; SQLite: the log sequence)'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cursor" -s h -l help -d 'Print help'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cleanup" -l target -d 'The ClickHouse target URL' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cleanup" -l table -d 'Only the table of this source table (repeatable; default: every replacing table of the database)' -r
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand cleanup" -s h -l help -d 'Print help'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand help; and not __fish_seen_subcommand_from cursor cleanup help" -f -a "cursor" -d 'Print the target\'s stored cursor as JSON; exit 1 if it holds none'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand help; and not __fish_seen_subcommand_from cursor cleanup help" -f -a "cleanup" -d 'ClickHouse targets: remove deleted rows from storage (the replacing engine\'s cleanup merge, OPTIMIZE … FINAL CLEANUP), one table at a time'
complete -c mooncdc-apply -n "__fish_mooncdc_apply_using_subcommand help; and not __fish_seen_subcommand_from cursor cleanup help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
