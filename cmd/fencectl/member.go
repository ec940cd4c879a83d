package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/spf13/cobra"
)

// memberCmd manages the cluster's membership through ClusterService. Any
// node takes the requests; changes are forwarded to the leader.
func memberCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "List, add and remove cluster members, or move leadership",
		Long: `member lists, adds and removes cluster members, or moves leadership. Any
node takes the requests; changes are forwarded to the leader.

A member that lost its data directory does not vote again under its old
name: started with its usual command line it refuses to start. Bring it
back as a new member:

  fencectl member remove ID
  (empty its data directory)
  fenced --join --node-id ID --raft-listen RAFTHOST:PORT ...
  fencectl member add ID RAFTHOST:PORT`,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the members, the client URL each advertises, and the leader",
		Long: `list shows every member of the raft configuration: its ID, its raft
address, the client URL it advertises (fenced --advertise-client-url; "-" when
none is known yet: the leader records each member's within a second of
hearing it), whether it votes, and which one leads. Clients can sync their
endpoints from the client URLs (the Go client's Config.AutoSyncInterval).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *connect.Response[fencedv1.ListMembersResponse]
			err := g.cluster(cmd.Context(), func(ctx context.Context, c fencedv1connect.ClusterServiceClient) (err error) {
				resp, err = c.ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{}))
				return err
			})
			if err != nil {
				return fmt.Errorf("member list: %w", err)
			}
			return g.printMembers(cmd, resp.Msg.GetMembers(), resp.Msg.GetTerm())
		},
	}
	var nonVoter bool
	add := &cobra.Command{
		Use:   "add ID RAFTHOST:PORT",
		Short: "Add a node started with fenced --join (or change a member's suffrage)",
		Long: `add makes the node at RAFTHOST:PORT, started with fenced --join (or
--initial-cluster-state existing) on an empty data directory, a voting
member (a non-voter with --non-voter). The leader asks the node who it is
first, so start it before. A node that started on a new data directory
while ID is still in the configuration is refused: run member remove ID
first, so that no configuration counts the votes it lost.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *connect.Response[fencedv1.AddMemberResponse]
			err := g.cluster(cmd.Context(), func(ctx context.Context, c fencedv1connect.ClusterServiceClient) (err error) {
				resp, err = c.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: args[0], Address: args[1], NonVoter: nonVoter}))
				return err
			})
			if err != nil {
				return fmt.Errorf("member add %s: %w", args[0], err)
			}
			return g.printMembers(cmd, resp.Msg.GetMembers(), 0)
		},
	}
	add.Flags().BoolVar(&nonVoter, "non-voter", false, "add as a non-voter: replicates, does not vote or lead")
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *connect.Response[fencedv1.RemoveMemberResponse]
			err := g.cluster(cmd.Context(), func(ctx context.Context, c fencedv1connect.ClusterServiceClient) (err error) {
				resp, err = c.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: args[0]}))
				return err
			})
			if err != nil {
				return fmt.Errorf("member remove %s: %w", args[0], err)
			}
			return g.printMembers(cmd, resp.Msg.GetMembers(), 0)
		},
	}
	cmd.AddCommand(list, add, remove, memberTransferCmd(g))
	return cmd
}

// memberTransferCmd hands leadership to a member through ClusterService.
func memberTransferCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "transfer-leader [ID]",
		Short: "Hand leadership to a member (to any up-to-date voter without ID)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			to := ""
			if len(args) == 1 {
				to = args[0]
			}
			var resp *connect.Response[fencedv1.TransferLeadershipResponse]
			err := g.cluster(cmd.Context(), func(ctx context.Context, c fencedv1connect.ClusterServiceClient) (err error) {
				resp, err = c.TransferLeadership(ctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{Id: to}))
				return err
			})
			if err != nil {
				return fmt.Errorf("member transfer-leader: %w", err)
			}
			if g.json {
				return printJSON(cmd.OutOrStdout(), map[string]string{"leaderId": resp.Msg.GetLeaderId()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "leader: %s\n", resp.Msg.GetLeaderId())
			return nil
		},
	}
}

// cluster runs call against the named nodes in turn until one answers
// with anything but unavailable.
func (g *globals) cluster(ctx context.Context, call func(context.Context, fencedv1connect.ClusterServiceClient) error) error {
	hc, err := g.httpClient()
	if err != nil {
		return err
	}
	ctx, cancel := g.requestContext(ctx)
	defer cancel()
	for _, node := range g.nodes() {
		if !strings.Contains(node, "://") {
			node = "http://" + node
		}
		err = call(ctx, fencedv1connect.NewClusterServiceClient(hc, strings.TrimRight(node, "/")))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			return err
		}
	}
	return err
}

func (g *globals) printMembers(cmd *cobra.Command, ms []*fencedv1.Member, term uint64) error {
	out := cmd.OutOrStdout()
	if g.json {
		type member struct {
			ID        string `json:"id"`
			Address   string `json:"address"`
			ClientURL string `json:"clientURL"`
			Voter     bool   `json:"voter"`
			Leader    bool   `json:"leader"`
			Refused   string `json:"refused,omitempty"`
		}
		list := make([]member, len(ms))
		for i, m := range ms {
			list[i] = member{m.GetId(), m.GetAddress(), m.GetClientUrl(), m.GetVoter(), m.GetLeader(), m.GetRefused()}
		}
		return printJSON(out, map[string]any{"members": list, "term": term})
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tCLIENT URL\tSUFFRAGE\tLEADER")
	for _, m := range ms {
		suffrage, leader, url := "voter", "", m.GetClientUrl()
		if url == "" {
			url = "-"
		}
		if !m.GetVoter() {
			suffrage = "non-voter"
		}
		if m.GetLeader() {
			leader = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.GetId(), m.GetAddress(), url, suffrage, leader)
	}
	for _, m := range ms {
		if m.GetRefused() != "" {
			fmt.Fprintf(tw, "\n%s is REFUSED by the node that answered: %s\n", m.GetId(), m.GetRefused())
		}
	}
	if term > 0 {
		fmt.Fprintf(tw, "\nterm %d\n", term)
	}
	return tw.Flush()
}
