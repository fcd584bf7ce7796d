package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/fsm"
)

// Metrics are a node's counters, for tests and tools that want them as Go
// values; /metrics serves them, and more, through Gatherer.
type Metrics struct {
	LogWrites    uint64 // batches written (and fsynced) to the Raft log
	LogEntries   uint64 // entries written to the Raft log
	LastIndex    uint64
	CommitIndex  uint64
	AppliedIndex uint64
	Term         uint64
	Leader       bool
	WorkersTimed int
	LiveLeases   int
	LastToken    uint64
	Jobs         map[string]int
	// RaftRPCsRefused counts Raft messages the guard refused (terms or
	// indexes out of range); AuditsDropped, audit records never recorded.
	RaftRPCsRefused uint64
	AuditsDropped   uint64
	// ExpiryWorkersLooked counts the worker checks the leader's expiry ticks
	// looked at while this node led: about one per worker per grace.
	ExpiryWorkersLooked uint64
	// SnapshotLastBytes and SnapshotLastDuration are the size and the write
	// time of the last Raft snapshot this node persisted; zero before one.
	SnapshotLastBytes    int64
	SnapshotLastDuration time.Duration
}

// Metrics returns the node's counters.
func (n *Node) Metrics() Metrics {
	st := n.Status()
	fs := n.fsm.Stats()
	m := Metrics{
		LogWrites: n.logs.writes.Load(), LogEntries: n.logs.entries.Load(), LastIndex: st.LastIndex,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Term: st.Term, Leader: st.State == "Leader",
		WorkersTimed: st.WorkersTimed, LiveLeases: fs.LiveLeases, LastToken: fs.LastToken, Jobs: map[string]int{},
		RaftRPCsRefused: n.guard.Dropped(), AuditsDropped: n.audits.dropped.Load(),
		ExpiryWorkersLooked: n.expiryLooked.Load(),
	}
	if n.snapshots != nil {
		last := n.snapshots.lastPersisted()
		m.SnapshotLastBytes, m.SnapshotLastDuration = last.bytes, last.took
	}
	for s, c := range fs.Jobs {
		m.Jobs[s.String()] = c
	}
	return m
}

// Gatherer is what /metrics serves: this node's metrics (nodeMetrics and
// what the API registers through Registerer), and the process's: the Go
// runtime, the process, and Raft's and the log store's own measurements
// (promsink.go). docs/metrics.md lists every family.
func (n *Node) Gatherer() prometheus.Gatherer {
	return prometheus.Gatherers{n.metrics.reg, processGatherer()}
}

// Registerer takes the API's metrics into this node's registry.
func (n *Node) Registerer() prometheus.Registerer { return n.metrics.reg }

// latencyBuckets spans a loopback commit (about 0.2 ms) to a failover
// (seconds).
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 14) // 0.1 ms .. 15 s

// waitBuckets spans queue waits and run times: a millisecond to a day.
var waitBuckets = prometheus.ExponentialBuckets(0.001, 4, 14) // 1 ms .. 18 h

// nodeMetrics are the measurements the node takes as things happen; the
// rest it reads from its state when scraped (nodeCollector).
type nodeMetrics struct {
	reg            *prometheus.Registry
	apply          *prometheus.HistogramVec
	heartbeatAck   prometheus.Histogram
	leaderCheck    prometheus.Histogram
	expiryLateness prometheus.Histogram
	queueWait      *prometheus.HistogramVec
	runTime        *prometheus.HistogramVec
	logWrite       prometheus.Histogram
	reportNext     *prometheus.CounterVec
	deadLeader     *prometheus.CounterVec
	// labelled are the queues the histograms name, the first metricQueues
	// this node observed; the rest share otherQueues.
	labelMu  sync.Mutex
	labelled map[string]bool
}

// otherQueues is the queue label of the histograms' observations of every
// queue past the first metricQueues: not a valid queue name, so no queue
// is mistaken for it.
const otherQueues = "(other)"

