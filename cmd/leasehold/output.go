package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// output prints v as JSON with -o json, or runs table otherwise. JSON goes
// to the app's Writer (os.Stdout unless a test sets it).
func output(c *cli.Context, v any, table func()) error {
	if flagString(c, "output") == "json" {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	table()
	return nil
}

// quietCommands change something and take --quiet: then they print only
// the essential value (the job's, schedule's, queue's, worker's or node's
// id, the snapshot's file, the restore's last token), one a line. -q is
// not its short form: it is --queue on job submit, schedule create and
// worker run.
var quietCommands = []string{
	"job submit", "job cancel", "job kill", "job retry", "job purge", "job cancel-submitter",
	"schedule create", "schedule pause", "schedule resume", "schedule delete",
	"queue pause", "queue resume", "queue limit", "worker deregister",
	"cluster join", "cluster remove", "cluster transfer-leader", "snapshot save", "snapshot restore",
}

func quietFlag() cli.Flag {
	return &cli.BoolFlag{Name: "quiet", Usage: "print only the id (or the one value the command yields), not the table or JSON"}
}

// addQuiet gives the quietCommands --quiet; it fails for a name that is
// not a command (a renamed one must not silently lose it).
func addQuiet(app *cli.App) {
	for _, path := range quietCommands {
		cmds, names := app.Commands, strings.Fields(path)
		var cmd *cli.Command
		for _, n := range names {
			if cmd = findCommand(cmds, n); cmd == nil {
				panic("quietCommands: no command " + path)
			}
			cmds = cmd.Subcommands
		}
		cmd.Flags = append(cmd.Flags, quietFlag())
	}
}

// outputQuiet prints quiet alone with --quiet, else as output does.
func outputQuiet(c *cli.Context, quiet string, v any, table func()) error {
	if c.Bool("quiet") {
		if quiet != "" {
			fmt.Fprintln(c.App.Writer, quiet)
		}
		return nil
	}
	return output(c, v, table)
}

func newTable() *tabwriter.Writer { return tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0) }

// enumName turns JOB_STATE_QUEUED into queued.
func enumName(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

func timeOf(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

// tableTime is a time of timeOf's as a table shows it: to the second, with
// how far it is from now by this machine's clock ("3s ago", "in 2m05s");
// "-" when unset. JSON keeps timeOf's full precision.
func tableTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return dash(s)
	}
	return t.UTC().Format(time.RFC3339) + " (" + relative(time.Until(t)) + ")"
}

// relative is d from now: "3s ago" for the past, "in 2m05s" for the future.
func relative(d time.Duration) string {
	if d > 0 {
		return "in " + strings.TrimSuffix(ago(d), " ago")
	}
	return ago(-d)
}

// dash is s made safe for a terminal (clean), or "-" for an empty column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s)
}

