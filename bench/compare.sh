#!/bin/sh
# Judge a performance change in one run on one machine: every case runs on
# the old and the new binary alternately (old then new, then new then old,
# ...), each run against a fresh local cluster (`--start`), and one table
# shows each figure's median per binary and new/old.
#
#   bench/compare.sh OLD_BIN NEW_BIN
#
# Settings (environment variables):
#   CASES     the runs, one per line "workload -c N [flags...]"
#             (default: the issue-13 table below)
#   ROUNDS    runs of each case per binary        (3)
#   DURATION  the measured window, -d              (5s)
#   WARMUP    --warmup                             (1s)
#   NODES     --start                              (3)
#   OUTDIR    RESULT lines and logs                (bin/compare)
#   DRIVER    own: each binary's bench drives its own servers (default);
#             new: NEW_BIN's bench drives both, starting OLD_BIN's servers
#             with --server-bin, so one load generator serves both (OLD_BIN
#             must take the flags NEW_BIN's bench starts servers with)
#
# Figures: ops/s, p50 and p99 latency, the servers' CPU per operation
# (ms of CPU over all nodes), the servers' heap allocations per operation
# (over all nodes: a count a busy machine does not blur; shown when the
# driving bench reports it), the leader's mean commit, append RPC and log
# write times (commit, rpc, logw: where a commit's time goes; shown when the
# driving bench reports them), and the workload's own headline (expiry
# lateness p99, failover's longest write gap); cpu_other_pct is the highest
# seen in any run (other processes' CPU: a busy machine makes every figure
# worse). Beside each median: the lowest and highest run of each binary,
# and "apart" when the two ranges (of two runs or more each) do not
# overlap; a ratio without it is within the runs' spread.
# `bench/compare.sh table FILE` prints the table of a RESULT file again.
set -u

DEFAULT_CASES='job-cycle -c 1
job-cycle -c 64
job-cycle -c 64 --submit
acquire -c 1
heartbeat -c 64 --leases 1
expiry -c 1 --abandon 10000
failover -c 16'

