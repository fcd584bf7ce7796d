package transport

import (
	"errors"

	"connectrpc.com/connect"

	leaseholdv1 "github.com/leasehold/leasehold/transport/gen/leasehold/v1"
)

// Reasons are the stable error codes of the public API. Every error the
// API returns carries one in an ErrorDetail; the server maps its errors to
// them (package cluster/api) and the Go client maps them back to its
// sentinels (package client). Append only.
const (
	ReasonNotLeader       = "NOT_LEADER"       // details: leader_id, leader_api
	ReasonNoLeader        = "NO_LEADER"        // an election is on; retry
	ReasonNotReady        = "NOT_READY"        // leader taking office; retry
	ReasonShuttingDown    = "SHUTTING_DOWN"    // retry another node
	ReasonOutcomeUnknown  = "OUTCOME_UNKNOWN"  // leadership lost mid-proposal; retry with the same ids
	ReasonTimeout         = "TIMEOUT"          // the deadline passed; a write's outcome is unknown
	ReasonInvalidArgument = "INVALID_ARGUMENT" // details: field
	ReasonTooLarge        = "TOO_LARGE"        // details: field
	ReasonNotFound        = "NOT_FOUND"
	ReasonConflict        = "CONFLICT"           // same job id, another spec; another report on a reported lease
	ReasonStaleToken      = "STALE_TOKEN"        // not the job's live lease; recorded as an event
	ReasonNotOwner        = "NOT_OWNER"          // another worker's lease
	ReasonUnknownWorker   = "UNKNOWN_WORKER"     // register first
	ReasonUnreachable     = "UNREACHABLE_WORKER" // silent past grace; heartbeat first
	ReasonJobFinished     = "JOB_FINISHED"
	ReasonJobNotDead      = "JOB_NOT_DEAD" // only a dead job can be retried
	ReasonTokensExhausted = "TOKENS_EXHAUSTED"
	ReasonUnauthenticated = "UNAUTHENTICATED"
	ReasonForbidden       = "PERMISSION_DENIED"
	ReasonInternal        = "INTERNAL"
	// ReasonRateLimited: the credential's request rate is exceeded;
	// details: retry_after.
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonQuotaExceeded: the replicated state is at its quota (or the
	// submitter at its bound on queued jobs); submits are refused until
	// jobs finish and are compacted.
	ReasonQuotaExceeded = "QUOTA_EXCEEDED"
	// ReasonDiskFull: the answering node cannot write its log; details:
	// node_id.
	ReasonDiskFull = "DISK_FULL"
	// ReasonUpgradeRequired: the request needs an entry some voter's build
	// cannot apply; the message names the nodes to upgrade.
	ReasonUpgradeRequired = "UPGRADE_REQUIRED"
)

var reasonCodes = map[string]connect.Code{
	ReasonNotLeader:       connect.CodeUnavailable,
	ReasonNoLeader:        connect.CodeUnavailable,
	ReasonNotReady:        connect.CodeUnavailable,
	ReasonShuttingDown:    connect.CodeUnavailable,
	ReasonOutcomeUnknown:  connect.CodeAborted,
	ReasonTimeout:         connect.CodeDeadlineExceeded,
	ReasonInvalidArgument: connect.CodeInvalidArgument,
	ReasonTooLarge:        connect.CodeResourceExhausted,
	ReasonNotFound:        connect.CodeNotFound,
	ReasonConflict:        connect.CodeAlreadyExists,
	ReasonStaleToken:      connect.CodeFailedPrecondition,
	ReasonNotOwner:        connect.CodePermissionDenied,
	ReasonUnknownWorker:   connect.CodeFailedPrecondition,
	ReasonUnreachable:     connect.CodeFailedPrecondition,
	ReasonJobFinished:     connect.CodeFailedPrecondition,
	ReasonJobNotDead:      connect.CodeFailedPrecondition,
	ReasonTokensExhausted: connect.CodeResourceExhausted,
	ReasonUnauthenticated: connect.CodeUnauthenticated,
	ReasonForbidden:       connect.CodePermissionDenied,
	ReasonInternal:        connect.CodeInternal,
	ReasonRateLimited:     connect.CodeResourceExhausted,
	ReasonQuotaExceeded:   connect.CodeResourceExhausted,
	ReasonDiskFull:        connect.CodeResourceExhausted,
	ReasonUpgradeRequired: connect.CodeFailedPrecondition,
}

// Reasons lists every reason code, for tests that must cover them all.
func Reasons() []string {
	out := make([]string, 0, len(reasonCodes))
	for r := range reasonCodes {
		out = append(out, r)
	}
	return out
}

// CodeOf returns the Connect (and gRPC) code a reason travels with.
func CodeOf(reason string) connect.Code {
	if c, ok := reasonCodes[reason]; ok {
		return c
	}
	return connect.CodeInternal
}

// NewError builds an API error: the reason's code, the message, and the
// detail (whose Reason is set to reason).
func NewError(reason string, err error, detail *leaseholdv1.ErrorDetail) *connect.Error {
	if detail == nil {
		detail = &leaseholdv1.ErrorDetail{}
	}
	detail.Reason = reason
	cerr := connect.NewError(CodeOf(reason), err)
	if d, derr := connect.NewErrorDetail(detail); derr == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// DetailOf returns the ErrorDetail an API error carries, or nil.
func DetailOf(err error) *leaseholdv1.ErrorDetail {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return nil
	}
	for _, d := range cerr.Details() {
		v, verr := d.Value()
		if verr != nil {
			continue
		}
		if ed, ok := v.(*leaseholdv1.ErrorDetail); ok {
			return ed
		}
	}
	return nil
}

// HTTP headers of the API.
const (
	// HeaderLeader is set on every response: the leader's API address as
	// the answering node knows it, so clients talk to the leader directly.
	HeaderLeader = "Leasehold-Leader"
	// HeaderForwarded marks a request a node forwarded to the leader; the
	// leader answers it itself or refuses, never forwards it again.
	HeaderForwarded = "Leasehold-Forwarded"
	// HeaderAuthorization carries "Bearer <token>" when tokens are enabled.
	HeaderAuthorization = "Authorization"
)
