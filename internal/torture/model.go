package torture

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// leaseInput is an operation on one key, as the model sees it. Renewals and
// releases name the lease by the owner of its acquisition, which is unique
// per acquisition attempt.
type leaseInput struct {
	Kind  Kind
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
}

func (s leaseState) String() string {
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
		pre = append(pre, leaseState{Last: s.Last, Pending: s.Pending || s.Token == 0})
	}
	var next []leaseState
	for _, p := range pre {
		next = append(next, applyLease(p, in, out)...)
	}
	return next
}

func applyLease(s leaseState, in leaseInput, out leaseOutput) []leaseState {
	switch in.Kind {
	case KindAcquire:
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
	case KindRenew:
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
	case KindRelease:
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
	case KindGet:
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
		case KindAcquire:
			switch out.Result {
			case resOK:
				return fmt.Sprintf("acquire(%s) -> token %d", in.Owner, out.Token)
			case resHeld:
				return fmt.Sprintf("acquire(%s) -> held by %s (%d)", in.Owner, out.Holder, out.HolderToken)
			}
			return fmt.Sprintf("acquire(%s) -> ?", in.Owner)
		case KindRenew, KindRelease:
			if out.Result == resOK && in.Kind == KindRenew {
				return fmt.Sprintf("renew(%s) -> %d", in.Owner, out.Token)
			}
			return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Owner, out.Result)
		case KindGet:
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
func leaseOperations(h *History) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range h.Ops {
		in := leaseInput{Kind: op.Kind, Key: op.Key, Owner: op.Owner}
		var out leaseOutput
		ret := op.Return
		switch op.Kind {
		case KindAcquire:
			switch {
			case !op.Finished() || op.Outcome == Unknown:
				out.Result, ret = resUnknown, h.End+1
			case op.Outcome == OK:
				out.Result, out.Token = resOK, op.Token
			case op.Code == CodeHeld:
				out.Result, out.Holder, out.HolderToken = resHeld, op.Holder, op.HolderToken
			default:
				continue
			}
		case KindRenew, KindRelease:
			switch {
			case op.Outcome == OK:
				out.Result, out.Token = resOK, op.Token
			case op.Outcome == Fail && op.Code == CodeNotFound:
				out.Result = resNotFound
			default:
				// An unknown release may have freed the key, which the
				// model's expiry already allows.
				continue
			}
		case KindGet:
			if op.Outcome != OK {
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
	// Visualization is the HTML file written for an Illegal result.
	Visualization string `json:"visualization,omitempty"`
	// Explanation shows, for an Illegal result, the end of the longest
	// linearizable prefix found and the operations that could not follow.
	Explanation string `json:"explanation,omitempty"`
}

// CheckLinearizable checks the lease history of every key with porcupine,
// within timeout in total. For a key whose history is not linearizable it
// writes porcupine's visualization into dir (if dir is not empty).
func CheckLinearizable(h *History, timeout time.Duration, dir string) []LinearizabilityResult {
	ops := leaseOperations(h)
	model := LeaseModel.ToModel()
	parts := model.Partition(ops)
	if len(parts) == 0 {
		return nil
	}
	per := timeout / time.Duration(len(parts))
	results := make([]LinearizabilityResult, 0, len(parts))
	unsafe := regexp.MustCompile(`[^A-Za-z0-9._-]+`)
	for _, part := range parts {
		key := part[0].Input.(leaseInput).Key
		res, info := porcupine.CheckOperationsVerbose(model, part, per)
		r := LinearizabilityResult{Key: key, Operations: len(part), Result: res}
		if res == porcupine.Illegal {
			r.Explanation = explain(model, part, info)
		}
		if res == porcupine.Illegal && dir != "" {
			path := filepath.Join(dir, "linearizability-"+unsafe.ReplaceAllString(key, "_")+".html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				r.Visualization = path
			} else {
				fmt.Fprintf(os.Stderr, "torture: writing visualization: %v\n", err)
			}
		}
		results = append(results, r)
	}
	return results
}

// explain describes where the check got stuck: the last operations of the
// longest linearizable prefix, the state after it, and the earliest
// operations left that the model refuses from that state.
func explain(model porcupine.Model, part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	partials := info.PartialLinearizationsOperations()
	if len(partials) == 0 || len(partials[0]) == 0 {
		return ""
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
	return strings.TrimRight(b.String(), "\n")
}
