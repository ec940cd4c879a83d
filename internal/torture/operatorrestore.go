package torture

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/torture/check"
)

// restorePhase is the cluster-restore fault kind. A restore ends every
// lease and starts a new cluster whose tokens jump past the old ones: in
// the middle of a run the history checkers would see every held lease end
// without an expiry they can account for. So it runs once, at the end,
// after the workers stopped and the run's history was read back and the
// cluster checked (nodes-converge), and is checked on its own
// (NameRestoreTokens, and its refusals in NameOperatorRefused):
//
//  1. Two backups of the cluster are taken (GET /v1/backup), with grants
//     before, between and after them: the old cluster goes on past both.
//  2. The whole cluster is stopped and restored from the first backup
//     (fenced restore, the same membership and start floor for each),
//     except one member, brought back on its old data directory, with a
//     term and a log far ahead of the backup's. The restored members must
//     refuse it (another cluster), and it them; one of them leads; every
//     key remembers at least the last token the backup held; and a new
//     grant of every key has a token above every token the old cluster
//     issued, after the backup too. The old member is recovered as
//     documented (member remove, empty directory, --join, member add).
//  3. Again, now with members restored from different backups: all but
//     one from the first, one from the second. The majority must refuse
//     the odd one, and it them, and the same token checks hold, above
//     every token of step 2's cluster as well. The odd member is
//     recovered as documented. A step 2 that failed (a violation, or a
//     refusal not seen) ends the phase: the bug is shown, and its cluster
//     is in no known state to restore again from.
//
// A restore that starts at or below the old cluster's last index issues
// tokens at or below the old cluster's. A restore that gives its members
// no cluster ID of their own and a low first term (the mutant
// restore-ignores-bump-and-floor), like a hello that accepts any cluster
// ID, lets the old member in: nobody refuses it, and at its higher term it
// can depose the restored leader and replace the restored state with its
// own.
func (e *engine) restorePhase(r *check.Result) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e.countOperator(func(s *OperatorFaultStats) { s.ClusterRestores++ })
	leader := e.waitLeader(ctx, 10*time.Second)
	if leader < 0 {
		r.Skipped = "no leader at the end of the run"
		return
	}
	p := &restoreRun{e: e, r: r, keys: append(slices.Clone(e.keys), e.cfg.KeyPrefix+"restore")}
	backup1, backup2, err := p.takeBackups(ctx, leader)
	defer os.Remove(backup1)
	defer os.Remove(backup2)
	if err != nil {
		r.Skipped = err.Error()
		return
	}
	oldLast := p.maxOld
	n := len(e.localNodes)
	missed := e.op.missedCount()
	p.round(ctx, "old-member", e.intN(n), backup1, "")
	if r.Violations > 0 || e.op.missedCount() > missed {
		r.Note = fmt.Sprintf("whole cluster restored once, from a backup with a member of the old cluster brought back; not again from two backups, since that restore failed; the old cluster's last token %d, the restored one's %d", oldLast, p.maxOld)
		return
	}
	p.round(ctx, "other-backup", e.intN(n), backup1, backup2)
	r.Note = fmt.Sprintf("whole cluster restored twice: from a backup with a member of the old cluster brought back, then from two backups; the old cluster's last token %d, the last restored one's %d", oldLast, p.maxOld)
}

// restoreRun is one restore phase: what its rounds report to and check
// the restored clusters' tokens against.
type restoreRun struct {
	e *engine
	r *check.Result
	// keys are the run's keys and the phase's own, granted around the
	// backups (the last).
	keys []string
	// atBackup is each key's last token in the first backup: a restored
	// cluster remembers at least that.
	atBackup map[string]uint64
	// maxOld is the highest token issued so far, by the old cluster and
	// then by each restored one: every new grant must be above it.
	maxOld uint64
}

// restoreOdd says what the odd member of each round is.
var restoreOdd = map[string]string{
	"old-member":   "a member of the old cluster brought back on its old directory",
	"other-backup": "a member restored from another backup",
}

// fail records a violation of the phase.
func (p *restoreRun) fail(format string, args ...any) {
	p.r.AddViolationAt(time.Now().UnixNano(), format, args...)
	p.e.logf("cluster-restore: "+format, args...)
}

