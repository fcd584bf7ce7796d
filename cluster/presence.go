package cluster

import "time"

// Reachability is what the leader knows of a worker's presence.
type Reachability uint8

const (
	// ReachUnknown: nobody here can say. A node that is not the
	// established leader has no expiry table (it is leader-local, never
	// replicated), so a stale read on a follower answers this; so does a
	// worker the leader does not time.
	ReachUnknown Reachability = iota
	// ReachActive: heard within grace.
	ReachActive
	// ReachUnreachable: silent past grace. For a worker the leader heard
	// this term, from when the leader announced it (the worker.unreachable
	// event) until it is heard again.
	// For a registered worker holding no lease that this leader has not
	// heard since it took office, when the leader has been in office
	// longer than grace: the leader announces nothing about such a worker
	// (it did not see it fall silent), but it has not heard it either.
	ReachUnreachable
	// ReachGone: silent past toleration, so its leases have expired; the
	// leader removes it after WorkerGCThreshold of silence if it holds
	// nothing. As unreachable, from the leader's point of view.
	ReachGone
)

func (r Reachability) String() string {
	switch r {
	case ReachActive:
		return "active"
	case ReachUnreachable:
		return "unreachable"
	case ReachGone:
		return "gone"
	}
	return "unknown"
}

// Presence is the leader's memory of one worker.
type Presence struct {
	State Reachability
	// Heard: the leader heard the worker this term, or times it for its
	// leases (a lease holder counts as heard at the takeover, as its
	// clocks restart there). Silence and LastHeard are set only with it.
	Heard bool
	// Silence is how long the worker has been silent, on the leader's
	// deadline clock (the one its expiries run on).
	Silence time.Duration
	// LastHeard is the wall-clock time the silence began: the leader's
	// wall clock now, less Silence.
	LastHeard time.Time
}

// Presence returns what this node, as the established leader, knows of
// each worker's presence, in the order of ids. A node that is not the
// established leader answers an error (*NotLeaderError or ErrNotReady):
// the caller says unknown, or asks the leader.
func (n *Node) Presence(ids []string) ([]Presence, error) {
	ls, err := n.established()
	if err != nil {
		return nil, err
	}
	return ls.table.Load().presence(ids, n.clock.Now(), n.clock.Wall()), nil
}

// presence reads the table's view of each worker at now; wall is the wall
// clock at the same moment, to date the silences.
func (t *expiryTable) presence(ids []string, now, wall time.Time) []Presence {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Presence, len(ids))
	for i, id := range ids {
		w := t.workers[id]
		if w == nil {
			continue // not timed: unknown
		}
		silence := max(now.Sub(w.lastHeard), 0)
		if w.unheard {
			// lastHeard is the takeover (shifted with every deadline).
			switch {
			case silence > t.toleration:
				out[i].State = ReachGone
			case silence > t.grace:
				out[i].State = ReachUnreachable
			default:
				out[i].State = ReachUnknown
			}
			continue
		}
		out[i] = Presence{State: ReachActive, Heard: true, Silence: silence, LastHeard: wall.Add(-silence)}
		if w.unreachable && silence > t.grace {
			// Announced and not heard since: one heard again is active
			// at once, before the next tick announces it reachable.
			out[i].State = ReachUnreachable
			if silence > t.toleration {
				out[i].State = ReachGone
			}
		}
	}
	return out
}