// queueLabel is the label a queue's observations take: its name for the
// first metricQueues queues this node observed, otherQueues after that,
// so client-chosen queue names cannot grow the series without bound.
func (m *nodeMetrics) queueLabel(queue string) string {
	m.labelMu.Lock()
	defer m.labelMu.Unlock()
	if m.labelled[queue] {
		return queue
	}
	if len(m.labelled) >= metricQueues {
		return otherQueues
	}
	m.labelled[queue] = true
	return queue
}

func newNodeMetrics(n *Node) *nodeMetrics {
	m := &nodeMetrics{
		labelled: map[string]bool{},
		reg:      prometheus.NewRegistry(),
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasehold_apply_seconds", Buckets: latencyBuckets,
			Help: "Time from proposing a command on this node to its result, committed and applied, by command type.",
		}, []string{"command"}),
		heartbeatAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_heartbeat_ack_seconds", Buckets: latencyBuckets,
			Help: "Time from a heartbeat's arrival at the leader to its answer, leadership check included.",
		}),
		leaderCheck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_leader_check_seconds", Buckets: latencyBuckets,
			Help: "Time a caller waited for a quorum to confirm this node's leadership (heartbeats, expiries, linearizable reads).",
		}),
		expiryLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_expiry_lateness_seconds", Buckets: latencyBuckets,
			Help: "How long after its worker's toleration ran out the leader decided each lease's expiry (never negative: none is early).",
		}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasehold_queue_wait_seconds", Buckets: waitBuckets,
			Help: "Time from a job becoming ready (submitted, due, or its previous lease ended) to its grant, by queue (the first 100 queues this node observed; the rest as queue=\"(other)\"); observed by the leader that granted it.",
		}, []string{"queue"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leasehold_run_seconds", Buckets: waitBuckets,
			Help: "Time from a lease's grant to its worker's report, by queue (the first 100 queues this node observed; the rest as queue=\"(other)\") and outcome; observed by the leader that took the report.",
		}, []string{"queue", "outcome"}),
		logWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_log_store_write_seconds", Buckets: latencyBuckets,
			Help: "Time to write and sync one batch of entries to the Raft log store (raft-wal or raft-boltdb).",
		}),
		reportNext: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_report_next_total",
			Help: "Reports that asked for the worker's next lease, by how its acquire went: behind (proposed right behind the report, about one commit for both), after (made once the report applied: the lease was not live, no job was ready, or the one behind granted nothing), or none (the report or the acquire failed or was refused).",
		}, []string{"acquire"}),
		deadLeader: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_dead_leader_checks_total",
			Help: "Times this follower, having heard no leader for dead_leader_after, asked the other voters, by outcome: started (a quorum agreed and Raft took this node's stand: it became a candidate at once), not_agreed (no quorum of silence, or another voter was the one to stand), failed (it could not stand; Raft's own timers go on).",
		}, []string{"outcome"}),
	}
	for _, how := range []string{"behind", "after", "none"} {
		m.reportNext.WithLabelValues(how)
	}
	for _, how := range []string{"started", "not_agreed", "failed"} {
		m.deadLeader.WithLabelValues(how)
	}
	m.reg.MustRegister(m.apply, m.heartbeatAck, m.leaderCheck, m.expiryLateness, m.queueWait, m.runTime, m.logWrite,
		m.reportNext, m.deadLeader, &nodeCollector{n: n})
	return m
}

// granted observes the queue wait of each new grant.
func (m *nodeMetrics) granted(res fsm.AcquireResult) {
	if res.Replayed {
		return
	}
	for _, g := range res.Grants {
		if wait := g.Lease.GrantedAt - g.ReadySince; wait >= 0 {
			m.queueWait.WithLabelValues(m.queueLabel(g.Job.Queue)).Observe(time.Duration(wait).Seconds())
		}
	}
}

// reported observes a report's run time.
func (m *nodeMetrics) reported(r fsm.ReportResult) {
	if r.Ran >= 0 && r.Queue != "" {
		m.runTime.WithLabelValues(m.queueLabel(r.Queue), r.Outcome.String()).Observe(time.Duration(r.Ran).Seconds())
	}
}

