package check

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencedio/fenced/internal/torture/history"
)

// leaseInput is an operation on one key, as the model sees it. Renewals and
// releases name the lease by the owner of its acquisition, which is unique
// per acquisition attempt.
type leaseInput struct {
	Kind  history.Kind
	Key   string
	Owner string
}

// leaseOutput is what the service answered.
type leaseOutput struct {
	// Result: ok, held, notfound, or unknown (no answer; the operation may
	// or may not have taken effect).
	Result string
	Token  uint64
	// Holder/HolderToken: who held the key (refused acquisition) or holds
	// it (read). HasLease and Last are a read's answer.
	Holder      string
	HolderToken uint64
	HasLease    bool
	Last        uint64
}

const (
	resOK       = "ok"
	resHeld     = "held"
	resNotFound = "notfound"
	resUnknown  = "unknown"
)

// leaseState is the model's state of one key.
//
// Expiry is not an operation: the service may expire a lease at any moment
// (its timing is checked by the lease-exclusion checker instead), so every
// step first branches into "still held" and "expired". Acquisitions with an
// unknown outcome branch into "not granted" and "granted with an unknown
// token"; the token is pinned by the first answer that reveals it.
type leaseState struct {
	Holder string // owner of the current lease, "" when free
	Token  uint64 // its token; 0 while unknown
	// Last is the highest token known to be issued for the key.
	Last uint64
	// Pending: a grant with a still unknown token happened, so the real
	// highest token is above Last.
	Pending bool
	// Ghosts: acquisitions of unknown outcome whose owner no answer ever
	// names may take effect at any step. Such a grant is seen only as a
	// token above Last once it has expired (Pending), so it is modelled
	// as that instead of as operations of its own, which porcupine would
	// have to place everywhere.
	Ghosts bool
}

func (s leaseState) String() string {
	if s.Ghosts {
		s.Ghosts = false
		return s.String() + " (ghost grants possible)"
	}
	if s.Holder == "" {
		if s.Pending {
			return fmt.Sprintf("free, last>%d", s.Last)
		}
		return fmt.Sprintf("free, last=%d", s.Last)
	}
	if s.Token == 0 {
		return fmt.Sprintf("%s holds token>%d", s.Holder, s.Last)
	}
	return fmt.Sprintf("%s holds %d", s.Holder, s.Token)
}

// tokenMatches reports whether the current lease can have token t, and
// returns the state with t pinned.
func (s leaseState) tokenMatches(t uint64) (leaseState, bool) {
	if s.Token == t && t != 0 {
		return s, true
	}
	if s.Token == 0 && t > s.Last {
		s.Token, s.Last, s.Pending = t, t, false
		return s, true
	}
	return s, false
}

// lastMatches reports whether a read of a free key may say last, and
// returns the state with it pinned.
func (s leaseState) lastMatches(last uint64) (leaseState, bool) {
	if s.Pending {
		if last > s.Last {
			s.Last, s.Pending = last, false
			return s, true
		}
		return s, false
	}
	return s, last == s.Last
}

func stepLease(s leaseState, in leaseInput, out leaseOutput) []leaseState {
	pre := []leaseState{s}
	if s.Holder != "" {
		pre = append(pre, leaseState{Last: s.Last, Pending: s.Pending || s.Token == 0, Ghosts: s.Ghosts})
	}
	if s.Ghosts {
		for _, p := range pre {
			if p.Holder == "" && !p.Pending {
				p.Pending = true
				pre = append(pre, p)
				break
			}
		}
	}
	var next []leaseState
	for _, p := range pre {
		for _, n := range applyLease(p, in, out) {
			n.Ghosts = s.Ghosts
			next = append(next, n)
		}
	}
	return next
}