// takeBackups takes the phase's two backups through the leader, with
// grants of the phase's own key before, between and after them, and reads
// each key's last token at the first (atBackup) and the old cluster's
// highest at the end (maxOld). It returns the files it wrote, even when it
// fails.
func (p *restoreRun) takeBackups(ctx context.Context, leader int) (backup1, backup2 string, err error) {
	e := p.e
	churnKey := p.keys[len(p.keys)-1]
	url := e.localNodes[leader].Endpoint()
	if _, err := e.grant(ctx, url, churnKey); err != nil {
		return "", "", fmt.Errorf("no grant before the backup: %w", err)
	}
	backup1, at1, err := e.backup(ctx, leader, "restore-1.backup")
	if err != nil {
		return "", "", fmt.Errorf("backup: %w", err)
	}
	if p.atBackup, err = e.lastTokens(ctx, url, p.keys); err != nil {
		return backup1, "", fmt.Errorf("read the last tokens: %w", err)
	}
	for range 3 {
		if _, err := e.grant(ctx, url, churnKey); err != nil {
			return backup1, "", fmt.Errorf("grant after the first backup: %w", err)
		}
	}
	if backup2, _, err = e.backup(ctx, leader, "restore-2.backup"); err != nil {
		return backup1, "", fmt.Errorf("backup: %w", err)
	}
	for range 3 {
		if _, err := e.grant(ctx, url, churnKey); err != nil {
			return backup1, backup2, fmt.Errorf("grant after the second backup: %w", err)
		}
	}
	last, err := e.lastTokens(ctx, url, p.keys)
	if err != nil {
		return backup1, backup2, fmt.Errorf("read the last tokens: %w", err)
	}
	for _, t := range last {
		p.maxOld = max(p.maxOld, t)
	}
	e.logf("cluster-restore: backups at index %d and later; the old cluster's last token is %d", at1, p.maxOld)
	return backup1, backup2, nil
}

// round restores every member but odd from first, odd from second ("":
// brought back on its old directory), starts them all and checks the
// refusals, the leader and the tokens; then it recovers odd as documented,
// after which the cluster must be whole.
func (p *restoreRun) round(ctx context.Context, name string, odd int, first, second string) {
	e := p.e
	p.restoreAll(name, odd, first, second)
	refusedBy, majority := p.startAndAwaitRefusals(ctx, name, odd)
	l := p.awaitLeader(ctx, name, odd)
	if l < 0 || !p.checkTokens(ctx, name, l) {
		return
	}
	res := e.memberReAdd(ctx, odd)
	rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	err := e.awaitCluster(rctx)
	cancel()
	if err != nil {
		p.fail("%s: the restored cluster was not whole after the recovery of %s (%s): %v", name, e.localNodes[odd].Name(), res, err)
	}
	e.logf("cluster-restore (%s): %s refused by %d of %d restored members; %s", name, e.localNodes[odd].Name(), refusedBy, majority, res)
}

// restoreAll kills every member and restores each but odd from first, odd
// from second, all at one start floor, each directory set aside first;
// with second "" odd keeps its directory.
func (p *restoreRun) restoreAll(name string, odd int, first, second string) {
	e := p.e
	for _, nd := range e.localNodes {
		if err := nd.Kill(context.Background()); err != nil {
			e.logf("cluster-restore: kill %s: %v", nd.Name(), err)
		}
	}
	floor := uint64(time.Now().UnixMicro())
	for i, nd := range e.localNodes {
		from := first
		if i == odd {
			if from = second; from == "" {
				continue // the old member keeps its directory
			}
		}
		aside := nd.Spec.DataDir + "." + name
		_ = os.RemoveAll(aside)
		if err := os.Rename(nd.Spec.DataDir, aside); err != nil && !os.IsNotExist(err) {
			p.fail("%s: set %s's directory aside: %v", name, nd.Name(), err)
		}
		if err := e.restoreMember(i, from, floor); err != nil {
			p.fail("%s: %v", name, err)
		}
	}
}

