package checker

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/jepsen-lite/history"
	"github.com/leasehold/leasehold/transport"
)

// attempt records one outsider attempt at msec.
func (b *hb) attempt(msec int64, a history.Attempt) int {
	return b.raw(history.Entry{Kind: history.KindOutsiderAttempt, Ns: at(msec), Process: "outsider", Attempt: &a})
}

// outsiderRound is one refused round of every attack at every node, as a
// correct insecure cluster answers it (n1 leads).
func (b *hb) outsiderRound(msec int64) {
	capture := "10.0.0.250:7701"
	for _, n := range []string{"n1", "n2", "n3"} {
		code := "not_leader"
		if n == "n1" {
			code = "claim_refused"
		}
		b.attempt(msec, history.Attempt{Attack: history.AttackJoinStranger, Node: n, Via: history.ViaTCP, Code: code,
			Claim: &history.Member{ID: "intruder", RaftAddr: "10.0.0.250:7711", APIAddr: capture}})
		b.attempt(msec, history.Attempt{Attack: history.AttackJoinTakeover, Node: n, Via: history.ViaTCP, Code: code,
			Claim: &history.Member{ID: "n1", RaftAddr: "10.0.0.1:7711", APIAddr: capture}})
		if n == "n1" {
			code = "id_in_use"
		}
		b.attempt(msec, history.Attempt{Attack: history.AttackJoinImpostor, Node: n, Via: history.ViaTCP, Code: code,
			Claim: &history.Member{ID: "n2", RaftAddr: "10.0.0.250:7711", APIAddr: capture}})
		for _, attack := range []string{history.AttackRaftAppend, history.AttackRaftVote} {
			b.attempt(msec, history.Attempt{Attack: attack, Node: n, Via: history.ViaTCP, Term: 1<<64 - 1, Error: "raft rpc refused"})
		}
	}
}

func withOutsider(t *testing.T, edit func(b *hb)) Report {
	t.Helper()
	b := scenario(t, defaults)
	b.fault("f9", "outsider", []string{"n1", "n2", "n3"}, 3200, 3300)
	b.outsiderRound(3210)
	b.outsiderRound(3250)
	if edit != nil {
		edit(b)
	}
	return Check(b.finish(5000, true), Options{RequireAllFinished: true})
}

func o1(t *testing.T, rep Report) Result {
	t.Helper()
	res, ok := rep.Result("O1")
	if !ok {
		t.Fatal("no O1 result")
	}
	return res
}

func violationsMention(t *testing.T, res Result, want string) {
	t.Helper()
	for _, v := range res.Violations {
		if strings.Contains(v.Msg, want) {
			return
		}
	}
	t.Fatalf("no %s violation mentions %q: %+v", res.Invariant, want, res.Violations)
}

// Every attempt refused, the membership and the terms as configured: O1
// passes, and counts what it saw.
func TestOutsiderRefusedPasses(t *testing.T) {
	rep := withOutsider(t, nil)
	expectOnly(t, rep)
	res := o1(t, rep)
	if res.Stats["outsider_attempts"] != 30 || res.Stats["outsider_accepted"] != 0 || res.Stats["max_term"] != finalTerm {
		t.Fatalf("stats %v", res.Stats)
	}
	if len(res.Notes) > 0 {
		t.Fatalf("notes %v", res.Notes)
	}
}

// One join answered without an error is a violation, whichever node took
// it, in an insecure run too.
func TestOutsiderAcceptedJoinFails(t *testing.T) {
	var idx int
	rep := withOutsider(t, func(b *hb) {
		idx = b.attempt(3260, history.Attempt{Attack: history.AttackJoinImpostor, Node: "n1", Via: history.ViaTCP, Accepted: true,
			Claim: &history.Member{ID: "n2", RaftAddr: "10.0.0.250:7711", APIAddr: "10.0.0.250:7701"}})
	})
	expectOnly(t, rep, "O1")
	res := o1(t, rep)
	violationsMention(t, res, "join-impostor via tcp at n1 was accepted")
	if res.Violations[0].Entries[0] != idx {
		t.Fatalf("the violation cites %v, not the attempt %d", res.Violations[0].Entries, idx)
	}
}