func applyLease(s leaseState, in leaseInput, out leaseOutput) []leaseState {
	switch in.Kind {
	case history.KindAcquire:
		switch out.Result {
		case resOK:
			if s.Holder != "" || out.Token <= s.Last {
				return nil
			}
			return []leaseState{{Holder: in.Owner, Token: out.Token, Last: out.Token}}
		case resHeld:
			if out.Holder == "" {
				return []leaseState{s} // refused without naming a holder: no information
			}
			if s.Holder != out.Holder {
				return nil
			}
			if n, ok := s.tokenMatches(out.HolderToken); ok {
				return []leaseState{n}
			}
			return nil
		case resUnknown:
			if s.Holder != "" {
				return []leaseState{s}
			}
			return []leaseState{s, {Holder: in.Owner, Last: s.Last, Pending: true}}
		}
	case history.KindRenew:
		switch out.Result {
		case resOK:
			if s.Holder != in.Owner {
				return nil
			}
			if n, ok := s.tokenMatches(out.Token); ok {
				return []leaseState{n}
			}
			return nil
		case resNotFound:
			if s.Holder == in.Owner {
				return nil
			}
			return []leaseState{s}
		}
	case history.KindRelease:
		switch out.Result {
		case resOK:
			if s.Holder != in.Owner {
				return nil
			}
			return []leaseState{{Last: s.Last, Pending: s.Pending || s.Token == 0}}
		case resNotFound:
			if s.Holder == in.Owner {
				return nil
			}
			return []leaseState{s}
		}
	case history.KindGet:
		if !out.HasLease {
			if s.Holder != "" {
				return nil
			}
			if n, ok := s.lastMatches(out.Last); ok {
				return []leaseState{n}
			}
			return nil
		}
		if s.Holder != out.Holder || out.Last != out.HolderToken {
			return nil
		}
		if n, ok := s.tokenMatches(out.HolderToken); ok {
			return []leaseState{n}
		}
		return nil
	}
	return nil
}

// LeaseModel is the porcupine model of the lease service, one partition per
// key: acquire, renew, release and get, with nondeterministic expiry and
// acquisitions of unknown outcome.
var LeaseModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(leaseInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, len(keys))
		for i, k := range keys {
			out[i] = byKey[k]
		}
		return out
	},
	Init: func() []any { return []any{leaseState{}} },
	Step: func(state, input, output any) []any {
		next := stepLease(state.(leaseState), input.(leaseInput), output.(leaseOutput))
		out := make([]any, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(leaseInput), output.(leaseOutput)
		switch in.Kind {
		case history.KindAcquire:
			switch out.Result {
			case resOK:
				return fmt.Sprintf("acquire(%s) -> token %d", in.Owner, out.Token)
			case resHeld:
				return fmt.Sprintf("acquire(%s) -> held by %s (%d)", in.Owner, out.Holder, out.HolderToken)
			}
			return fmt.Sprintf("acquire(%s) -> ?", in.Owner)
		case history.KindRenew, history.KindRelease:
			if out.Result == resOK && in.Kind == history.KindRenew {
				return fmt.Sprintf("renew(%s) -> %d", in.Owner, out.Token)
			}
			return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Owner, out.Result)
		case history.KindGet:
			if out.HasLease {
				return fmt.Sprintf("get -> %s (%d)", out.Holder, out.HolderToken)
			}
			return fmt.Sprintf("get -> free, last %d", out.Last)
		}
		return fmt.Sprintf("%v -> %v", in, out)
	},
	DescribeState: func(state any) string { return state.(leaseState).String() },
}

