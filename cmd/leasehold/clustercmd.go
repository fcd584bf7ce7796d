package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/fsm"
	"github.com/leasehold/leasehold/transport/rules"
)

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "operate the cluster",
		Subcommands: []*cli.Command{
			{
				Name: "status", Usage: "the answering node's view of the cluster",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					st, err := cl.Status(ctx)
					if err != nil {
						return err
					}
					jobs := map[string]uint64{}
					for _, jc := range st.GetJobs() {
						jobs[enumName(jc.GetState().String(), "JOB_STATE_")] = jc.GetCount()
					}
					queues := make([]queueView, len(st.GetQueues()))
					for i, q := range st.GetQueues() {
						queues[i] = queueViewOf(q)
					}
					v := map[string]any{
						"node_id": st.GetId(), "state": st.GetState(), "term": st.GetTerm(), "leader_id": st.GetLeaderId(),
						"leader_api": st.GetLeaderApi(), "ready": st.GetReady(), "commit_index": u64(st.GetCommitIndex()),
						"applied_index": u64(st.GetAppliedIndex()), "last_token": u64(st.GetLastToken()), "workers": st.GetWorkers(),
						"live_leases": st.GetLiveLeases(), "jobs": jobs, "last_event_seq": u64(st.GetLastEventSeq()),
						"renew": st.GetTimings().GetRenew().AsDuration().String(), "grace": st.GetTimings().GetGrace().AsDuration().String(),
						"toleration": st.GetTimings().GetToleration().AsDuration().String(),
						"insecure":   st.GetInsecure(), "peer_tls": st.GetPeerTls(), "api_auth": st.GetApiAuth(),
						"state_bytes": st.GetStateBytes(), "state_quota_bytes": st.GetStateQuotaBytes(),
						"queues": queues, "queues_truncated": st.GetQueuesTruncated(),
					}
					return output(c, v, func() {
						w := newTable()
						fmt.Fprintf(w, "node\t%s (%s, term %d, ready %t)\n", st.GetId(), st.GetState(), st.GetTerm(), st.GetReady())
						fmt.Fprintf(w, "leader\t%s at %s\n", st.GetLeaderId(), st.GetLeaderApi())
						fmt.Fprintf(w, "log\tcommitted %d, applied %d\n", st.GetCommitIndex(), st.GetAppliedIndex())
						fmt.Fprintf(w, "jobs\t%s\n", countsLine(jobStateNames(), jobs))
						fmt.Fprintf(w, "state\tworkers %d, live leases %d, last token %d, last event %d\n",
							st.GetWorkers(), st.GetLiveLeases(), st.GetLastToken(), st.GetLastEventSeq())
						fmt.Fprintf(w, "timings\trenew %s, grace %s, toleration %s\n", v["renew"], v["grace"], v["toleration"])
						fmt.Fprintf(w, "security\t%s\n", securityLine(st.GetPeerTls(), st.GetApiAuth(), st.GetInsecure()))
						fmt.Fprintf(w, "quota\t%s\n", quotaLine(st.GetStateBytes(), st.GetStateQuotaBytes()))
						w.Flush()
						if len(queues) > 0 {
							fmt.Println()
							printQueues(os.Stdout, queues, false)
						}
						if st.GetQueuesTruncated() {
							fmt.Printf("(the first %d queues; leasehold queue list shows them all)\n", len(queues))
						}
					})
				}),
			},
			{
				Name: "members", Usage: "list the voters",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					ms, err := cl.Members(ctx)
					if err != nil {
						return err
					}
					type view struct {
						ID       string `json:"id"`
						RaftAddr string `json:"raft_addr"`
						APIAddr  string `json:"api_addr"`
						Voter    bool   `json:"voter"`
						Leader   bool   `json:"leader"`
						Level    uint32 `json:"level"`   // 0: not recorded yet
						Version  string `json:"version"` // the node's build
					}
					views := make([]view, len(ms))
					for i, m := range ms {
						views[i] = view{m.GetId(), m.GetRaftAddr(), m.GetApiAddr(), m.GetVoter(), m.GetLeader(), m.GetLevel(), m.GetVersion()}
					}
					return output(c, views, func() {
						w := newTable()
						fmt.Fprintln(w, "ID\tRAFT\tAPI\tVOTER\tLEADER\tLEVEL\tVERSION")
						for _, v := range views {
							level, version := "-", v.Version
							if v.Level != 0 {
								level = fmt.Sprint(v.Level)
							}
							if version == "" {
								version = "-"
							}
							fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%t\t%s\t%s\n", v.ID, v.RaftAddr, v.APIAddr, v.Voter, v.Leader, level, version)
						}
						w.Flush()
					})
				}),
			},
			{
				Name: "join", Usage: "add a node as a voter (run against any member)", ArgsUsage: "ID RAFT_ADDR API_ADDR",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					if c.NArg() != 3 {
						return usageOf(c, "expected three arguments: ID RAFT_ADDR API_ADDR")
					}
					a := c.Args()
					if err := cl.AddNode(ctx, a.Get(0), a.Get(1), a.Get(2)); err != nil {
						return err
					}
					return outputQuiet(c, a.Get(0), map[string]string{"added": a.Get(0)}, func() { fmt.Printf("added %s\n", a.Get(0)) })
				}),
			},
			{
				Name: "remove", Usage: "remove a voter", ArgsUsage: "ID",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					id, err := oneArg(c, "ID")
					if err != nil {
						return err
					}
					if err := cl.RemoveNode(ctx, id); err != nil {
						return err
					}
					return outputQuiet(c, id, map[string]string{"removed": id}, func() { fmt.Printf("removed %s\n", id) })
				}),
			},
			{
				Name: "transfer-leader", Usage: "hand leadership to ID, or to the most up-to-date voter", ArgsUsage: "[ID]",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					leader, err := cl.TransferLeadership(ctx, c.Args().First())
					if err != nil {
						return err
					}
					return outputQuiet(c, leader, map[string]string{"leader_id": leader}, func() { fmt.Printf("leader is %s\n", leader) })
				}),
			},
		},
	}
}

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "back up and restore the cluster's state",
		Subcommands: []*cli.Command{
			{
				Name: "save", Usage: "write a backup of the state to FILE", ArgsUsage: "FILE",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					path, err := oneArg(c, "FILE")
					if err != nil {
						return err
					}
					tmp, err := os.CreateTemp(filepath.Dir(path), ".snapshot-*")
					if err != nil {
						return err
					}
					defer os.Remove(tmp.Name())
					if err := cl.SaveSnapshot(ctx, tmp); err != nil {
						tmp.Close()
						return err
					}
					if err := tmp.Sync(); err != nil {
						return err
					}
					tmp.Close()
					// Check the new backup before it replaces an old one.
					if _, err := inspectFile(tmp.Name()); err != nil {
						return err
					}
					if err := os.Rename(tmp.Name(), path); err != nil {
						return err
					}
					if c.Bool("quiet") {
						return outputQuiet(c, path, nil, nil)
					}
					return inspect(c, path)
				}),
			},
			{
				Name: "restore", Usage: "make FILE the cluster's state (tokens jump past anything granted before)", ArgsUsage: "FILE",
				Action: withClient(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
					path, err := oneArg(c, "FILE")
					if err != nil {
						return err
					}
					if _, err := inspectFile(path); err != nil {
						return err
					}
					f, err := os.Open(path)
					if err != nil {
						return err
					}
					defer f.Close()
					// The restore's own answer: a status read now could reach
					// a follower that has not applied it yet.
					res, err := cl.Restore(ctx, f)
					if err != nil {
						return err
					}
					return outputQuiet(c, u64(res.LastToken), map[string]any{"restored": path, "last_token": u64(res.LastToken), "last_index": u64(res.LastIndex),
						"workers": res.Workers}, func() {
						fmt.Printf("restored %s; the next token is above %d\n", path, res.LastToken)
					})
				}),
			},
			{
				Name: "inspect", Usage: "check a backup and summarize it (offline)", ArgsUsage: "FILE",
				Action: func(c *cli.Context) error {
					path, err := oneArg(c, "FILE")
					if err != nil {
						return err
					}
					return inspect(c, path)
				},
			},
		},
	}
}

