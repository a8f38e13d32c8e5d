# zsh -f zsh_complete.zsh DIR LINE: what zsh's completion system offers for
# LINE typed at an interactive prompt, then Tab (complete-word), one match
# per line, with the completion functions of DIR first in $fpath. Every
# compadd call is wrapped to print its matches; the markers are split in
# the typed text, so the terminal's echo of it never matches them. Exit 1
# when the completion system did not finish within 10 s.
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PROMPT='' ; fpath=(${(q)1} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compadd() { local -a __h; builtin compadd -O __h "$@"; local m; for m in $__h; do print -r -- "<h""it>$m</h""it>"; done; builtin compadd "$@" }'
zpty -w z 'endmark() { print -r -- "<e""nd/>" }; comppostfuncs=(endmark); bindkey "^I" complete-word'
zpty -w -n z "$2"$'\t'
local out= chunk
integer i
for i in {1..100}; do
  if zpty -rt z chunk; then out+=$chunk; fi
  [[ $out == *'<end/>'* ]] && break
  sleep 0.1
done
zpty -d z
print -r -- $out | grep -o '<hit>[^<]*</hit>' | sed 's/<hit>\(.*\)<\/hit>/\1/' | sort -u
[[ $out == *'<end/>'* ]]
