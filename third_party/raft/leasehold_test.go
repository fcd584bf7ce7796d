// Tests of leasehold's changes (FORK.md), run by leasehold's make test.

package raft

import (
	"testing"
	"time"
)

// A "still leader" answer counts only for the checks registered before its
// RPC was sent: a check registered while an RPC was out waits for a later
// one. A "not leader" answer counts for every check.
func TestLeaseholdNotifyCountsOnlyLaterRPCs(t *testing.T) {
	s := &followerReplication{notify: map[*verifyFuture]time.Time{}}
	sent := time.Now()
	early, late := &verifyFuture{quorumSize: 2}, &verifyFuture{quorumSize: 2}
	for _, v := range []*verifyFuture{early, late} {
		v.init()
		v.votes = 1
		v.notifyCh = make(chan *verifyFuture, 2)
	}
	s.notify[early] = sent.Add(-time.Millisecond)
	s.notify[late] = sent.Add(time.Millisecond)

	s.notifyAll(true, sent)
	if early.votes != 2 {
		t.Fatalf("a check registered before the RPC was sent has %d votes, want 2", early.votes)
	}
	if late.votes != 1 {
		t.Fatalf("a check registered after the RPC was sent counted its answer (%d votes)", late.votes)
	}
	if _, waiting := s.notify[late]; !waiting || len(s.notify) != 1 {
		t.Fatalf("the later check no longer waits for an RPC: %v", s.notify)
	}

	s.notifyAll(true, sent.Add(2*time.Millisecond))
	if late.votes != 2 || len(s.notify) != 0 {
		t.Fatalf("an RPC sent after the check: %d votes, %d waiting", late.votes, len(s.notify))
	}

	lost := &verifyFuture{quorumSize: 2}
	lost.init()
	lost.votes = 1
	lost.notifyCh = make(chan *verifyFuture, 1)
	s.notify[lost] = sent.Add(time.Hour)
	s.notifyAll(false, time.Time{})
	if len(s.notify) != 0 {
		t.Fatal("a stale-term answer left a check waiting")
	}
	if lost.votes != 1 || lost.notifyCh != nil {
		t.Fatalf("a stale-term answer: %d votes, answered %v; want 1 vote, answered", lost.votes, lost.notifyCh == nil)
	}
}
