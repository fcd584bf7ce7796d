// Tests of leasehold's changes (FORK.md), run by leasehold's make test.

package raft

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
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

// checkOn registers a leadership check with s, as verifyLeader does, and
// returns it with the channel it is answered on.
func checkOn(s *followerReplication) (*verifyFuture, chan *verifyFuture) {
	v := &verifyFuture{quorumSize: 2}
	v.init()
	v.votes = 1
	answered := make(chan *verifyFuture, 1)
	v.notifyCh = answered
	s.notifyLock.Lock()
	s.notify[v] = time.Now()
	s.notifyLock.Unlock()
	return v, answered
}

// appendAnswers: a check rides on an append sent after it began; one with
// no append out, or whose append failed, or that outlasts the wait, needs
// its heartbeat.
func TestLeaseholdAppendAnswers(t *testing.T) {
	newRepl := func() *followerReplication {
		return &followerReplication{notify: map[*verifyFuture]time.Time{}}
	}
	stop := make(chan struct{})

	s := newRepl()
	checkOn(s)
	if s.appendAnswers(time.Hour, stop) {
		t.Fatal("no append out, yet a heartbeat was not needed")
	}

	s = newRepl()
	if !s.appendAnswers(time.Hour, stop) {
		t.Fatal("no check waiting, yet a heartbeat was needed")
	}

	// An append sent after the check answers it.
	s = newRepl()
	_, answered := checkOn(s)
	out := s.startAppend()
	sent := time.Now()
	done := make(chan bool, 1)
	go func() { done <- s.appendAnswers(time.Hour, stop) }()
	s.notifyAll(true, sent)
	s.endAppend(out)
	if !<-done {
		t.Fatal("the append answered the check, yet a heartbeat was needed")
	}
	<-answered

	// An append sent before the check answers it not; the next one, out
	// by the time the first ends, does.
	waits := make(chan struct{}, 2)
	appendAnswersWaits = func() { waits <- struct{}{} }
	s = newRepl()
	first := s.startAppend()
	_, answered = checkOn(s)
	go func() { done <- s.appendAnswers(time.Hour, stop) }()
	<-waits // on the first append
	second := s.startAppend()
	s.notifyAll(true, time.Now().Add(-time.Hour)) // the first's answer: sent before the check
	s.endAppend(first)
	select {
	case <-waits: // on the second
	case ok := <-done:
		t.Fatalf("gave up (%v) after the first append, with the check waiting and the next append out", ok)
	}
	s.notifyAll(true, time.Now())
	s.endAppend(second)
	if !<-done {
		t.Fatal("the next append answered the check, yet a heartbeat was needed")
	}
	<-answered
	appendAnswersWaits = nil

	// A failed append answers nothing.
	s = newRepl()
	checkOn(s)
	out = s.startAppend()
	go func() { done <- s.appendAnswers(time.Hour, stop) }()
	s.endAppend(out)
	if <-done {
		t.Fatal("a failed append answered no check, yet no heartbeat was needed")
	}

	// An append that does not end within the wait.
	s = newRepl()
	checkOn(s)
	out = s.startAppend()
	if s.appendAnswers(time.Millisecond, stop) {
		t.Fatal("an append still out after the wait, yet no heartbeat was needed")
	}
	s.endAppend(out)

	// Stopping: no heartbeat.
	s = newRepl()
	checkOn(s)
	out = s.startAppend()
	close(stop)
	if !s.appendAnswers(time.Hour, stop) {
		t.Fatal("replication stopped, yet a heartbeat was needed")
	}
	s.endAppend(out)
}

