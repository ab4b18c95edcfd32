#!/usr/bin/env bash
# Counts the instructions the engine's benchmark leaves run per batch, and
# prints each leaf's count and its ratios to the direct loop and to the
# guarded loop (the direct loop with what any loop keeping the engine's
# guarantees pays) of the same benchmark. Unlike time, the
# count does not move with the machine's load: the same code gives the same
# figure in every run, so it tells the engine's own cost from the noise of
# a shared 2-core machine (docs/BENCHMARKS.md, "Instructions per batch").
#
# It runs each leaf under valgrind's cachegrind with GOMAXPROCS=1 (with more
# than one P, idle threads spin under valgrind and their instructions are
# counted too), twice, with N and 3N batches, and divides the difference by
# 2N: what a run does once (building the processor, the testing package's
# own work) drops out.
#
#   N=100000      batches of the shorter run
#   LEAVES='BenchmarkSuccessPath/direct BenchmarkSuccessPath/guarded ...'
#
# It needs valgrind (Debian's package); nothing in CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind > /dev/null; then
	echo "instructions.sh: valgrind is not installed (Debian: apt-get install valgrind)" >&2
	exit 1
fi
n=${N:-100000}
leaves=${LEAVES:-BenchmarkSuccessPath/direct BenchmarkSuccessPath/guarded BenchmarkSuccessPath/processor BenchmarkEngineCost/guarded BenchmarkEngineCost/processor}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/stream.test" ./stream

# count LEAF BATCHES prints the instructions of one run of LEAF.
count() {
	local bench=${1%%/*} leaf=${1#*/}
	GOMAXPROCS=1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
		"$tmp/stream.test" -test.run '^$' -test.bench "^$bench\$/^$leaf\$" -test.benchtime "${2}x" 2>&1 |
		awk '/I +refs:/ { gsub(",", "", $NF); print $NF }'
}

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- stream internal || echo ' (with changes)'), $(go env GOVERSION), N=$n"
echo
echo "| leaf | instructions per batch | direct loop / leaf | guarded loop / leaf |"
echo "|---|---|---|---|"
declare -A per
# ratio BASE LEAF prints BASE's count over LEAF's, or - without BASE.
ratio() {
	if [ -z "${per[$1]:-}" ]; then
		echo -
		return
	fi
	awk -v d="${per[$1]}" -v x="${per[$2]}" 'BEGIN { printf "%.3f", d / x }'
}
for l in $leaves; do
	a=$(count "$l" "$n")
	b=$(count "$l" $((3 * n)))
	if [ -z "$a" ] || [ -z "$b" ]; then
		echo "instructions.sh: no count for $l (does the leaf exist?)" >&2
		exit 1
	fi
	per[$l]=$(((b - a) / (2 * n)))
	echo "| $l | ${per[$l]} | $(ratio "${l%%/*}/direct" "$l") | $(ratio "${l%%/*}/guarded" "$l") |"
done
