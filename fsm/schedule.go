package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Schedules (cron). A schedule is a named job template with a cron
// expression and a time zone. The state machine never parses the
// expression (a parser's or a time zone database's answer could differ
// between builds and machines, and replicas must not): only the leader
// computes slots (package cluster) and proposes FireSchedule for one. What
// the state machine keeps is LastSlot: every slot at or before it is
// settled, fired or skipped. A FireSchedule for a slot at or before it
// changes nothing, so a slot is fired at most once, whichever leader
// proposes it and however often: a new leader's retry of a slot the old
// one fired, a replayed proposal. The job it submits has an id derived
// from the schedule and the slot (ScheduleJobID), so even a job submitted
// twice for one slot would be one job.
//
// A new schedule, an updated one and a resumed one settle every slot up to
// the command's time: a schedule never fires a slot from before it was
// created, from its old expression, or from while it was paused.

// MissedPolicy says what the leader does with slots that came due while no
// leader ran the schedules (a cluster down or without a quorum): those more
// than the leader's grace in the past.
type MissedPolicy uint8

const (
	// MissedSkip skips missed slots: only a slot due within the grace fires.
	MissedSkip MissedPolicy = 1
	// MissedRunLatest fires the latest missed slot, once, and skips the rest.
	MissedRunLatest MissedPolicy = 2
)

var missedPolicyNames = map[MissedPolicy]string{
	MissedSkip:      "skip",
	MissedRunLatest: "run_latest",
}

func (p MissedPolicy) String() string { return enumName(missedPolicyNames, p) }

// ParseMissedPolicy is the inverse of String.
func ParseMissedPolicy(s string) (MissedPolicy, bool) { return enumParse(missedPolicyNames, s) }

// Bounds on schedules.
const (
	// MaxSchedules bounds the schedule table.
	MaxSchedules = 1000
	// MaxCronLen bounds a cron expression's text.
	MaxCronLen = 256
	// MaxZoneLen bounds a time zone's name.
	MaxZoneLen       = 64
	scheduleOverhead = 256
)

// Schedule is one replicated schedule. Values are replaced, never mutated.
type Schedule struct {
	Name string
	Cron string // the expression, as given; parsed by the leader only
	Zone string // an IANA time zone name; "" is UTC
	// Template is the job each slot submits; its ID is empty (each job's
	// is ScheduleJobID).
	Template JobSpec
	Missed   MissedPolicy
	Paused   bool
	// LastSlot is the time, unix nanoseconds, through which every slot is
	// settled (fired or skipped): the last slot fired or skipped, or the
	// time of the command that created, updated or resumed the schedule.
	LastSlot  int64
	Fired     uint64 // slots fired
	Skipped   uint64 // slots skipped
	LastJob   string // the job of the last slot fired
	CreatedAt int64
	UpdatedAt int64
}

// export is a copy that shares nothing with the state.
func (sc *Schedule) export() Schedule {
	c := sc.exportDefinition()
	c.Template.Payload = append([]byte(nil), sc.Template.Payload...)
	return c
}

// exportDefinition copies a schedule without its template's payload.
func (sc *Schedule) exportDefinition() Schedule {
	c := *sc
	c.Template.Payload = nil
	if r := sc.Template.Retry; r != nil {
		p := *r
		c.Template.Retry = &p
	}
	return c
}

// ScheduleJobID is the id of the job a schedule's slot submits: the
// schedule's name, "@", and the slot in RFC 3339, UTC, to the second.
func ScheduleJobID(name string, slot int64) string {
	return name + "@" + time.Unix(0, slot).UTC().Format(time.RFC3339)
}

// PutSchedule creates a schedule, or changes one. Without Replace a put
// of an existing schedule of another definition is ErrConflict, and one of
// the same definition changes nothing (a create retried). With PauseOnly
// it changes only Paused of an existing schedule, and carries no
// definition. Only codec version 6 carries it.
type PutSchedule struct {
	Name      string
	PauseOnly bool
	Paused    bool
	Replace   bool
	// Owner, when set, is the one submitter the caller may act for: the
	// put applies only if the schedule does not exist or its jobs are
	// Owner's. The API checks ownership before it proposes; this check,
	// made where puts are ordered, closes the window between the two
	// (another submitter creating the schedule in between).
	Owner    string
	Cron     string
	Zone     string
	Missed   MissedPolicy
	Template JobSpec
}