// The heartbeat goroutine sends no heartbeat for a check the append out
// answers, and one for a check with no append out.
func TestLeaseholdHeartbeatRidesOnAppend(t *testing.T) {
	defer func(w time.Duration) { appendAnswerWait = w }(appendAnswerWait)
	appendAnswerWait = time.Hour // the append below is answered however late
	trans := newPeerTransport()
	r := &Raft{trans: trans, logger: hclog.NewNullLogger()}
	conf := DefaultConfig()
	conf.LocalID = "leader"
	conf.HeartbeatTimeout = time.Hour // no heartbeat on the timer in this test
	r.conf.Store(*conf)
	s := &followerReplication{notify: map[*verifyFuture]time.Time{}, notifyCh: make(chan struct{}, 1),
		peer: Server{ID: "follower", Address: "follower"}}
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		r.heartbeat(s, stop)
	}()

	// A check begins with an append out that was sent after it; the
	// heartbeat goroutine takes the check's notify, then the append is
	// answered.
	_, answered := checkOn(s)
	out := s.startAppend()
	sent := time.Now()
	asyncNotifyCh(s.notifyCh)
	waitFor(t, "the heartbeat goroutine to take the notify", func() bool { return len(s.notifyCh) == 0 })
	s.notifyAll(true, sent)
	s.endAppend(out)
	<-answered

	// A check with no append out gets its heartbeat, and its answer.
	_, answered = checkOn(s)
	asyncNotifyCh(s.notifyCh)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("a check with no append out was not answered by a heartbeat")
	}
	close(stop)
	<-exited
	if n := trans.sent("follower"); n != 1 {
		t.Fatalf("%d heartbeats sent; want 1, for the check no append answered", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Checks that appends answer, however often, do not put off the periodic
// heartbeat: its timer is kept across them.
func TestLeaseholdPeriodicHeartbeatNotPutOff(t *testing.T) {
	trans := newPeerTransport()
	r := &Raft{trans: trans, logger: hclog.NewNullLogger()}
	conf := DefaultConfig()
	conf.LocalID = "leader"
	conf.HeartbeatTimeout = 50 * time.Millisecond // a periodic heartbeat every 5 to 10 ms
	r.conf.Store(*conf)
	s := &followerReplication{notify: map[*verifyFuture]time.Time{}, notifyCh: make(chan struct{}, 1),
		peer: Server{ID: "follower", Address: "follower"}}
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		r.heartbeat(s, stop)
	}()
	defer func() {
		close(stop)
		<-exited
	}()
	// No check waits, so every notify is answered already: no heartbeat
	// for it. Upstream's timer was made anew after each, and never fired
	// while they came faster than it.
	deadline := time.Now().Add(10 * time.Second)
	for trans.sent("follower") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no periodic heartbeat in 10 s while notifies kept coming")
		}
		asyncNotifyCh(s.notifyCh)
		runtime.Gosched()
	}
}

// LatestConfiguration reads the configuration last set (a copy, which the
// setter's later changes do not reach), before and after one is set, and
// allocates nothing doing it.
func TestLeaseholdLatestConfiguration(t *testing.T) {
	r := &Raft{}
	if got := r.LatestConfiguration(); len(got.Servers) != 0 {
		t.Fatalf("no configuration set: got %+v", got)
	}
	c := Configuration{Servers: []Server{
		{Suffrage: Voter, ID: "a", Address: "a:1"},
		{Suffrage: Nonvoter, ID: "b", Address: "b:1"},
	}}
	want := c.Clone()
	r.setLatestConfiguration(c, 7)
	c.Servers[0].Suffrage = Nonvoter // the caller's copy changes; the stored one must not
	got := r.LatestConfiguration()
	if len(got.Servers) != len(want.Servers) {
		t.Fatalf("LatestConfiguration %+v, want %+v", got, want)
	}
	for i := range want.Servers {
		if got.Servers[i] != want.Servers[i] {
			t.Fatalf("server %d: LatestConfiguration %+v, want %+v", i, got.Servers[i], want.Servers[i])
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.LatestConfiguration() }); n != 0 {
		t.Fatalf("LatestConfiguration allocates %.0f times a call", n)
	}
}

// The commit index is the quorum's match index, for up to 16 voters (sorted
// on the stack, allocating nothing) and past them; a follower's answer that
// moves its match index allocates nothing.
func TestLeaseholdCommitmentQuorumMatch(t *testing.T) {
	for _, n := range []int{1, 3, 5, 16, 17, 20} {
		var c Configuration
		for i := 0; i < n; i++ {
			c.Servers = append(c.Servers, Server{Suffrage: Voter, ID: ServerID(string(rune('a' + i)))})
		}
		cm := newCommitment(make(chan struct{}, 1), c, 1)
		// Voter i has matched index 10*(n-i): the quorum's index is the
		// one a majority (n/2+1 voters) has reached.
		for i, s := range c.Servers {
			cm.match(s.ID, uint64(10*(n-i)))
		}
		if want := uint64(10 * (n - n/2)); cm.getCommitIndex() != want {
			t.Fatalf("%d voters: commit index %d, want %d", n, cm.getCommitIndex(), want)
		}
		if n > 16 {
			continue
		}
		id, idx := c.Servers[0].ID, uint64(10*n)
		if a := testing.AllocsPerRun(100, func() { idx++; cm.match(id, idx) }); a != 0 {
			t.Fatalf("%d voters: a match allocates %.0f times", n, a)
		}
	}
}

// peerTransport counts the heartbeats sent to each follower, answering
// each with success (after slow, if set), or with an error for the
// followers in down.
type peerTransport struct {
	Transport
	mu       sync.Mutex
	beats    map[ServerID]int
	answered map[ServerID]int
	down     map[ServerID]bool
	slow     map[ServerID]time.Duration // how long each answer takes
}

func newPeerTransport() *peerTransport {
	return &peerTransport{beats: map[ServerID]int{}, answered: map[ServerID]int{},
		down: map[ServerID]bool{}, slow: map[ServerID]time.Duration{}}
}

