#!/usr/bin/env bash
# Runs the conformance and reliability suites (the integration module's
# TestFranz, TestKafkago, TestReliability and any other suite named by -r)
# many times and reports, for every case, how many runs it failed in.
#
#   scripts/flaky.sh [-k RUNS] [-b RUNS] [-e RUNS] [-r REGEX] [-E REGEX] [-R] [-o DIR]
#
#   -k RUNS   runs on kfake, in-process (default 20)
#   -b RUNS   runs on the real Apache Kafka broker (default 5; 0 skips it).
#             The broker is started with integration/kafka.sh unless
#             REDELIVER_KAFKA_BROKERS names one already.
#   -e RUNS   runs of the Event Hubs reliability suite (-E) on the
#             in-memory hubs: memhub, and memhub+azurite when
#             REDELIVER_AZURE_STORAGE is set or Azurite can be started with
#             integration/azurite.sh (its own run directory); default 0
#   -r REGEX  the top-level tests to run (default TestFranz|TestKafkago|TestReliability)
#   -E REGEX  the -test.run pattern of the Event Hubs runs (default
#             '^TestEventHubsReliability$/^memhub', both stores; an
#             Azurite run takes about 5 minutes, so for many runs name
#             scenarios: '^TestEventHubsReliability$/^memhub\+azurite$/./^CommitFailures')
#   -R        build without the race detector (faster runs; the race
#             detector is what CI runs on the adapters' suites)
#   -t SECS   start no run that would end after SECS seconds from the
#             start, judging by the previous run's time (0: no limit, the
#             default): the summary covers the runs made
#   -o DIR    where each run's log and the summary go (default: a new temp dir)
#
# Every run is a fresh process of one test binary (built with -race unless
# -R), so a case's failures are independent runs, not -count repetitions
# sharing a process. The summary (DIR/summary.txt) lists each case with its runs and
# failures, then the runs that died without a test failure (a panic or the
# timeout), with their logs. It exits 1 when any case failed.
#
# This takes long (about 4 minutes a kfake run and 10 a broker run on a
# 2-core machine), so it is not part of scripts/test.sh; run it by hand and
# put its summary in docs/RELIABILITY.md with the command and the commit.
set -euo pipefail
cd "$(dirname "$0")/.."

kfake_runs=20 broker_runs=5 eh_runs=0 tests='TestFranz|TestKafkago|TestReliability'
eh_pattern='^TestEventHubsReliability$/^memhub' race=-race budget=0 out=''
while getopts 'k:b:e:r:E:Rt:o:h' opt; do
  case $opt in
    k) kfake_runs=$OPTARG ;;
    b) broker_runs=$OPTARG ;;
    e) eh_runs=$OPTARG ;;
    r) tests=$OPTARG ;;
    E) eh_pattern=$OPTARG ;;
    R) race='' ;;
    t) budget=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,36p' "$0"; exit 2 ;;
  esac
done
out=${out:-$(mktemp -d /tmp/redeliver-flaky.XXXXXX)}
mkdir -p "$out"
bin=$out/integration.test

say() { printf 'flaky.sh: %s\n' "$*" >&2; }

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo "+changes")
say "building the integration tests at $commit ${race:-without -race} into $bin"
(cd integration && go test -c $race -o "$bin" .)

t0=$(date +%s) last=0

# run <provider> <n> <-test.run pattern>: n runs, logs in $out/<provider>-<i>.log
run() {
  local provider=$1 n=$2 pattern=$3 i start rc
  for ((i = 1; i <= n; i++)); do
    start=$(date +%s)
    if (( budget > 0 && start - t0 + last > budget )); then
      say "$provider: time budget of ${budget}s spent, $((i - 1)) runs of $n made"
      break
    fi
    rc=0
    (cd integration && "$bin" -test.run "$pattern" -test.v -test.count=1 -test.timeout 40m) \
      >"$out/$provider-$i.log" 2>&1 || rc=$?
    last=$(( $(date +%s) - start ))
    say "$provider run $i/$n: exit $rc in ${last}s"
  done
}