// DeleteSchedule deletes a schedule; the jobs it submitted stay. Owner is
// as for PutSchedule. Only codec version 6 carries it.
type DeleteSchedule struct {
	Name  string
	Owner string
}

// checkOwner refuses a put or a delete by a caller scoped to owner of a
// schedule whose jobs are another submitter's.
func checkOwner(old *Schedule, owner string) error {
	if old == nil || owner == "" || old.Template.Submitter == owner {
		return nil
	}
	return fmt.Errorf("%w: schedule %s submits another submitter's jobs, not %s's", ErrConflict, old.Name, owner)
}

// FireSchedule settles a schedule's slots through Slot: it submits the
// slot's job, or with Skip submits nothing. Skipped counts the slots
// passed over before Slot (or, with Skip, through it), for the event;
// Reason says why they were. Only codec version 6 carries it.
type FireSchedule struct {
	Name    string
	Slot    int64
	Skip    bool
	Skipped uint32
	Reason  string
}

func (*PutSchedule) Type() CommandType    { return CmdPutSchedule }
func (*DeleteSchedule) Type() CommandType { return CmdDeleteSchedule }
func (*FireSchedule) Type() CommandType   { return CmdFireSchedule }

func (*PutSchedule) codecVersion() byte    { return codecV6 }
func (*DeleteSchedule) codecVersion() byte { return codecV6 }
func (*FireSchedule) codecVersion() byte   { return codecV6 }

func init() {
	registerCommand(func() Command { return new(PutSchedule) })
	registerCommand(func() Command { return new(DeleteSchedule) })
	registerCommand(func() Command { return new(FireSchedule) })
}

// --- validation ---

func (c *PutSchedule) Validate() error {
	if err := checkName("name", c.Name); err != nil {
		return err
	}
	if err := checkOptionalID("owner", c.Owner); err != nil {
		return err
	}
	if c.PauseOnly {
		return nil
	}
	return validateDefinition(c.Cron, c.Zone, c.Missed, &c.Template)
}

func validateDefinition(cron, zone string, missed MissedPolicy, tmpl *JobSpec) error {
	if cron == "" {
		return invalid("cron", "must not be empty")
	}
	if err := checkText("cron", cron, MaxCronLen); err != nil {
		return err
	}
	if err := checkVersion("zone", zone); err != nil { // printable, no spaces
		return err
	}
	if len(zone) > MaxZoneLen {
		return tooLarge("zone", len(zone), MaxZoneLen)
	}
	if _, ok := missedPolicyNames[missed]; !ok {
		return invalid("missed", "unknown policy %d", missed)
	}
	if tmpl.ID != "" {
		return invalid("spec.id", "a schedule's jobs are named by their slot: leave it empty")
	}
	t := *tmpl
	t.ID = ScheduleJobID(strings.Repeat("x", MaxNameLen), 0)
	return t.Validate()
}

func (c *DeleteSchedule) Validate() error {
	if err := checkName("name", c.Name); err != nil {
		return err
	}
	return checkOptionalID("owner", c.Owner)
}

func (c *FireSchedule) Validate() error {
	if err := checkName("name", c.Name); err != nil {
		return err
	}
	if c.Slot <= 0 {
		return invalid("slot", "must be after 1970")
	}
	return checkText("reason", c.Reason, MaxMessageLen)
}

// --- encoding ---

func (c *PutSchedule) encode(e *encoder) {
	e.str(c.Name)
	e.bool(c.PauseOnly)
	e.bool(c.Paused)
	e.str(c.Owner)
	if !c.PauseOnly {
		e.bool(c.Replace)
		encodeDefinition(e, c.Cron, c.Zone, c.Missed, &c.Template)
	}
}