// leaseOperations turns the lease operations of a history into porcupine
// operations. Answers that say nothing about the state (failures that
// changed nothing, renewals, releases and reads of unknown outcome) are
// left out; acquisitions of unknown outcome stay pending to the end of the
// history, since the grant may have happened at any time after the call.
func leaseOperations(h *history.History) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Ops {
		in := leaseInput{Kind: op.Kind, Key: op.Key, Owner: op.Owner}
		var out leaseOutput
		ret := op.Return
		switch op.Kind {
		case history.KindAcquire:
			switch {
			case !op.Finished() || op.Outcome == history.Unknown:
				out.Result, ret = resUnknown, h.End+1
			case op.Outcome == history.OK:
				out.Result, out.Token = resOK, op.Token
			case op.Code == history.CodeHeld:
				out.Result, out.Holder, out.HolderToken = resHeld, op.Holder, op.HolderToken
			default:
				continue
			}
		case history.KindRenew, history.KindRelease:
			switch {
			case op.Outcome == history.OK:
				out.Result, out.Token = resOK, op.Token
			case op.Outcome == history.Fail && op.Code == history.CodeNotFound:
				out.Result = resNotFound
			default:
				// An unknown release may have freed the key, which the
				// model's expiry already allows.
				continue
			}
		case history.KindGet:
			if op.Outcome != history.OK {
				continue
			}
			out = leaseOutput{Result: resOK, HasLease: op.HasLease, Holder: op.Holder, HolderToken: op.HolderToken, Last: op.LastToken}
		default:
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: op.Worker, Input: in, Call: op.Call, Output: out, Return: ret})
	}
	return ops
}

// LinearizabilityResult is the outcome of the check for one key.
type LinearizabilityResult struct {
	Key        string                `json:"key"`
	Operations int                   `json:"operations"`
	Result     porcupine.CheckResult `json:"result"`
	// Windows is how many windows the key's history was checked in, and
	// UnknownWindows how many of them timed out.
	Windows        int `json:"windows"`
	UnknownWindows int `json:"unknownWindows,omitempty"`
	// FirstIllegal is when the history stopped being linearizable (Unix
	// ns): the earliest return of an operation that the longest
	// linearizable prefix of the first illegal window leaves out.
	FirstIllegal int64 `json:"firstIllegal,omitempty"`
	// Visualization is the HTML file written for an Illegal result.
	Visualization string `json:"visualization,omitempty"`
	// Explanation shows, for an Illegal result, the end of the longest
	// linearizable prefix found and the operations that could not follow.
	Explanation string `json:"explanation,omitempty"`
}

// windowOps is how many operations a window of one key's history holds at
// least before it may end at the next quiescent point.
var windowOps = 60

