package cluster

import (
	"errors"
	"fmt"
)

// Sentinel errors. The API maps each to a wire code; fsm's sentinels pass
// through unchanged (a refused command is the state machine's answer).
var (
	// ErrNotLeader: this node is not the leader. The error is a
	// *NotLeaderError naming the leader when one is known.
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader: there is no leader at the moment (an election is on).
	ErrNoLeader = errors.New("no leader")
	// ErrNotReady: this node is the leader but has not finished taking
	// office (barrier, timers); retry shortly.
	ErrNotReady = errors.New("leader not ready")
	// ErrLeadershipLost: leadership was lost while a proposal was in flight;
	// whether it committed is unknown.
	ErrLeadershipLost = errors.New("leadership lost; outcome unknown")
	// ErrTimeout: the proposal or read did not finish in time; a proposal's
	// outcome is unknown.
	ErrTimeout = errors.New("timed out")
	// ErrUnreachable: the worker has been silent past grace and gets no new
	// lease until it heartbeats again.
	ErrUnreachable = errors.New("worker unreachable")
	// ErrShutdown: the node is shutting down.
	ErrShutdown = errors.New("node shutting down")
	// ErrInvalidConfig: Config.Validate refused a field (a *ConfigError).
	ErrInvalidConfig = errors.New("invalid config")
	// ErrInvalidSnapshot: a snapshot to restore failed its checks.
	ErrInvalidSnapshot = errors.New("invalid snapshot")
	// ErrForbidden: the caller may not ask this (a node asking for a
	// change to another node's entry).
	ErrForbidden = errors.New("forbidden")
	// ErrIDInUse: another node answers as this id at its own address; two
	// nodes never share an id.
	ErrIDInUse = errors.New("node id in use")
	// ErrClaimRefused: the node at the claimed Raft address does not
	// confirm the claimed id and addresses.
	ErrClaimRefused = errors.New("claim not confirmed")
	// ErrNotMember: a node asked for its node-table entry to be refreshed,
	// but it is not a voter (it was removed); only an explicit join adds it.
	ErrNotMember = errors.New("not a member")
	// ErrQuotaExceeded: the replicated state is at its quota, or a
	// submitter at its bound on queued jobs; submits wait for jobs to
	// finish and be compacted.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrDiskFull: this node cannot write its log for lack of space. The
	// error is a *DiskFullError naming the node.
	ErrDiskFull = errors.New("disk full")
	// ErrStorage: the node's log or stable store is missing, empty or
	// corrupt while other state shows it had a past, or a snapshot is
	// damaged: the node refuses to start, or stops. The error is a
	// *StorageError naming the file.
	ErrStorage = errors.New("storage missing or corrupt")
)

// DiskFullError is ErrDiskFull on one node: a write to its data dir failed
// for lack of space (or of quota).
type DiskFullError struct {
	NodeID string
	Err    error // the write's error
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("%s on node %s: %v", ErrDiskFull, e.NodeID, e.Err)
}

// Unwrap gives ErrDiskFull and the write's error.
func (e *DiskFullError) Unwrap() []error { return []error{ErrDiskFull, e.Err} }

// StorageError names a file in the data dir and what is wrong with it. Its
// message is one line that points to the recovery procedure.
type StorageError struct {
	Path    string
	Problem string
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("%s: %s (see \"Storage and recovery\" in docs/operations.md)", e.Path, e.Problem)
}

// Unwrap makes every StorageError match ErrStorage.
func (e *StorageError) Unwrap() error { return ErrStorage }

// NotLeaderError is returned by a node that cannot serve a request only the
// leader can. It names the leader, when known, with its API address, so
// the API can forward the request (one hop) and hint the client.
type NotLeaderError struct {
	LeaderID   string
	LeaderRaft string
	LeaderAPI  string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return ErrNoLeader.Error()
	}
	return fmt.Sprintf("%s: leader is %s (api %s)", ErrNotLeader, e.LeaderID, e.LeaderAPI)
}

// Unwrap is ErrNotLeader when a leader is known, ErrNoLeader otherwise.
func (e *NotLeaderError) Unwrap() error {
	if e.LeaderID == "" {
		return ErrNoLeader
	}
	return ErrNotLeader
}