func (c *PutSchedule) decode(d *decoder) {
	c.Name = d.str(MaxNameLen)
	c.PauseOnly = d.bool()
	c.Paused = d.bool()
	c.Owner = d.str(MaxIDLen)
	if !c.PauseOnly {
		c.Replace = d.bool()
		decodeDefinition(d, &c.Cron, &c.Zone, &c.Missed, &c.Template)
	}
}

func encodeDefinition(e *encoder, cron, zone string, missed MissedPolicy, t *JobSpec) {
	e.str(cron)
	e.str(zone)
	e.byte1(uint8(missed))
	encodeSpec(e, t)
	encodeRetry(e, t.Retry)
}

func decodeDefinition(d *decoder, cron, zone *string, missed *MissedPolicy, t *JobSpec) {
	*cron = d.str(MaxCronLen)
	*zone = d.str(MaxZoneLen)
	*missed = MissedPolicy(d.byte1())
	decodeSpec(d, t)
	t.Retry = decodeRetry(d)
}

func (c *DeleteSchedule) encode(e *encoder) {
	e.str(c.Name)
	e.str(c.Owner)
}

func (c *DeleteSchedule) decode(d *decoder) {
	c.Name = d.str(MaxNameLen)
	c.Owner = d.str(MaxIDLen)
}

func (c *FireSchedule) encode(e *encoder) {
	e.str(c.Name)
	e.varint(c.Slot)
	e.bool(c.Skip)
	e.uvarint(uint64(c.Skipped))
	e.str(c.Reason)
}

func (c *FireSchedule) decode(d *decoder) {
	c.Name = d.str(MaxNameLen)
	c.Slot = d.varint()
	c.Skip = d.bool()
	c.Skipped = d.u32()
	c.Reason = d.str(MaxMessageLen)
}

// --- results ---

// PutScheduleResult is the schedule after a PutSchedule; Created says it
// is new, Changed that the command changed it.
type PutScheduleResult struct {
	Schedule Schedule
	Created  bool
	Changed  bool
}

// FireResult says what a FireSchedule did: Fired with the job's id (which
// may be a job that existed: the slot's job is submitted idempotently);
// otherwise Reason says why nothing was submitted ("already fired" for a
// slot already settled, "paused", the skip's reason, or the submit's
// refusal).
type FireResult struct {
	Fired  bool
	JobID  string
	Reason string
}

// Reasons a FireSchedule submits nothing.
const (
	ReasonAlreadyFired = "already fired"
	ReasonPaused       = "paused"
)

// --- apply ---

func (s *state) putSchedule(sc *Schedule) {
	if old := s.schedules[sc.Name]; old != nil {
		s.bytes -= scheduleBytes(old)
	}
	s.schedules[sc.Name] = sc
	s.bytes += scheduleBytes(sc)
}

func applyPutSchedule(s *state, cmd Command) (any, error) {
	c := cmd.(*PutSchedule)
	old := s.schedules[c.Name]
	if err := checkOwner(old, c.Owner); err != nil {
		return nil, err
	}
	if c.PauseOnly {
		if old == nil {
			return nil, fmt.Errorf("%w: schedule %s", ErrNotFound, c.Name)
		}
		if old.Paused == c.Paused {
			return PutScheduleResult{Schedule: old.export()}, nil
		}
		sc := *old
		sc.Paused, sc.UpdatedAt = c.Paused, s.lastTime
		detail := "paused"
		if !c.Paused {
			// Slots that fell while it was paused are never fired.
			sc.LastSlot = max(sc.LastSlot, s.lastTime)
			detail = "resumed"
		}
		s.putSchedule(&sc)
		s.emit(Event{Type: EventSchedulePaused, Detail: c.Name + " " + detail})
		return PutScheduleResult{Schedule: sc.export(), Changed: true}, nil
	}
	sc := Schedule{
		Name: c.Name, Cron: c.Cron, Zone: c.Zone, Template: c.Template, Missed: c.Missed, Paused: c.Paused,
		LastSlot: s.lastTime, CreatedAt: s.lastTime, UpdatedAt: s.lastTime,
	}
	if old != nil {
		if sameDefinition(old, &sc) {
			return PutScheduleResult{Schedule: old.export()}, nil
		}
		if !c.Replace {
			return nil, fmt.Errorf("%w: schedule %s exists with another definition (replace it to change it)", ErrConflict, c.Name)
		}
		sc.LastSlot = max(old.LastSlot, s.lastTime)
		sc.CreatedAt, sc.Fired, sc.Skipped, sc.LastJob = old.CreatedAt, old.Fired, old.Skipped, old.LastJob
	} else if len(s.schedules) >= MaxSchedules {
		return nil, fmt.Errorf("%w: %d schedules exist", ErrTooLarge, len(s.schedules))
	}
	s.putSchedule(&sc)
	detail := "created"
	if old != nil {
		detail = "updated"
	}
	zone := sc.Zone
	if zone == "" {
		zone = "UTC"
	}
	s.emit(Event{Type: EventScheduleCreated, Detail: fmt.Sprintf("%s %s: %q %s, %s/%s, missed %s",
		c.Name, detail, sc.Cron, zone, sc.Template.Queue, sc.Template.Kind, sc.Missed)})
	return PutScheduleResult{Schedule: sc.export(), Created: old == nil, Changed: true}, nil
}