// nodeCollector reads the node's state when scraped: gauges of what is, and
// counters the state machine and the stores keep.
type nodeCollector struct{ n *Node }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descRaftState    = desc("leasehold_raft_state", "1 for this node's Raft state (leader, follower, candidate, shutdown), 0 for the others.", "state")
	descLeader       = desc("leasehold_leader", "1 while this node is the established leader that serves workers, else 0.")
	descTerm         = desc("leasehold_raft_term", "This node's current Raft term.")
	descLastIndex    = desc("leasehold_raft_last_index", "The last index in this node's Raft log.")
	descCommitIndex  = desc("leasehold_raft_commit_index", "The last index this node knows committed.")
	descAppliedIndex = desc("leasehold_raft_applied_index", "The last index this node applied to its state.")
	descLastContact  = desc("leasehold_raft_last_contact_seconds", "On a follower, the time since it last heard from a leader; 0 on the leader.")
	descLogWrites    = desc("leasehold_raft_log_writes_total", "Batches written and fsynced to the Raft log.")
	descLogEntries   = desc("leasehold_raft_log_entries_total", "Entries written to the Raft log.")
	descRPCsRefused  = desc("leasehold_raft_rpcs_refused_total", "Raft messages refused for terms or indexes no cluster reaches.")
	descAudits       = desc("leasehold_audits_dropped_total", "Audit records that could not be recorded.")
	descLooked       = desc("leasehold_expiry_workers_looked_total", "Worker checks the expiry ticks looked at while this node led (about one per worker per grace).")
	descSnapSeconds  = desc("leasehold_snapshot_last_seconds", "Time to write the last Raft snapshot this node persisted, to its file closed.")
	descSnapBytes    = desc("leasehold_snapshot_last_bytes", "Size of the last Raft snapshot this node persisted.")
	descJobs         = desc("leasehold_jobs", "Jobs in this node's state, by state.", "state")
	descScheduled    = desc("leasehold_jobs_scheduled", "Queued jobs not yet due (part of leasehold_jobs{state=\"queued\"}).")
	descLiveLeases   = desc("leasehold_live_leases", "Live leases in this node's state.")
	descWorkers      = desc("leasehold_workers", "Registered workers in this node's state.")
	descTimed        = desc("leasehold_workers_timed", "On the leader, the workers whose leases and reachability it times; 0 elsewhere.")
	descUnreachable  = desc("leasehold_workers_unreachable", "On the leader, the timed workers announced unreachable (silent past grace); 0 elsewhere.")
	descStateBytes   = desc("leasehold_state_bytes", "The state's estimated size in memory, the figure the state quota bounds.")
	descLastToken    = desc("leasehold_last_token", "The last fencing token granted; the next grant is larger.")
	descCommands     = desc("leasehold_commands_applied_total", "Commands this node applied since it started, by type.", "command")
	descEvents       = desc("leasehold_events_total", "Events this node's state recorded since it started, by type.", "type")
	descGrants       = desc("leasehold_grants_total", "Leases granted (applied on this node since it started).")
	descReports      = desc("leasehold_reports_total", "Reports taken, by outcome (applied on this node since it started).", "outcome")
	descStale        = desc("leasehold_stale_reports_total", "Reports refused for a stale token (applied on this node since it started).")
	descRevokes      = desc("leasehold_revokes_total", "Live leases revoked by a cancel or kill (applied on this node since it started).")
	descExpiries     = desc("leasehold_expiries_total", "Leases ended because their worker was silent past toleration (applied on this node since it started).")
	descAbsence      = desc("leasehold_absence_applications_total", "Times a leader did not charge workers for a gap of its own: takeovers, restores, clock jumps, held mass expiries.")
	// The queues: the first metricQueues by name, as cluster status shows them.
	descQueueReady   = desc("leasehold_queue_ready", "Queued jobs due now, by queue (the first 100 queues by name).", "queue")
	descQueueRunning = desc("leasehold_queue_running", "Live leases, by queue (the first 100 queues by name).", "queue")
	descQueuePaused  = desc("leasehold_queue_paused", "1 while the queue is paused (no new grants), else 0 (the first 100 queues by name).", "queue")
	descQueueOldest  = desc("leasehold_queue_oldest_ready_seconds", "Age of the queue's oldest ready job, 0 when none is ready (the first 100 queues by name).", "queue")
)