// LinearizablePerKey checks the lease history of every key with porcupine,
// within timeout in total. Each key's history is cut into windows at
// quiescent points (no operation of known outcome open) after windowOps
// operations, and each window is checked from every state the key may be
// in at its start, as far as the operations before it tell (see
// windowStart): a sound over-approximation, so a window that is not
// linearizable is a violation, while an anomaly that spans a cut may be
// missed. For a key whose history is not linearizable it writes
// porcupine's visualization of the window into dir (if dir is not empty).
func LinearizablePerKey(h *history.History, timeout time.Duration, dir string) []LinearizabilityResult {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range leaseOperations(h) {
		k := op.Input.(leaseInput).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	sort.Strings(keys)
	type window struct {
		key  string
		init []leaseState
		ops  []porcupine.Operation
	}
	var windows []window
	results := make([]LinearizabilityResult, len(keys))
	for i, k := range keys {
		results[i] = LinearizabilityResult{Key: k, Operations: len(byKey[k]), Result: porcupine.Ok}
		for _, w := range cutWindows(byKey[k]) {
			windows = append(windows, window{key: k, init: w.init, ops: w.ops})
			results[i].Windows++
		}
	}
	deadline := time.Now().Add(timeout)
	unsafe := regexp.MustCompile(`[^A-Za-z0-9._-]+`)
	ri := map[string]int{}
	for i, k := range keys {
		ri[k] = i
	}
	for n, w := range windows {
		r := &results[ri[w.key]]
		if r.Result == porcupine.Illegal {
			continue // the first illegal window says it
		}
		per := max(time.Until(deadline)/time.Duration(len(windows)-n), time.Millisecond)
		init := w.init
		nm := porcupine.NondeterministicModel{
			Init:              func() []any { return statesAny(init) },
			Step:              LeaseModel.Step,
			DescribeOperation: LeaseModel.DescribeOperation,
			DescribeState:     LeaseModel.DescribeState,
		}
		model := nm.ToModel()
		res, info := porcupine.CheckOperationsVerbose(model, w.ops, per)
		switch res {
		case porcupine.Unknown:
			r.UnknownWindows++
			r.Result = porcupine.Unknown
		case porcupine.Illegal:
			r.Result = porcupine.Illegal
			r.Explanation, r.FirstIllegal = explain(model, w.ops, info)
			if r.FirstIllegal == 0 {
				r.FirstIllegal = w.ops[0].Call
			}
			if dir != "" {
				path := filepath.Join(dir, "linearizability-"+unsafe.ReplaceAllString(w.key, "_")+".html")
				if err := porcupine.VisualizePath(model, info, path); err == nil {
					r.Visualization = path
				} else {
					fmt.Fprintf(os.Stderr, "torture: writing visualization: %v\n", err)
				}
			}
		}
	}
	return results
}

func statesAny(states []leaseState) []any {
	out := make([]any, len(states))
	for i, s := range states {
		out[i] = s
	}
	return out
}

type opWindow struct {
	init []leaseState
	ops  []porcupine.Operation
}

// isUnknownAcquire reports an acquisition of unknown outcome, pending to
// the end of the history.
func isUnknownAcquire(op porcupine.Operation) bool {
	return op.Input.(leaseInput).Kind == history.KindAcquire && op.Output.(leaseOutput).Result == resUnknown
}

// cutWindows cuts one key's operations into windows. An acquisition of
// unknown outcome whose owner no answer names is a ghost (leaseState.Ghosts)
// from the first window on that it may fall in; one whose owner is named
// stays an operation, pending to the end of every window from its call on.
func cutWindows(ops []porcupine.Operation) []opWindow {
	named := map[string]bool{}
	for _, op := range ops {
		in, out := op.Input.(leaseInput), op.Output.(leaseOutput)
		if out.Holder != "" {
			named[out.Holder] = true
		}
		if !isUnknownAcquire(op) && in.Kind != history.KindGet && !(in.Kind == history.KindAcquire && out.Result == resHeld) {
			named[in.Owner] = true
		}
	}
	var known, unknown []porcupine.Operation
	var ghostCalls []int64
	for _, op := range ops {
		switch {
		case !isUnknownAcquire(op):
			known = append(known, op)
		case named[op.Input.(leaseInput).Owner]:
			unknown = append(unknown, op)
		default:
			ghostCalls = append(ghostCalls, op.Call)
		}
	}
	sort.SliceStable(known, func(i, j int) bool { return known[i].Call < known[j].Call })
	// Cut points: a known operation that starts after every earlier one
	// returned, once the window has windowOps operations.
	var cuts []int
	var maxRet int64
	last := 0
	for i, op := range known {
		if i-last >= windowOps && op.Call > maxRet {
			cuts = append(cuts, i)
			last = i
		}
		maxRet = max(maxRet, op.Return)
	}
	cuts = append(cuts, len(known))
	var out []opWindow
	from := 0
	for _, to := range cuts {
		if to == from {
			continue
		}
		w := known[from:to]
		start, end := w[0].Call, w[0].Return
		for _, op := range w {
			end = max(end, op.Return)
		}
		win := opWindow{ops: slices.Clone(w)}
		ghosts := false
		for _, c := range ghostCalls {
			ghosts = ghosts || c <= end
		}
		for _, u := range unknown {
			if u.Call <= end {
				u.Call = min(u.Call, start-1)
				u.Return = end + 1
				win.ops = append(win.ops, u)
			}
		}
		if from == 0 {
			win.init = []leaseState{{Ghosts: ghosts}}
		} else {
			win.init = windowStart(known[:from], unknown, ghostCalls, start, ghosts)
		}
		out = append(out, win)
		from = to
	}
	if len(out) == 0 && len(unknown) > 0 {
		// Only acquisitions of unknown outcome: nothing to contradict.
		out = append(out, opWindow{init: []leaseState{{}}, ops: unknown})
	}
	return out
}

// windowStart over-approximates the states a key may be in at time at,
// when every operation of known outcome before it (before) has returned:
// free or held by the holder of the highest token seen so far, or by the
// owner of an acquisition of unknown outcome called before; the highest
// token issued is the highest seen, or above it if an acquisition of
// unknown outcome was called before.
func windowStart(before, unknown []porcupine.Operation, ghostCalls []int64, at int64, ghosts bool) []leaseState {
	var lb uint64
	owner := map[uint64]string{}
	see := func(t uint64, who string) {
		lb = max(lb, t)
		if who != "" && t != 0 {
			owner[t] = who
		}
	}
	for _, op := range before {
		in, out := op.Input.(leaseInput), op.Output.(leaseOutput)
		switch {
		case in.Kind == history.KindAcquire && out.Result == resOK, in.Kind == history.KindRenew && out.Result == resOK:
			see(out.Token, in.Owner)
		case out.Result == resHeld, in.Kind == history.KindGet && out.HasLease:
			see(out.HolderToken, out.Holder)
		}
		if in.Kind == history.KindGet {
			see(out.Last, "")
		}
	}
	maybeAbove := false
	for _, c := range ghostCalls {
		maybeAbove = maybeAbove || c < at
	}
	states := []leaseState{{Last: lb, Ghosts: ghosts}}
	if holder, ok := owner[lb]; ok {
		states = append(states, leaseState{Holder: holder, Token: lb, Last: lb, Ghosts: ghosts})
	}
	for _, u := range unknown {
		if u.Call < at {
			maybeAbove = true
			states = append(states, leaseState{Holder: u.Input.(leaseInput).Owner, Last: lb, Pending: true, Ghosts: ghosts})
		}
	}
	if maybeAbove {
		states = append(states, leaseState{Last: lb, Pending: true, Ghosts: ghosts})
	}
	return states
}

// explain describes where the check got stuck: the last operations of the
// longest linearizable prefix, the state after it, and the earliest
// operations left that the model refuses from that state.
// It also returns the earliest return of an operation left out of that
// prefix: by then the history cannot be linearized (0 if unknown).
func explain(model porcupine.Model, part []porcupine.Operation, info porcupine.LinearizationInfo) (string, int64) {
	partials := info.PartialLinearizationsOperations()
	if len(partials) == 0 || len(partials[0]) == 0 {
		return "", 0
	}
	longest := partials[0][0]
	for _, p := range partials[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	at := func(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
	var b strings.Builder
	state := model.Init()
	type id struct {
		client int
		call   int64
	}
	done := map[id]bool{}
	for i, op := range longest {
		_, state = model.Step(state, op.Input, op.Output)
		done[id{op.ClientId, op.Call}] = true
		if i >= len(longest)-4 {
			fmt.Fprintf(&b, "  linearized  %s-%s w%d %s\n", at(op.Call), at(op.Return), op.ClientId,
				model.DescribeOperation(op.Input, op.Output))
		}
	}
	fmt.Fprintf(&b, "  state then: %s\n", model.DescribeState(state))
	n := 0
	for _, op := range part {
		if done[id{op.ClientId, op.Call}] || n == 3 {
			continue
		}
		if ok, _ := model.Step(state, op.Input, op.Output); !ok {
			fmt.Fprintf(&b, "  impossible  %s-%s w%d %s\n", at(op.Call), at(op.Return), op.ClientId,
				model.DescribeOperation(op.Input, op.Output))
			n++
		}
	}
	var stuck int64
	for _, op := range part {
		if !done[id{op.ClientId, op.Call}] && (stuck == 0 || op.Return < stuck) {
			stuck = op.Return
		}
	}
	return strings.TrimRight(b.String(), "\n"), stuck
}