func inspectFile(path string) (fsm.Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return fsm.Stats{}, err
	}
	defer f.Close()
	st, err := fsm.InspectSnapshot(f)
	if err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

func inspect(c *cli.Context, path string) error {
	st, err := inspectFile(path)
	if err != nil {
		return err
	}
	jobs, counts := map[string]int{}, map[string]uint64{}
	for s, n := range st.Jobs {
		jobs[s.String()] = n
		counts[s.String()] = uint64(n)
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	v := map[string]any{"file": path, "bytes": info.Size(), "last_index": u64(st.LastIndex), "last_token": u64(st.LastToken),
		"jobs": jobs, "workers": st.Workers, "live_leases": st.LiveLeases, "events": st.Events}
	return output(c, v, func() {
		w := newTable()
		fmt.Fprintf(w, "file\t%s (%d bytes)\n", path, info.Size())
		fmt.Fprintf(w, "log\tindex %d\n", st.LastIndex)
		fmt.Fprintf(w, "jobs\t%s\n", countsLine(jobStateNames(), counts))
		fmt.Fprintf(w, "state\tworkers %d, live leases %d, last token %d, events %d\n", st.Workers, st.LiveLeases, st.LastToken, st.Events)
		w.Flush()
	})
}

func readAll(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, rules.MaxPayloadLen+1))
}

func workerCommand() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "see and deregister workers, or run shell commands as a worker",
		Subcommands: []*cli.Command{
			workerListCommand(),
			workerGetCommand(),
			workerDeregisterCommand(),
			workerRunCommand(),
		},
	}
}

// securityLine says how the answering node is protected.
func securityLine(peerTLS, apiAuth, insecure bool) string {
	on := map[bool]string{true: "on", false: "off"}
	line := "peer mutual TLS " + on[peerTLS] + ", API authentication " + on[apiAuth]
	if insecure {
		line += " (INSECURE: started with --insecure)"
	}
	return line
}

// quotaLine shows the replicated state's size against its quota.
func quotaLine(size, quota int64) string {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	if quota <= 0 {
		return "state " + mib(size) + ", no quota"
	}
	return fmt.Sprintf("state %s of %s (%.0f%%)", mib(size), mib(quota), 100*float64(size)/float64(quota))
}
