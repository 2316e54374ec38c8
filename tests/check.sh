# The shell suites' common prelude, sourced by each (". check.sh" beside
# it): a scratch folder removed at exit, and the counters and helpers that
# end every suite with "N passed, N failed".
#   ok NAME / bad NAME    count a check as passed or failed, and say so
#   check NAME EXPR       ok if the shell expression EXPR succeeds, else bad
#                         (and returns 1, so "check ... || indent "$out""
#                         shows what failed)
#   same NAME WANT GOT    ok if GOT is exactly WANT, else bad showing both
#   has NAME NEEDLE TEXT  ok if TEXT contains the fixed string NEEDLE, else
#                         bad showing TEXT
#   indent TEXT           TEXT indented under a check's line
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; return 1; fi; }
indent() { sed 's/^/     /' <<<"$1"; }
same() {
    if [ "$2" = "$3" ]; then
        ok "$1"
    else
        bad "$1, got:"; indent "$3"
        echo "     want:"; indent "$2"
    fi
}
has() {
    if grep -qF -- "$2" <<<"$3"; then
        ok "$1"
    else
        bad "$1: no '$2' in:"; indent "$3"
    fi
}
