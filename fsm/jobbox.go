package fsm

import "unsafe"

// A job and its id in one allocation. The state keeps a job's record (208
// bytes) and its id (a separate string) for as long as the job lives, and
// both are allocated as a submit is applied, among the API's and Raft's
// short-lived objects of the same sizes; once those are collected, the
// spans holding the state's records hold their holes too, since Go's
// collector does not move objects. A heap dump of a leader holding a
// million leases (docs/performance.md, "Where the leader's holes are")
// found most of its holes in the 32-byte size class of the ids and some in
// the 208-byte class of the jobs. A record with room for its id after it
// is one allocation in a size class (224, 240 or 256 bytes) that little
// else uses, and its id costs no allocation of its own.
//
// Every version of a job is boxed afresh (newJob, clone), so no version's
// id keeps another version's record alive. What may: a value that copied
// the id (an event's JobID, an exported job) keeps the whole box, not only
// the id, until it goes. The event log is bounded (MaxEvents), and the
// exports are the answers to calls.
type (
	jobBox16 struct {
		Job
		id [16]byte
	}
	jobBox32 struct {
		Job
		id [32]byte
	}
	jobBox48 struct {
		Job
		id [48]byte
	}
)

// newJob returns a zero job whose ID is a copy of id, kept in the same
// allocation when it is at most 48 bytes long.
func newJob(id string) *Job {
	var j *Job
	var room []byte
	switch {
	case len(id) <= len(jobBox16{}.id):
		b := new(jobBox16)
		j, room = &b.Job, b.id[:]
	case len(id) <= len(jobBox32{}.id):
		b := new(jobBox32)
		j, room = &b.Job, b.id[:]
	case len(id) <= len(jobBox48{}.id):
		b := new(jobBox48)
		j, room = &b.Job, b.id[:]
	default:
		return &Job{JobSpec: JobSpec{ID: id}}
	}
	n := copy(room, id)
	j.ID = unsafe.String(unsafe.SliceData(room), n)
	return j
}