// startAndAwaitRefusals starts every member and waits until each of the
// majority (every member but odd) has refused odd's cluster ID, and odd
// theirs; a refusal that does not come is an operator mistake not refused.
// It returns how many of the majority refused, and how many it has.
func (p *restoreRun) startAndAwaitRefusals(ctx context.Context, name string, odd int) (refusedBy, majoritySize int) {
	e := p.e
	oddCluster := clusterIDOf(e.localNodes[odd].Spec.DataDir)
	var majority []int
	for i := range e.localNodes {
		if i != odd {
			majority = append(majority, i)
		}
	}
	majorityCluster := clusterIDOf(e.localNodes[majority[0]].Spec.DataDir)
	offs := e.logOffsets()
	for _, nd := range e.localNodes {
		if err := nd.Start(context.Background()); err != nil {
			p.fail("%s: start %s: %v", name, nd.Name(), err)
		}
	}
	missing := e.awaitRefusals(ctx, majority, offs, oddCluster, 4*e.electionTimeout()+10*time.Second)
	oddMissing := e.awaitRefusals(ctx, []int{odd}, offs, majorityCluster, 5*time.Second)
	what := restoreOdd[name]
	for _, j := range majority {
		e.op.expectSeen(!slices.Contains(missing, j), "cluster-restore: restored %s refused %s (%s)", e.localNodes[j].Name(), e.localNodes[odd].Name(), what)
	}
	e.op.expectSeen(len(oddMissing) == 0, "cluster-restore: %s (%s) refused the restored members", e.localNodes[odd].Name(), what)
	e.countOperator(func(s *OperatorFaultStats) {
		s.RestoreRefusals += len(majority) - len(missing) + 1 - len(oddMissing)
	})
	return len(majority) - len(missing), len(majority)
}

// awaitLeader waits up to 30 s for a member to lead and returns it, -1 if
// none does. No leader, or odd leading, is a violation: one of the
// restored majority must lead.
func (p *restoreRun) awaitLeader(ctx context.Context, name string, odd int) int {
	e := p.e
	var l int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l = e.leader(ctx)
		if l >= 0 || time.Now().After(deadline) {
			break
		}
	}
	switch {
	case l < 0:
		p.fail("%s: no member led within 30s of the restore", name)
	case l == odd:
		p.fail("%s: %s (%s) leads the restored cluster", name, e.localNodes[odd].Name(), restoreOdd[name])
	}
	return l
}

// checkTokens reads every key's last token through leader l, which must
// be at least the first backup's, then grants every key: each token must
// be above every token issued before (maxOld, which it raises). It
// reports false if the last tokens could not be read.
func (p *restoreRun) checkTokens(ctx context.Context, name string, l int) bool {
	e := p.e
	lurl := e.localNodes[l].Endpoint()
	got, err := e.lastTokens(ctx, lurl, p.keys)
	if err != nil {
		p.fail("%s: read the last tokens at %s: %v", name, e.localNodes[l].Name(), err)
		return false
	}
	for _, k := range p.keys {
		p.r.Checked++
		if got[k] < p.atBackup[k] {
			p.fail("%s: after the restore %s's last token is %d, below the %d the backup holds: a grant was forgotten", name, k, got[k], p.atBackup[k])
		}
		tok, err := e.grant(ctx, lurl, k)
		if err != nil {
			p.fail("%s: acquire %s after the restore: %v", name, k, err)
			continue
		}
		if tok <= p.maxOld {
			p.fail("%s: %s granted with token %d after the restore, not above %d that the old cluster issued", name, k, tok, p.maxOld)
		}
		p.maxOld = max(p.maxOld, tok)
	}
	return true
}

// grant acquires key through url and releases it: the token granted.
func (e *engine) grant(ctx context.Context, url, key string) (uint64, error) {
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, url)
	ttl := max(e.cfg.TTL, e.cfg.NodeMinTTL).Milliseconds()
	var a *connect.Response[fencedv1.AcquireResponse]
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second+2*e.cfg.TTL)
		a, err = c.Acquire(cctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "restore-check", TtlMs: ttl, WaitMs: 2 * ttl}))
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = c.Release(cctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: a.Msg.GetLease().GetLeaseId()}))
	return a.Msg.GetLease().GetToken(), nil
}

// lastTokens reads the last token of each key through url.
func (e *engine) lastTokens(ctx context.Context, url string, keys []string) (map[string]uint64, error) {
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, url)
	out := map[string]uint64{}
	for _, k := range keys {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		g, err := c.Get(cctx, connect.NewRequest(&fencedv1.GetRequest{Key: k}))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", k, err)
		}
		out[k] = max(g.Msg.GetLastToken(), g.Msg.GetLease().GetToken())
	}
	return out, nil
}
