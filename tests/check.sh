# The shell suites' common prelude, sourced by each (". check.sh" beside
# it): a scratch folder removed at exit, and the counters and helpers that
# end every suite with "N passed, N failed".
#   ok NAME / bad NAME    count a check as passed or failed, and say so
#   check NAME EXPR       ok if the shell expression EXPR succeeds, else bad
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