func (p *peerTransport) AppendEntries(id ServerID, _ ServerAddress, _ *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	p.mu.Lock()
	p.beats[id]++
	down, slow := p.down[id], p.slow[id]
	p.mu.Unlock()
	if down {
		return errors.New("unreachable")
	}
	time.Sleep(slow)
	p.mu.Lock()
	p.answered[id]++
	p.mu.Unlock()
	resp.Success = true
	return nil
}

func (p *peerTransport) EncodePeer(id ServerID, _ ServerAddress) []byte { return []byte(id) }

func (p *peerTransport) sent(id ServerID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.beats[id]
}

func (p *peerTransport) answers(id ServerID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered[id]
}

// checkCluster is a leader of three voters; a's last answer is newer than
// b's. With run, its followers' heartbeat goroutines run until stop is
// called or the test ends. b is a nonvoter if bSuffrage says so.
func checkCluster(t *testing.T, trans *peerTransport, run bool, bSuffrage ServerSuffrage) (r *Raft, repl map[ServerID]*followerReplication, stop func()) {
	t.Helper()
	r = &Raft{trans: trans, logger: hclog.NewNullLogger(), verifyCh: make(chan *verifyFuture, 8)}
	conf := DefaultConfig()
	conf.LocalID = "leader"
	conf.HeartbeatTimeout = time.Hour // no heartbeat on the timer in these tests
	r.conf.Store(*conf)
	r.configurations.latest = Configuration{Servers: []Server{
		{ID: "leader", Address: "leader", Suffrage: Voter},
		{ID: "a", Address: "a", Suffrage: Voter},
		{ID: "b", Address: "b", Suffrage: bSuffrage},
	}}
	r.leaderState.notify = map[*verifyFuture]struct{}{}
	r.leaderState.replState = map[ServerID]*followerReplication{}
	stopCh := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range []ServerID{"a", "b"} {
		s := &followerReplication{notify: map[*verifyFuture]time.Time{}, notifyCh: make(chan struct{}, 1),
			peer:        Server{ID: id, Address: ServerAddress(id), Suffrage: Voter},
			lastContact: time.Now().Add(-time.Duration(i) * time.Second)}
		r.leaderState.replState[id] = s
		if run {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.heartbeat(s, stopCh)
			}()
		}
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(stopCh)
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return r, r.leaderState.replState, stop
}