// metricQueues bounds the queues the metrics label, as cluster status does.
const metricQueues = 100

var nodeDescs = []*prometheus.Desc{
	descRaftState, descLeader, descTerm, descLastIndex, descCommitIndex, descAppliedIndex, descLastContact,
	descLogWrites, descLogEntries, descRPCsRefused, descAudits, descLooked, descSnapSeconds, descSnapBytes,
	descJobs, descScheduled, descLiveLeases, descWorkers, descTimed, descUnreachable, descStateBytes, descLastToken,
	descCommands, descEvents, descGrants, descReports, descStale, descRevokes, descExpiries, descAbsence,
	descQueueReady, descQueueRunning, descQueuePaused, descQueueOldest,
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range nodeDescs {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	state := n.raft.State()
	for _, s := range []raft.RaftState{raft.Leader, raft.Follower, raft.Candidate, raft.Shutdown} {
		gauge(descRaftState, boolFloat(s == state), s.String())
	}
	ls, err := n.established()
	gauge(descLeader, boolFloat(err == nil))
	gauge(descTerm, float64(n.raft.CurrentTerm()))
	gauge(descLastIndex, float64(n.raft.LastIndex()))
	gauge(descCommitIndex, float64(n.raft.CommitIndex()))
	gauge(descAppliedIndex, float64(n.raft.AppliedIndex()))
	contact := 0.0
	if state != raft.Leader {
		if last := n.raft.LastContact(); !last.IsZero() {
			contact = time.Since(last).Seconds()
		}
	}
	gauge(descLastContact, contact)
	counter(descLogWrites, n.logs.writes.Load())
	counter(descLogEntries, n.logs.entries.Load())
	counter(descRPCsRefused, n.guard.Dropped())
	counter(descAudits, n.audits.dropped.Load())
	counter(descLooked, n.expiryLooked.Load())
	var snap persistedSnapshot
	if n.snapshots != nil {
		snap = n.snapshots.lastPersisted()
	}
	gauge(descSnapSeconds, snap.took.Seconds())
	gauge(descSnapBytes, float64(snap.bytes))

	fs := n.fsm.Stats()
	for _, s := range fsm.JobStates() {
		gauge(descJobs, float64(fs.Jobs[s]), s.String())
	}
	gauge(descScheduled, float64(fs.Scheduled))
	gauge(descLiveLeases, float64(fs.LiveLeases))
	gauge(descWorkers, float64(fs.Workers))
	timed, silent := 0, 0
	if err == nil {
		timed, silent = ls.table.Load().silentPastGrace()
	}
	gauge(descTimed, float64(timed))
	gauge(descUnreachable, float64(silent))
	gauge(descStateBytes, float64(fs.Bytes))
	gauge(descLastToken, float64(fs.LastToken))

	counts := n.fsm.Counts()
	for t, v := range counts.Commands {
		counter(descCommands, v, t.String())
	}
	for t, v := range counts.Events {
		counter(descEvents, v, t.String())
	}
	for _, o := range fsm.Outcomes() {
		counter(descReports, counts.Reports[o], o.String())
	}
	counter(descGrants, counts.Events[fsm.EventLeaseAcquired])
	counter(descStale, counts.Events[fsm.EventStaleReport])
	counter(descRevokes, counts.Events[fsm.EventLeaseRevoked])
	counter(descExpiries, counts.Events[fsm.EventLeaseExpired])
	counter(descAbsence, counts.Events[fsm.EventAbsenceRule])

	now := n.clock.Wall().UnixNano()
	queues, _ := n.fsm.Queues("", metricQueues, now)
	for _, q := range queues {
		gauge(descQueueReady, float64(q.Ready), q.Name)
		gauge(descQueueRunning, float64(q.Running), q.Name)
		gauge(descQueuePaused, boolFloat(q.Paused), q.Name)
		oldest := 0.0
		if q.OldestReady != 0 {
			oldest = max(time.Duration(now-q.OldestReady), 0).Seconds()
		}
		gauge(descQueueOldest, oldest, q.Name)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