// clean is attacker-chosen text (a reason, a progress note, an event's
// detail, a payload) made safe to print in a table or a line: every
// control character, C0 (tab and newline too, which would forge columns
// and rows), DEL and C1 (CSI, OSC: escape sequences to a terminal), and
// every bidirectional override is written as a Go escape (\n, \x1b,
// \u009b, \u202e). -o json carries the text exactly.
func clean(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !unsafeRune(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r) // '\n', '\x1b', '\u009b'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// countsLine is counts in the order of names: "queued 3, running 1", or
// "none".
func countsLine(names []string, counts map[string]uint64) string {
	var parts, others []string
	for _, n := range names {
		if counts[n] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", n, counts[n]))
		}
	}
	for n, c := range counts {
		if c > 0 && !slices.Contains(names, n) {
			others = append(others, fmt.Sprintf("%s %d", n, c))
		}
	}
	slices.Sort(others)
	parts = append(parts, others...)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// jobStateNames are the job states in their enum's order.
func jobStateNames() []string {
	var names []string
	for i := range len(pb.JobState_name) {
		if n, ok := pb.JobState_name[int32(i)]; ok && i > 0 {
			names = append(names, enumName(n, "JOB_STATE_"))
		}
	}
	return names
}

// payloadView is a payload as JSON shows it: the text when it is UTF-8,
// else base64 (the second).
func payloadView(p []byte) (*string, string) {
	if utf8.Valid(p) {
		s := string(p)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(p)
}

// payloadLine is a payload in a table: short one-line text as it is, else
// what it is and its size (-o json has it all).
func payloadLine(p []byte) string {
	switch {
	case !utf8.Valid(p):
		return fmt.Sprintf("(binary, %d bytes)", len(p))
	case len(p) > 80 || strings.ContainsFunc(string(p), unsafeRune):
		return fmt.Sprintf("(text, %d bytes)", len(p))
	}
	return string(p)
}

// u64 is a token, sequence number or index as the API's JSON (protojson)
// prints a uint64: a string, which a JavaScript reader cannot round.
func u64(n uint64) string { return strconv.FormatUint(n, 10) }

// jobView is a job as the CLI prints it.
type jobView struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Queue     string `json:"queue"`
	Kind      string `json:"kind"`
	Priority  int32  `json:"priority"`
	Submitter string `json:"submitter,omitempty"`
	Attempts  uint32 `json:"attempts"`
	Losses    uint32 `json:"losses"`
	Token     uint64 `json:"token,omitempty,string"` // the newest lease's token
	Worker    string `json:"worker,omitempty"`       // the newest lease's worker
	Outcome   string `json:"outcome,omitempty"`
	Ref       string `json:"ref,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Payload is the payload when it is UTF-8 text; PayloadBase64 the
	// payload in base64 when it is not (one of the two is there).
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
	SubmittedAt   string  `json:"submitted_at"`
	FinishedAt    string  `json:"finished_at,omitempty"`
	// NotBefore: not granted before this (its run-at time, or the end of a
	// retry's backoff).
	NotBefore string      `json:"not_before,omitempty"`
	Retry     *retryView  `json:"retry,omitempty"`
	Leases    []leaseView `json:"leases,omitempty"`
	// Progress is the live lease's latest progress note and ProgressAt
	// when the leader heard it: from the leader's memory, so absent from a
	// --stale read of a follower and after a change of leader.
	Progress   string `json:"progress,omitempty"`
	ProgressAt string `json:"progress_at,omitempty"`
	// Timeout bounds each attempt, from its lease's grant.
	Timeout string `json:"timeout,omitempty"`
}

// retryView is a job's retry policy.
type retryView struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Multiplier float64 `json:"multiplier"`
	Jitter     float64 `json:"jitter"`
}

type leaseView struct {
	Token     uint64 `json:"token,string"`
	JobID     string `json:"job_id"`
	Worker    string `json:"worker"`
	State     string `json:"state"`
	Revoke    string `json:"revoke,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	Ref       string `json:"ref,omitempty"`
	Message   string `json:"message,omitempty"`
	GrantedAt string `json:"granted_at"`
	EndedAt   string `json:"ended_at,omitempty"`
	// TimedOut: the leader revoked the lease (with a kill) for running
	// past its job's timeout.
	TimedOut bool `json:"timed_out,omitempty"`
}

func leaseViewOf(l *pb.Lease) leaseView {
	v := leaseView{Token: l.GetToken(), JobID: l.GetJobId(), Worker: l.GetWorkerId(),
		State: enumName(l.GetState().String(), "LEASE_STATE_"), Ref: l.GetRef(), Message: l.GetMessage(), Retryable: l.GetRetryable(),
		GrantedAt: timeOf(l.GetGrantedAt()), EndedAt: timeOf(l.GetEndedAt()), TimedOut: l.GetTimedOut()}
	if l.GetRevoke() != pb.Revoke_REVOKE_NONE {
		v.Revoke = enumName(l.GetRevoke().String(), "REVOKE_")
	}
	if l.GetOutcome() != pb.Outcome_OUTCOME_UNSPECIFIED {
		v.Outcome = enumName(l.GetOutcome().String(), "OUTCOME_")
	}
	return v
}

func jobViewOf(j *pb.Job) jobView {
	s := j.GetSpec()
	v := jobView{ID: s.GetId(), State: enumName(j.GetState().String(), "JOB_STATE_"), Queue: s.GetQueue(),
		Kind: s.GetKind(), Priority: s.GetPriority(), Submitter: s.GetSubmitter(), Attempts: j.GetAttempts(),
		Losses: j.GetLosses(), Reason: j.GetReason(),
		SubmittedAt: timeOf(j.GetSubmittedAt()), FinishedAt: timeOf(j.GetFinishedAt()), NotBefore: timeOf(j.GetNotBefore()),
		Progress: j.GetProgress(), ProgressAt: timeOf(j.GetProgressAt())}
	v.Payload, v.PayloadBase64 = payloadView(s.GetPayload())
	if r := s.GetRetry(); r != nil {
		v.Retry = &retryView{Initial: r.GetInitial().AsDuration().String(), Max: r.GetMax().AsDuration().String(),
			Multiplier: r.GetMultiplier(), Jitter: r.GetJitter()}
	}
	if t := s.GetTimeout(); t.AsDuration() > 0 {
		v.Timeout = t.AsDuration().String()
	}
	for _, l := range j.GetLeases() {
		v.Leases = append(v.Leases, leaseViewOf(l))
	}
	if n := len(v.Leases); n > 0 {
		last := v.Leases[n-1]
		v.Token, v.Worker, v.Outcome, v.Ref = last.Token, last.Worker, last.Outcome, last.Ref
	}
	return v
}

func printJobs(c *cli.Context, jobs []*pb.Job, single bool) error {
	views := make([]jobView, len(jobs))
	for i, j := range jobs {
		views[i] = jobViewOf(j)
	}
	var v any = views
	if single && len(views) == 1 {
		v = views[0]
		if c.Bool("quiet") {
			return outputQuiet(c, views[0].ID, nil, nil)
		}
	}
	return output(c, v, func() {
		w := newTable()
		fmt.Fprintln(w, "ID\tSTATE\tQUEUE\tKIND\tPRIO\tATTEMPTS\tTOKEN\tWORKER\tOUTCOME\tREF\tNOT BEFORE")
		for _, v := range views {
			notBefore := "-"
			if v.State == "scheduled" {
				notBefore = tableTime(v.NotBefore)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.State, v.Queue, v.Kind, v.Priority,
				v.Attempts, tokenStr(v.Token), dash(v.Worker), dash(v.Outcome), dash(v.Ref), notBefore)
		}
		w.Flush()
		// One job: why it ended, if it says (a dead job's last error).
		if single && len(views) == 1 && views[0].Reason != "" {
			fmt.Printf("reason: %s\n", clean(views[0].Reason))
		}
		if single && len(jobs) == 1 && len(jobs[0].GetSpec().GetPayload()) > 0 {
			fmt.Printf("payload: %s\n", payloadLine(jobs[0].GetSpec().GetPayload()))
		}
		if single && len(jobs) == 1 && jobs[0].GetProgress() != "" {
			fmt.Printf("progress: %s (heard %s ago)\n", clean(jobs[0].GetProgress()), ageOf(jobs[0].GetProgressAt()))
		}
		if single && len(views) == 1 {
			printTimeout(views[0])
		}
	})
}

// ageOf is how long ago t was, to the second, by this machine's clock
// (never negative: the clocks of the CLI and the leader may differ).
func ageOf(t *timestamppb.Timestamp) time.Duration {
	return max(time.Since(t.AsTime()), 0).Round(time.Second)
}

// printTimeout adds to one job's table its timeout and the leases it
// revoked.
func printTimeout(v jobView) {
	if v.Timeout == "" {
		return
	}
	fmt.Printf("timeout: %s per attempt, from its lease's grant\n", v.Timeout)
	for _, l := range v.Leases {
		if l.TimedOut {
			fmt.Printf("lease %d timed out: revoked with a kill; %s\n", l.Token, leaseEnd(l))
		}
	}
}

func leaseEnd(l leaseView) string {
	if l.State == "active" {
		return "still live"
	}
	return "ended " + l.State
}

func tokenStr(t uint64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprint(t)
}

type eventView struct {
	Seq    uint64 `json:"seq,string"`
	Time   string `json:"time"`
	Type   string `json:"type"`
	JobID  string `json:"job_id,omitempty"`
	Token  uint64 `json:"token,omitempty,string"`
	Worker string `json:"worker,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Detail string `json:"detail,omitempty"`
	Actor  string `json:"actor,omitempty"`
	Source string `json:"source,omitempty"`
}

func eventViewOf(e *pb.Event) eventView {
	return eventView{Seq: e.GetSeq(), Time: timeOf(e.GetTime()), Type: e.GetType(), JobID: e.GetJobId(),
		Token: e.GetToken(), Worker: e.GetWorkerId(), Ref: e.GetRef(), Detail: e.GetDetail(), Actor: e.GetActor(), Source: e.GetSource()}
}

// eventHeader is the events table's header; row is one event under it,
// "-" for what it does not have.
const eventHeader = "SEQ\tTIME\tTYPE\tJOB\tTOKEN\tWORKER\tREF\tACTOR\tSOURCE\tDETAIL"

func (v eventView) row() string {
	return strings.Join([]string{strconv.FormatUint(v.Seq, 10), tableTime(v.Time), v.Type, dash(v.JobID), tokenStr(v.Token),
		dash(v.Worker), dash(v.Ref), dash(v.Actor), dash(v.Source), dash(v.Detail)}, "\t")
}