// check runs one leadership check as the leader's loop does, and returns
// once a quorum answered it.
func check(t *testing.T, r *Raft) {
	t.Helper()
	v := &verifyFuture{}
	v.init()
	r.verifyLeader(v)
	select {
	case got := <-r.verifyCh:
		if got != v || got.votes < got.quorumSize {
			t.Fatalf("the check ended with %d of %d votes", got.votes, got.quorumSize)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a check was not answered in 10 s")
	}
	for _, repl := range r.leaderState.replState {
		repl.cleanNotify(v)
	}
}

// A leadership check asks for heartbeats from only as many followers as
// a quorum needs, those heard from last: of three voters, one follower.
// The other is asked only if the check still waits checkFallback later.
func TestLeaseholdCheckAsksAQuorum(t *testing.T) {
	old := checkFallback
	t.Cleanup(func() { checkFallback = old }) // after the heartbeat goroutines end
	checkFallback = time.Hour

	// Who is asked.
	r, repl, _ := checkCluster(t, newPeerTransport(), false, Voter)
	v := &verifyFuture{}
	v.init()
	r.verifyLeader(v)
	if len(repl["a"].notifyCh) != 1 || len(repl["b"].notifyCh) != 0 {
		t.Fatalf("a check asked a %d times, b %d times; want 1 and 0", len(repl["a"].notifyCh), len(repl["b"].notifyCh))
	}
	if repl["a"].standby.Load() || !repl["b"].standby.Load() {
		t.Fatal("b, heard from before a, is not the one on standby")
	}
	if repl["a"].checksWaiting() != 1 || repl["b"].checksWaiting() != 1 {
		t.Fatal("the check is not registered with both followers, so that either's answer counts")
	}

	// What they send.
	trans := newPeerTransport()
	r, repl, stop := checkCluster(t, trans, true, Voter)
	for i := 0; i < 3; i++ {
		check(t, r)
	}
	// A notify on standby for a check that has not waited checkFallback
	// sends nothing, even though the check still waits on b.
	v = &verifyFuture{}
	v.init()
	r.verifyLeader(v)
	select {
	case <-r.verifyCh:
	case <-time.After(10 * time.Second):
		t.Fatal("a check was not answered in 10 s")
	}
	asyncNotifyCh(repl["b"].notifyCh)
	waitFor(t, "b's heartbeat goroutine to take the notify", func() bool { return len(repl["b"].notifyCh) == 0 })
	stop()
	if a, b := trans.sent("a"), trans.sent("b"); a != 4 || b != 0 {
		t.Fatalf("four checks sent %d heartbeats to a, %d to b; want 4 and 0", a, b)
	}
}

// When the follower asked does not answer, the check asks the other once
// it has waited checkFallback, and the next check asks the one that
// answered it.
func TestLeaseholdCheckFallsBack(t *testing.T) {
	old := checkFallback
	t.Cleanup(func() { checkFallback = old }) // after the heartbeat goroutines end
	checkFallback = 20 * time.Millisecond
	trans := newPeerTransport()
	trans.down["a"] = true
	r, repl, stop := checkCluster(t, trans, true, Voter)
	check(t, r)
	if repl["a"].standby.Load() || !repl["b"].standby.Load() {
		t.Fatal("the first check did not ask a alone")
	}
	check(t, r)
	if !repl["a"].standby.Load() || repl["b"].standby.Load() {
		t.Fatal("the second check did not ask b, which answered the first, alone")
	}
	waitFor(t, "a heartbeat to a", func() bool { return trans.sent("a") >= 1 })
	stop()
	if b := trans.sent("b"); b != 2 {
		t.Fatalf("two checks sent %d heartbeats to b; want 2", b)
	}
}

// A follower that answers, but after the check was ended by another, is
// heard from last, yet the next check asks the one that answered it.
func TestLeaseholdCheckPassesOverALateFollower(t *testing.T) {
	old := checkFallback
	t.Cleanup(func() { checkFallback = old }) // after the heartbeat goroutines end
	checkFallback = 10 * time.Millisecond
	trans := newPeerTransport()
	trans.slow["a"] = 100 * time.Millisecond
	r, repl, _ := checkCluster(t, trans, true, Voter)
	check(t, r)
	waitFor(t, "a's late answer", func() bool { return trans.answers("a") >= 1 })
	if !repl["a"].LastContact().After(repl["b"].LastContact()) {
		t.Fatal("a, answering late, is not the follower heard from last")
	}
	v := &verifyFuture{}
	v.init()
	r.verifyLeader(v)
	if !repl["a"].standby.Load() || repl["b"].standby.Load() {
		t.Fatal("the next check did not ask b, which answered the last check, alone")
	}
	select {
	case <-r.verifyCh:
	case <-time.After(10 * time.Second):
		t.Fatal("a check was not answered in 10 s")
	}
}

// A nonvoter's answer counts for no check: it is neither asked nor
// registered with.
func TestLeaseholdCheckIgnoresNonvoters(t *testing.T) {
	r, repl, _ := checkCluster(t, newPeerTransport(), false, Nonvoter)
	v := &verifyFuture{}
	v.init()
	r.verifyLeader(v)
	if v.quorumSize != 2 || repl["a"].checksWaiting() != 1 || len(repl["a"].notifyCh) != 1 {
		t.Fatal("the check did not ask a, the one other voter")
	}
	if repl["b"].checksWaiting() != 0 || len(repl["b"].notifyCh) != 0 {
		t.Fatal("the check was registered with b, a nonvoter")
	}
}

// An answer to a check that already has its quorum, but is not yet
// cleaned up by the leader's loop, does not rank its follower as one that
// answered the check; nor does a later answer to an older check lower the
// rank.
func TestLeaseholdCheckRanksOnlyAnswersThatCounted(t *testing.T) {
	a := &followerReplication{notify: map[*verifyFuture]time.Time{}}
	b := &followerReplication{notify: map[*verifyFuture]time.Time{}}
	registered := time.Now()
	check := func(seq uint64) *verifyFuture {
		v := &verifyFuture{quorumSize: 2, seq: seq}
		v.init()
		v.votes = 1
		v.notifyCh = make(chan *verifyFuture, 1)
		a.notify[v], b.notify[v] = registered, registered
		return v
	}
	check(1)
	b.notifyAll(true, registered.Add(time.Millisecond)) // ends check 1
	a.notifyAll(true, registered.Add(2*time.Millisecond))
	if b.lastCheck.Load() != 1 || a.lastCheck.Load() != 0 {
		t.Fatalf("lastCheck a=%d b=%d; want 0 and 1: a's answer came after the check had its quorum",
			a.lastCheck.Load(), b.lastCheck.Load())
	}
	v3 := check(3)
	v3.votes = 0 // needs both answers
	b.notifyAll(true, registered.Add(time.Millisecond))
	v2 := check(2)
	v2.votes = 0
	b.notifyAll(true, registered.Add(time.Millisecond))
	if got := b.lastCheck.Load(); got != 3 {
		t.Fatalf("b's lastCheck %d after answering checks 3 and then 2; want 3", got)
	}
}
