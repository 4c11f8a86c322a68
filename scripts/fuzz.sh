#!/usr/bin/env bash
# Runs every fuzz target of anteroom, one after the other, for FUZZTIME each
# (default 60s). Plain `go test` runs only the checked-in seed corpora
# (testdata/fuzz/<Target>/); this script searches beyond them. A failing
# input is written to testdata/fuzz/<Target>/ of its package: check it in
# with the fix, so that CI replays it.
#
#   scripts/fuzz.sh                    # every target, 60s each
#   FUZZTIME=10s scripts/fuzz.sh       # shorter
#   scripts/fuzz.sh FuzzJoinBody       # only the named targets
#   scripts/fuzz.sh -l                 # list the targets
set -euo pipefail
cd "$(dirname "$0")/.."

# package  target
TARGETS="
./gate/token     FuzzVerify
./gate           FuzzJoinBody
./gate           FuzzLeaveBody
./gate           FuzzReleaseBody
./cmd/anteroom   FuzzParseConfig
./cmd/anteroom   FuzzConfigEnv
./broadcast      FuzzEncodeGlobal
./broadcast      FuzzEncodeSession
"
FUZZTIME="${FUZZTIME:-60s}"

# A target added to the code but not to the list above is an error: it would
# never be fuzzed.
listed=$(echo "$TARGETS" | awk 'NF==2 {print $2}' | sort)
found=$(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sed 's/^func //' | sort -u)
if [ "$listed" != "$found" ]; then
	echo "fuzz.sh: the list of targets is out of date:" >&2
	diff <(echo "$listed") <(echo "$found") >&2 || true
	exit 1
fi

if [ "${1:-}" = "-l" ]; then
	echo "$TARGETS" | awk 'NF==2 {printf "%-16s %s\n", $1, $2}'
	exit 0
fi

failed=()
ran=0
while read -r pkg target; do
	[ -n "$target" ] || continue
	if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$target"; then
		continue
	fi
	ran=$((ran + 1))
	echo "=== $target ($pkg, $FUZZTIME)"
	if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg"; then
		failed+=("$target")
	fi
done <<<"$TARGETS"

if [ "$ran" -eq 0 ]; then
	echo "fuzz.sh: no target named $*; see scripts/fuzz.sh -l" >&2
	exit 2
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz.sh: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz.sh: $ran targets passed"