// A connection to the capture server is a violation: an address only an
// attack offered was used.
func TestOutsiderCaptureFails(t *testing.T) {
	rep := withOutsider(t, func(b *hb) {
		b.raw(history.Entry{Kind: history.KindOutsiderCapture, Ns: at(3400), Process: "outsider",
			Capture: &history.Capture{From: "10.0.0.2:40000", First: "tls", Count: 1}})
	})
	expectOnly(t, rep, "O1")
	violationsMention(t, o1(t, rep), "capture server got a connection from 10.0.0.2:40000 (tls)")
}

// Raft messages: out of range, accepted anywhere, is a violation; in
// range, accepted by an insecure run's open port, is noted; in a secure
// run any accepted Raft message is a violation.
func TestOutsiderRaftMessages(t *testing.T) {
	rep := withOutsider(t, func(b *hb) {
		b.attempt(3260, history.Attempt{Attack: history.AttackRaftAppend, Node: "n2", Via: history.ViaTCP, Term: 1<<64 - 1, Accepted: true})
	})
	expectOnly(t, rep, "O1")
	violationsMention(t, o1(t, rep), "out of range, was accepted")

	rep = withOutsider(t, func(b *hb) {
		b.attempt(3260, history.Attempt{Attack: history.AttackRaftVote, Node: "n2", Via: history.ViaTCP, Term: 5, Accepted: true})
	})
	expectOnly(t, rep)
	if res := o1(t, rep); len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "open peer port") {
		t.Fatalf("notes %v", res.Notes)
	}

	rep = withOutsider(t, func(b *hb) {
		b.e[0].Run.Secure = true
		b.attempt(3260, history.Attempt{Attack: history.AttackRaftTimeoutNow, Node: "n3", Via: history.ViaClientCert, Accepted: true})
	})
	expectOnly(t, rep, "O1")
	violationsMention(t, o1(t, rep), "raft-timeout-now via tls-client-cert at n3 (term 0) was accepted in a secure run")
}

// A node whose membership changed (the takeover's capture address as the
// leader's API), or whose term is forged or beyond what the run's time
// allows, is a violation, outsider or not.
func TestOutsiderEffects(t *testing.T) {
	for _, c := range []struct {
		name, want string
		edit       func(fs *history.FinalState)
	}{
		{"api address taken", "n2 ends with members", func(fs *history.FinalState) { fs.Members[0].APIAddr = "10.0.0.250:7701" }},
		{"a member added", "n2 ends with members", func(fs *history.FinalState) {
			fs.Members = append(fs.Members, history.Member{ID: "z9", RaftAddr: "10.0.0.250:7711", APIAddr: "10.0.0.250:7701", Voter: true})
		}},
		{"a voter demoted", "not a voter", func(fs *history.FinalState) { fs.Members[2].Voter = false }},
		{"a forged term", "which no cluster reaches", func(fs *history.FinalState) { fs.Term = transport.MaxRaftValue }},
		{"too many terms", "beyond the 157 the run allows", func(fs *history.FinalState) { fs.Term = 158 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries := scenario(t, defaults).finish(5000, true)
			for i := range entries {
				if f := entries[i].Final; f != nil && f.Node == "n2" {
					f.Members = testMembers()
					c.edit(f)
				}
			}
			rep := Check(entries, Options{RequireAllFinished: true})
			// A different term is no disagreement I8 looks at.
			expectOnly(t, rep, "O1")
			violationsMention(t, o1(t, rep), c.want)
		})
	}
}

// A history from before memberships and terms were recorded is noted, not
// flagged.
func TestOutsiderOldHistory(t *testing.T) {
	entries := scenario(t, defaults).finish(5000, true)
	for i := range entries {
		if f := entries[i].Final; f != nil {
			f.Members, f.Term = nil, 0
		}
	}
	rep := Check(entries, Options{RequireAllFinished: true})
	expectOnly(t, rep)
	if res := o1(t, rep); len(res.Notes) != 4 {
		t.Fatalf("notes %v", res.Notes)
	}
}