// sameDefinition says whether a put would change nothing.
func sameDefinition(a, b *Schedule) bool {
	return a.Cron == b.Cron && a.Zone == b.Zone && a.Missed == b.Missed && a.Paused == b.Paused &&
		sameSpec(&a.Template, &b.Template) && equalRetry(a.Template.Retry, b.Template.Retry)
}

func equalRetry(a, b *RetryPolicy) bool {
	return a == b || a != nil && b != nil && *a == *b
}

func applyDeleteSchedule(s *state, cmd Command) (any, error) {
	c := cmd.(*DeleteSchedule)
	old := s.schedules[c.Name]
	if old == nil {
		return nil, fmt.Errorf("%w: schedule %s", ErrNotFound, c.Name)
	}
	if err := checkOwner(old, c.Owner); err != nil {
		return nil, err
	}
	s.bytes -= scheduleBytes(old)
	delete(s.schedules, c.Name)
	s.emit(Event{Type: EventScheduleDeleted, Detail: c.Name})
	return nil, nil
}

func applyFireSchedule(s *state, cmd Command) (any, error) {
	c := cmd.(*FireSchedule)
	old := s.schedules[c.Name]
	switch {
	case old == nil:
		return nil, fmt.Errorf("%w: schedule %s", ErrNotFound, c.Name)
	case slotOnce && c.Slot <= old.LastSlot:
		return FireResult{Reason: ReasonAlreadyFired}, nil
	case old.Paused:
		return FireResult{Reason: ReasonPaused}, nil
	case c.Slot > s.lastTime:
		return nil, invalid("slot", "%s is after the leader's time %s", formatTime(c.Slot), formatTime(s.lastTime))
	}
	sc := *old
	sc.LastSlot = c.Slot
	skipped, reason := uint64(c.Skipped), c.Reason
	var res FireResult
	if !c.Skip {
		spec := old.Template
		spec.ID = ScheduleJobID(c.Name, c.Slot)
		if _, err := applySubmitJob(s, &SubmitJob{Spec: spec}); err != nil {
			reason = "the slot's job was refused: " + err.Error()
			skipped++
		} else {
			res = FireResult{Fired: true, JobID: spec.ID}
			sc.Fired++
			sc.LastJob = spec.ID
		}
	}
	if !res.Fired {
		res.Reason = reason
	}
	sc.Skipped += skipped
	s.putSchedule(&sc)
	slot := formatTime(c.Slot)
	if res.Fired {
		detail := c.Name + " slot " + slot
		if skipped > 0 {
			detail += fmt.Sprintf("; %d earlier slots skipped", skipped)
			if reason != "" {
				detail += ": " + reason
			}
		}
		s.emit(Event{Type: EventScheduleFired, JobID: res.JobID, Detail: detail})
	} else {
		detail := fmt.Sprintf("%s: %d slots through %s skipped", c.Name, skipped, slot)
		if reason != "" {
			detail += ": " + reason
		}
		s.emit(Event{Type: EventScheduleSkipped, Detail: detail})
	}
	return res, nil
}