table() {
	awk '
	function med(list,   n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		if (n == 0) return ""
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	# span is a list'"'"'s lowest and highest values as the runs printed them,
	# "lo..hi" (as numbers, awk would print them to six digits).
	function span(list,   n, a, i, lo, hi) {
		n = split(list, a, " ")
		if (n == 0) return ""
		lo = hi = 1
		for (i = 2; i <= n; i++) { if (a[i] + 0 < a[lo] + 0) lo = i; if (a[i] + 0 > a[hi] + 0) hi = i }
		return a[lo] ".." a[hi]
	}
	# apart says whether two spans of two runs or more do not overlap: every
	# run of one binary above every run of the other, a difference the
	# runs'"'"' spread cannot explain. One run a side has no spread to judge by.
	function apart(s, t, ls, lt,   a, b) {
		if (s == "" || t == "" || split(ls, a, " ") < 2 || split(lt, b, " ") < 2) return ""
		split(s, a, /\.\./); split(t, b, /\.\./)
		return (a[2] + 0 < b[1] + 0 || b[2] + 0 < a[1] + 0) ? "apart" : ""
	}
	function add(k, v) { if (v != "" && v != "NA") vals[k] = vals[k] " " v }
	function ratio(o, n) { return (o == "" || n == "" || o + 0 == 0) ? "-" : sprintf("%.2f", n / o) }
	$1 == "RESULT" {
		delete kv
		for (i = 2; i <= NF; i++) { eq = index($i, "="); kv[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
		c = kv["case"]; b = kv["bin"]
		if (!(c in seen)) { seen[c] = 1; order[++ncases] = c }
		add(c SUBSEP b SUBSEP "ops", kv["ops_s"])
		add(c SUBSEP b SUBSEP "p50", kv["p50_ms"])
		add(c SUBSEP b SUBSEP "p99", kv["p99_ms"])
		if (kv["cpu_srv_pct"] != "NA" && kv["ops_s"] + 0 > 0) add(c SUBSEP b SUBSEP "cpu", sprintf("%.4f", kv["cpu_srv_pct"] * 10 / kv["ops_s"]))
		if ("allocs_per_op" in kv) add(c SUBSEP b SUBSEP "alloc", kv["allocs_per_op"])
		if ("commit_ms_leader" in kv) add(c SUBSEP b SUBSEP "commit", kv["commit_ms_leader"])
		if ("append_rpc_ms_leader" in kv) add(c SUBSEP b SUBSEP "rpc", kv["append_rpc_ms_leader"])
		if ("log_write_ms_leader" in kv) add(c SUBSEP b SUBSEP "logw", kv["log_write_ms_leader"])
		if ("late_p99_ms" in kv) add(c SUBSEP b SUBSEP "own", kv["late_p99_ms"])
		else if ("write_gap_max_ms" in kv) add(c SUBSEP b SUBSEP "own", kv["write_gap_max_ms"])
		if ("cpu_other_pct" in kv && kv["cpu_other_pct"] != "NA" && (other == "" || kv["cpu_other_pct"] + 0 > other)) other = kv["cpu_other_pct"] + 0
	}
	END {
		printf "%-30s %-5s %10s %10s %7s  %-19s %s\n", "case", "fig", "old", "new", "new/old", "old runs", "new runs"
		nfigs = split("ops p50 p99 cpu alloc commit rpc logw own", figs, " ")
		name["ops"] = "ops/s"; name["p50"] = "p50ms"; name["p99"] = "p99ms"; name["cpu"] = "cpums"; name["alloc"] = "alloc"; name["own"] = "own"
		name["commit"] = "commit"; name["rpc"] = "rpc"; name["logw"] = "logw"
		for (i = 1; i <= ncases; i++) {
			c = order[i]
			for (f = 1; f <= nfigs; f++) {
				ol = vals[c SUBSEP "old" SUBSEP figs[f]]; nl = vals[c SUBSEP "new" SUBSEP figs[f]]
				o = med(ol); n = med(nl)
				if (o == "" && n == "") continue
				os = span(ol); ns = span(nl)
				line = sprintf("%-30s %-5s %10s %10s %7s  %-19s %-19s %s", (f == 1 ? c : ""), name[figs[f]], o, n, ratio(o, n), os, ns, apart(os, ns, ol, nl))
				sub(/ +$/, "", line)
				print line
			}
		}
		printf "\nown: expiry lateness p99 (ms) or failover longest write gap (ms); cpums: servers CPU ms per op;\nalloc: servers heap allocations per op; commit, rpc, logw: the leader'"'"'s mean ms to commit an\nentry, for an append RPC and for a write of its own log (shown when the driving bench reports\nthem); old runs, new runs: the lowest and highest of each binary'"'"'s runs; apart: the two do\nnot overlap\n"
		printf "highest cpu_other_pct seen: %s\n", other
	}' "$@"
}

if [ "${1:-}" = table ]; then
	shift
	table "$@"
	exit
fi
if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
	echo "usage: bench/compare.sh OLD_BIN NEW_BIN (two leasehold executables)" >&2
	exit 2
fi
OLD=$1 NEW=$2
CASES=${CASES:-$DEFAULT_CASES}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
NODES=${NODES:-3}
OUTDIR=${OUTDIR:-bin/compare}
DRIVER=${DRIVER:-own}
case $DRIVER in
own | new) ;;
*)
	echo "DRIVER=$DRIVER: own or new" >&2
	exit 2
	;;
esac
mkdir -p "$OUTDIR/logs"
OUT="$OUTDIR/results.txt"
FAILED="$OUTDIR/failed.txt"
: >"$OUT"
: >"$FAILED"

one() { # bin-label bin case-number case...
	label=$1 bin=$2 n=$3
	shift 3
	words="$*"
	tag=$(echo "$words" | tr ' ' '_')
	log="$OUTDIR/logs/$n-$label-$tag.log"
	echo "compare: $label $words" >&2
	driver=$bin
	set -- "$@" --start "$NODES" -d "$DURATION" --warmup "$WARMUP" -o result
	if [ "$DRIVER" = new ]; then
		driver=$NEW
		set -- "$@" --server-bin "$bin"
	fi
	if line=$("$driver" bench "$@" 2>>"$log"); then
		echo "$line case=$tag bin=$label" >>"$OUT"
	else
		echo "compare: $label $words FAILED; its log: $log" >&2
		echo "$label $words" >>"$FAILED"
	fi
}

n=0
echo "$CASES" | while IFS= read -r c; do
	[ -z "$c" ] && continue
	n=$((n + 1))
	r=1
	while [ $r -le "$ROUNDS" ]; do
		# Alternate which binary goes first, so drift on the machine
		# (caches, other load) falls on both alike.
		# shellcheck disable=SC2086
		if [ $((r % 2)) -eq 1 ]; then
			one old "$OLD" $n $c
			one new "$NEW" $n $c
		else
			one new "$NEW" $n $c
			one old "$OLD" $n $c
		fi
		r=$((r + 1))
	done
done

echo
table "$OUT"
if [ -s "$FAILED" ]; then
	echo "failed runs:" >&2
	cat "$FAILED" >&2
	exit 1
fi
