package fsm

import (
	"bytes"
	"fmt"
	"slices"
)

func applyRegisterWorker(s *state, cmd Command) (any, error) {
	c := cmd.(*RegisterWorker)
	old, known := s.workers[c.WorkerID]
	if held := len(s.workerLeases[c.WorkerID]); known && int(c.Capacity) < held {
		return nil, fmt.Errorf("%w: worker %s holds %d leases, more than capacity %d", ErrConflict, c.WorkerID, held, c.Capacity)
	}
	if !known && len(s.workers) >= MaxWorkers {
		return nil, fmt.Errorf("%w: the worker table is full (%d workers registered); idle workers are removed by the leader",
			ErrTooLarge, len(s.workers))
	}
	w := Worker{ID: s.intern(c.WorkerID), Capacity: c.Capacity, RegisteredAt: s.lastTime, UpdatedAt: s.lastTime, Version: c.Version}
	if known {
		w.RegisteredAt = old.RegisteredAt
	}
	s.workers[w.ID] = w
	if !known || old.Capacity != w.Capacity || old.Version != w.Version {
		detail := fmt.Sprintf("capacity %d", w.Capacity)
		if w.Version != "" {
			detail += ", version " + w.Version
		}
		s.emit(Event{Type: EventWorkerRegistered, WorkerID: w.ID, Detail: detail})
	}
	return w, nil
}

func applyDeregisterWorker(s *state, cmd Command) (any, error) {
	c := cmd.(*DeregisterWorker)
	if _, ok := s.workers[c.WorkerID]; !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownWorker, c.WorkerID)
	}
	var res DeregisterResult
	// A copy: ending each lease drops it from the set.
	for _, e := range slices.Clone(s.workerLeases[c.WorkerID]) {
		tok, j := e.token, s.editJob(e.seq)
		if c.Lost {
			s.expireLease(j, "worker deregistered as lost")
		} else {
			s.releaseLease(j, "worker deregistered")
		}
		res.Released = append(res.Released, LeaseRef{JobID: j.ID, Token: tok})
	}
	delete(s.workers, c.WorkerID)
	ev := Event{Type: EventWorkerDeregistered, WorkerID: c.WorkerID}
	if c.Lost {
		ev.Detail = "its leases settled as a lost worker's"
	}
	s.emit(ev)
	return res, nil
}

func applyRemoveIdle(s *state, cmd Command) (any, error) {
	c := cmd.(*RemoveIdle)
	var res RemoveIdleResult
	for _, id := range c.WorkerIDs {
		if _, ok := s.workers[id]; !ok || len(s.workerLeases[id]) > 0 {
			res.Kept = append(res.Kept, id)
			continue
		}
		delete(s.workers, id)
		s.emit(Event{Type: EventWorkerDeregistered, WorkerID: id, Detail: c.Reason})
		res.Removed = append(res.Removed, id)
	}
	return res, nil
}

func applySubmitJob(s *state, cmd Command) (any, error) {
	c := cmd.(*SubmitJob)
	spec := &c.Spec
	if old := s.jobByID(spec.ID); old != nil {
		if sameSpec(&old.JobSpec, spec) {
			return SubmitResult{Job: old.export()}, nil
		}
		s.emit(Event{Type: EventSubmitConflict, JobID: spec.ID, Detail: "same job id, another spec"})
		return nil, fmt.Errorf("%w: job %s exists with another spec", ErrConflict, spec.ID)
	}
	if s.jobIDs.len() >= MaxJobs {
		return nil, fmt.Errorf("%w: %d jobs kept; compact or raise retention", ErrTooLarge, s.jobIDs.len())
	}
	s.jobSeq++
	j := &Job{
		JobSpec:     *spec,
		Seq:         s.jobSeq,
		SubmittedAt: s.lastTime,
		UpdatedAt:   s.lastTime,
		CreateIndex: s.lastIndex,
		ModifyIndex: s.lastIndex,
		NotBefore:   c.RunAt,
		TimeoutMs:   c.TimeoutMs,
	}
	j.Queue, j.Kind, j.Submitter = s.intern(j.Queue), s.intern(j.Kind), s.intern(j.Submitter)
	j.Retry = s.internRetry(j.Retry)
	s.insertJob(j)
	s.setState(j, JobQueued)
	s.emit(Event{Type: EventJobSubmitted, JobID: j.ID, Detail: j.Queue + "/" + j.Kind})
	if s.delayedJob(j) {
		s.emit(Event{Type: EventJobScheduled, JobID: j.ID, Detail: "not before " + formatTime(j.NotBefore)})
	}
	return SubmitResult{Job: j.export(), Created: true}, nil
}