// --- queries ---

// Schedule returns the named schedule, or ErrNotFound.
func (f *FSM) Schedule(name string) (Schedule, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if sc := f.st.schedules[name]; sc != nil {
		return sc.export(), nil
	}
	return Schedule{}, fmt.Errorf("%w: schedule %s", ErrNotFound, name)
}

// Schedules returns every schedule, by name.
func (f *FSM) Schedules() []Schedule { return f.listSchedules((*Schedule).export) }

// ScheduleDefinitions returns every schedule, by name, without its
// template's payload: a list answer (1000 templates of 256 KiB would be
// 256 MiB to copy for one call); Schedule has the payload.
func (f *FSM) ScheduleDefinitions() []Schedule {
	return f.listSchedules((*Schedule).exportDefinition)
}

// listSchedules returns every schedule as export gives it, by name.
func (f *FSM) listSchedules(export func(*Schedule) Schedule) []Schedule {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Schedule, 0, len(f.st.schedules))
	for _, sc := range f.st.schedules {
		out = append(out, export(sc))
	}
	slices.SortFunc(out, func(a, b Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ScheduleTiming is what the leader reads of a schedule to find its due
// slots: no template, so looking at every schedule copies no payload.
type ScheduleTiming struct {
	Name, Cron, Zone    string
	Missed              MissedPolicy
	Paused              bool
	LastSlot, CreatedAt int64
}

// ScheduleTimings returns every schedule's timing, by name.
func (f *FSM) ScheduleTimings() []ScheduleTiming {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]ScheduleTiming, 0, len(f.st.schedules))
	for _, sc := range f.st.schedules {
		out = append(out, ScheduleTiming{Name: sc.Name, Cron: sc.Cron, Zone: sc.Zone, Missed: sc.Missed, Paused: sc.Paused,
			LastSlot: sc.LastSlot, CreatedAt: sc.CreatedAt})
	}
	slices.SortFunc(out, func(a, b ScheduleTiming) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// --- size and snapshot ---

func scheduleBytes(sc *Schedule) int64 {
	return int64(scheduleOverhead + len(sc.Name) + len(sc.Cron) + len(sc.Zone) + len(sc.LastJob) +
		len(sc.Template.Queue) + len(sc.Template.Kind) + len(sc.Template.Submitter) + len(sc.Template.Payload))
}

func encodeSchedule(e *encoder, sc *Schedule) {
	e.str(sc.Name)
	encodeDefinition(e, sc.Cron, sc.Zone, sc.Missed, &sc.Template)
	e.bool(sc.Paused)
	e.varint(sc.LastSlot)
	e.uvarint(sc.Fired)
	e.uvarint(sc.Skipped)
	e.str(sc.LastJob)
	e.varint(sc.CreatedAt)
	e.varint(sc.UpdatedAt)
}

func decodeSchedule(d *decoder, sc *Schedule) {
	sc.Name = d.str(MaxNameLen)
	decodeDefinition(d, &sc.Cron, &sc.Zone, &sc.Missed, &sc.Template)
	sc.Paused = d.bool()
	sc.LastSlot = d.varint()
	sc.Fired = d.uvarint()
	sc.Skipped = d.uvarint()
	sc.LastJob = d.str(MaxIDLen)
	sc.CreatedAt = d.varint()
	sc.UpdatedAt = d.varint()
	if d.err == nil {
		if err := checkName("schedule.name", sc.Name); err != nil {
			d.fail("schedule %q: %v", sc.Name, err)
		} else if err := validateDefinition(sc.Cron, sc.Zone, sc.Missed, &sc.Template); err != nil {
			d.fail("schedule %s: %v", sc.Name, err)
		} else if err := checkOptionalID("schedule.last_job", sc.LastJob); err != nil {
			d.fail("schedule %s: %v", sc.Name, err)
		}
	}
}
