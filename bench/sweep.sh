#!/bin/sh
# The short sweep behind `make bench`: every workload at each concurrency,
# each run against a fresh local 3-node cluster (`--start 3`), its RESULT
# line kept in $OUT and the runs gathered into one table at the end.
# docs/performance.md explains the columns.
#
# Every setting is an environment variable:
#   BIN          the leasehold binary              (bin/leasehold)
#   WORKLOADS    workloads to run                  (all seven; expiry once, at c=1)
#   CONCURRENCY  values of -c                      (1 16 64)
#   DURATION     the measured window, -d           (5s)
#   WARMUP       --warmup                          (1s)
#   NODES        --start                           (3)
#   EXTRA        more flags for every run          (none)
#   OUTDIR       RESULT lines and each run's log   (bin/bench)
#
# A run that fails is reported and the sweep goes on; the exit status is
# non-zero if any failed. `bench/sweep.sh table FILE` prints the table of a
# file of RESULT lines again.
set -u

table() {
	awk '
	function v(k) { return (k in kv) ? kv[k] : "-" }
	BEGIN {
		printf "%-9s %3s %9s %8s %8s %9s %5s %8s %8s %8s %14s %6s  %s\n",
			"op", "c", "ops/s", "p50_ms", "p99_ms", "max_ms", "errs", "srv_cpu%", "gen_cpu%",
			"wr/op", "fsyncs/s n1/2/3", "other%", "workload keys"
	}
	$1 == "RESULT" {
		delete kv
		for (i = 2; i <= NF; i++) {
			eq = index($i, "=")
			kv[substr($i, 1, eq - 1)] = substr($i, eq + 1)
		}
		op = v("op")
		if (op == "heartbeat")
			extra = "leases_renewed_s=" v("leases_renewed_s") " lost=" v("lost")
		else if (op == "mixed")
			extra = "hb_p99_ms=" v("hb_p99_ms") " hb_gap_max_ms=" v("hb_gap_max_ms") " leases_lost=" v("leases_lost") " hb_errs=" v("hb_errs")
		else if (op == "expiry")
			extra = "abandoned=" v("abandoned") " late_p50/p99/max_ms=" v("late_p50_ms") "/" v("late_p99_ms") "/" v("late_max_ms") " drain_ms=" v("drain_ms") " jobs_missing=" v("jobs_missing") " early=" v("early")
		else if (op == "failover")
			extra = "recovery_ms=" v("recovery_ms") " write_gap_max_ms=" v("write_gap_max_ms") " expired_while_heartbeating=" v("expired_while_heartbeating") " fenced=" v("fenced") " leases_lost=" v("leases_lost")
		else if (op == "fencing")
			extra = "stale_refused=" v("stale_refused") " stale_accepted=" v("stale_accepted") " out_of_order=" v("out_of_order")
		else
			extra = ""
		if ("err_kinds" in kv)
			extra = extra " err_kinds=" kv["err_kinds"]
		if ("drained" in kv)
			extra = extra " drained=1"
		printf "%-9s %3s %9s %8s %8s %9s %5s %8s %8s %8s %14s %6s  %s\n",
			op, v("c"), v("ops_s"), v("p50_ms"), v("p99_ms"), v("max_ms"), v("errs"),
			v("cpu_srv_pct"), v("cpu_gen_pct"), v("raft_writes_per_op"),
			int(v("fsyncs_s_node1")) "/" int(v("fsyncs_s_node2")) "/" int(v("fsyncs_s_node3")),
			v("cpu_other_pct"), extra
	}' "$@"
}

if [ "${1:-}" = table ]; then
	shift
	table "$@"
	exit
fi

BIN=${BIN:-bin/leasehold}
WORKLOADS=${WORKLOADS:-acquire heartbeat job-cycle mixed fencing failover expiry}
CONCURRENCY=${CONCURRENCY:-1 16 64}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
NODES=${NODES:-3}
EXTRA=${EXTRA:-}
OUTDIR=${OUTDIR:-bin/bench}

if [ ! -x "$BIN" ]; then
	echo "bench/sweep.sh: $BIN is not an executable: run make build first" >&2
	exit 2
fi
mkdir -p "$OUTDIR/logs"
OUT="$OUTDIR/results.txt"
: >"$OUT"
failed=""

one() { # workload concurrency
	log="$OUTDIR/logs/$1-c$2.log"
	echo "bench: $1 -c $2 (-d $DURATION, --warmup $WARMUP, --start $NODES)" >&2
	# shellcheck disable=SC2086 # EXTRA is a list of flags
	if ! "$BIN" bench "$1" --start "$NODES" -c "$2" -d "$DURATION" --warmup "$WARMUP" -o result $EXTRA \
		>>"$OUT" 2>"$log"; then
		echo "bench: $1 -c $2 FAILED; its log: $log" >&2
		tail -n 5 "$log" >&2
		failed="$failed $1/c$2"
	fi
}

for w in $WORKLOADS; do
	if [ "$w" = expiry ]; then
		one expiry 1 # no callers: -c means nothing to it, one run
		continue
	fi
	for c in $CONCURRENCY; do
		one "$w" "$c"
	done
done

echo
echo "$(grep -c '^RESULT' "$OUT") runs, RESULT lines in $OUT, logs in $OUTDIR/logs ($(nproc 2>/dev/null || echo ?) CPUs)"
table "$OUT"
if [ -n "$failed" ]; then
	echo "failed:$failed" >&2
	exit 1
fi