func sameSpec(a, b *JobSpec) bool {
	return a.ID == b.ID && a.Queue == b.Queue && a.Kind == b.Kind && bytes.Equal(a.Payload, b.Payload) &&
		a.Priority == b.Priority && a.Submitter == b.Submitter && a.MaxAttempts == b.MaxAttempts &&
		a.OnWorkerLost == b.OnWorkerLost && a.MaxWorkerLosses == b.MaxWorkerLosses
	// Not the retry policy: like the run-at time it says how to run the
	// job, not what it is, and the API's default depends on when the
	// cluster was upgraded; a resubmit must find its job either way.
}

func applyCompact(s *state, cmd Command) (any, error) {
	c := cmd.(*Compact)
	var res CompactResult
	// Terminal jobs leave in finish order, the same on every replica.
	for len(s.finished) > 0 {
		j := s.job(s.finished[0])
		if j.FinishedAt() >= c.JobsBefore {
			break
		}
		if res.Jobs == int(c.Limit) {
			res.More = true
			break
		}
		s.removeJob(j)
		s.finished = s.finished[1:]
		res.Jobs++
	}
	if n := s.events.firstAtOrAfter(c.EventsBefore); n > 0 {
		s.dropEvents(n)
		res.Events = n
	}
	if res.Jobs > 0 {
		s.emit(Event{Type: EventJobsCompacted, Detail: fmt.Sprintf("%d jobs", res.Jobs)})
	}
	return res, nil
}

func applyRaiseTokenFloor(s *state, cmd Command) (any, error) {
	c := cmd.(*RaiseTokenFloor)
	if c.Floor > s.lastToken || (!floorOnlyRises && c.Floor != s.lastToken) {
		s.emit(Event{Type: EventTokenFloorRaised, Detail: fmt.Sprintf("from %d to %d", s.lastToken, c.Floor)})
		s.lastToken = c.Floor
	}
	return FloorResult{Next: s.lastToken + 1}, nil
}

func applySetNode(s *state, cmd Command) (any, error) {
	c := cmd.(*SetNode)
	old := s.nodes[c.NodeID]
	level, version := c.Level, c.Version
	if level == 0 && old != nil {
		level, version = old.Level, old.Version // addresses only: the level stays
	}
	if old != nil && old.RaftAddr == c.RaftAddr && old.APIAddr == c.APIAddr && old.Level == level && old.Version == version {
		return *old, nil
	}
	if old == nil && len(s.nodes) >= MaxNodes {
		return nil, fmt.Errorf("%w: %d nodes known", ErrTooLarge, len(s.nodes))
	}
	n := &Node{ID: c.NodeID, RaftAddr: c.RaftAddr, APIAddr: c.APIAddr, UpdatedAt: s.lastTime, Level: level, Version: version}
	s.nodes[n.ID] = n
	detail := fmt.Sprintf("%s raft=%s api=%s", n.ID, n.RaftAddr, n.APIAddr)
	if level != 0 {
		detail += fmt.Sprintf(" level=%d version=%s", level, version)
	}
	s.emit(Event{Type: EventNodeSet, Detail: detail})
	return *n, nil
}

func applyRemoveNode(s *state, cmd Command) (any, error) {
	c := cmd.(*RemoveNode)
	if s.nodes[c.NodeID] != nil {
		delete(s.nodes, c.NodeID)
		s.emit(Event{Type: EventNodeRemoved, Detail: c.NodeID})
	}
	return nil, nil
}

func applyRecordEvents(s *state, cmd Command) (any, error) {
	for _, e := range cmd.(*RecordEvents).Events {
		s.emit(Event{Type: e.Event, WorkerID: e.WorkerID, Detail: e.Detail})
	}
	return nil, nil
}

func applyAudit(s *state, cmd Command) (any, error) {
	c := cmd.(*Audit)
	detail := c.Action
	if c.Detail != "" {
		detail += ": " + c.Detail
	}
	s.emit(Event{Type: EventAudit, Actor: c.Actor, Source: c.Source, Detail: detail})
	return nil, nil
}

func applyRecordEvent(s *state, cmd Command) (any, error) {
	c := cmd.(*RecordEvent)
	s.emit(Event{Type: c.Event, WorkerID: c.WorkerID, Detail: c.Detail})
	return *s.events.at(s.events.len() - 1), nil
}