if (( kfake_runs > 0 )); then
  # Only the in-process providers: no external broker, no Docker.
  ( unset REDELIVER_KAFKA_BROKERS REDELIVER_KAFKA_RESTART; export DOCKER_HOST=unix:///nonexistent
    run kfake "$kfake_runs" "^($tests)\$/^kfake\$" )
fi

if (( eh_runs > 0 )); then
  # The in-memory hubs, with checkpoints in memory and, when Azurite
  # answers, in its blob store; no Docker (the emulator provider skips).
  (
    export DOCKER_HOST=unix:///nonexistent
    if [ -z "${REDELIVER_AZURE_STORAGE:-}" ]; then
      export REDELIVER_AZURITE_DIR=${REDELIVER_AZURITE_DIR:-/tmp/redeliver-azurite-flaky}
      if line=$(bash integration/azurite.sh start); then
        trap 'bash integration/azurite.sh stop >/dev/null 2>&1 || true' EXIT
        export "${line?}"
      else
        say "Azurite did not start: the memhub+azurite variants skip"
      fi
    fi
    run eventhubs "$eh_runs" "$eh_pattern"
  )
fi

if (( broker_runs > 0 )); then
  if [ -z "${REDELIVER_KAFKA_BROKERS:-}" ]; then
    # A broker of its own, apart from one scripts/test.sh may run meanwhile.
    export REDELIVER_KAFKA_DIR=${REDELIVER_KAFKA_DIR:-/tmp/redeliver-kafka-flaky}
    trap 'bash integration/kafka.sh stop >/dev/null 2>&1 || true' EXIT
    line=$(bash integration/kafka.sh start)
    export "${line?}"
    export REDELIVER_KAFKA_SESSION_TIMEOUT=3s REDELIVER_KAFKA_KIP848=1
    export REDELIVER_KAFKA_RESTART="bash $PWD/integration/kafka.sh restart"
  fi
  say "real broker at $REDELIVER_KAFKA_BROKERS"
  run external "$broker_runs" "^($tests)\$/^external\$"
fi

# The summary: every test that passed or failed, per provider, with the
# leaves (the cases) only.
summary=$out/summary.txt
{
  printf 'commit %s, %s\n' "$commit" "$(date -u +%Y-%m-%dT%H:%MZ)"
  printf 'runs: %d on kfake (%s), %d on the real broker; tests: %s\n' "$kfake_runs" "${race:-no race detector}" "$broker_runs" "$tests"
  printf 'runs: %d on the in-memory event hubs; -test.run %s\n\n' "$eh_runs" "$eh_pattern"
  for provider in kfake eventhubs external; do
    ls "$out/$provider"-*.log >/dev/null 2>&1 || continue
    runs=$(ls "$out/$provider"-*.log | wc -l)
    cat "$out/$provider"-*.log | awk -v provider="$provider" -v runs="$runs" '
      /^ *--- (PASS|FAIL): / {
        name = $3; for (i = 4; i <= NF && $i !~ /^\(/; i++) name = name " " $i
        seen[name]++; if ($2 == "FAIL:") failed[name]++
      }
      END {
        n = 0; bad = 0
        for (a in seen) {
          leaf = 1
          for (b in seen) if (index(b, a "/") == 1) { leaf = 0; break }
          if (!leaf) continue
          n++; f = failed[a] + 0; if (f) bad++
          printf "%-9s %4d runs %3d failed  %s\n", provider, seen[a], f, a
        }
        printf "%-9s %d cases, %d with failures, over %d runs\n\n", provider, n, bad, runs > "/dev/stderr"
      }' 2>>"$out/totals" | sort -k6
  done
  cat "$out/totals" 2>/dev/null
  for log in "$out"/kfake-*.log "$out"/eventhubs-*.log "$out"/external-*.log; do
    [ -f "$log" ] || continue
    if ! grep -q -- '^--- FAIL\|^ok\|^PASS$' "$log" || grep -q '^panic:\|test timed out' "$log"; then
      echo "died: $log"
    fi
  done
} >"$summary"
rm -f "$out/totals"
cat "$summary"
! grep -q '[1-9][0-9]* failed\|^died:' "$summary"
