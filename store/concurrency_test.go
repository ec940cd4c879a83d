package store_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/store"
)

// TestConcurrentWritersNeverGoBack has many writers race tokens for a few
// scopes, some presenting tokens that lag behind, and checks the audit
// afterwards: per scope, accepted tokens never decrease, every rejection was
// justified by a token that really was accepted, and the final state is the
// last accepted write.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	e := newEnv(t, store.Config{})
	scopes := []string{"a", "b", "c"}
	const writers, perWriter = 8, 30

	var counters [3]atomic.Uint64
	type result struct {
		scope, object string
		presented     uint64
		accepted      bool
		highest       uint64 // for rejections
	}
	results := make([][]result, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWriter {
				si := rng.IntN(len(scopes))
				issued := counters[si].Add(1) + 2 // >= 3
				presented := issued - uint64(rng.IntN(3))
				res := result{
					scope:     scopes[si],
					object:    fmt.Sprintf("obj-%s-%d", scopes[si], w%2),
					presented: presented,
				}
				req, err := http.NewRequest(http.MethodPut, e.srv.URL+"/v1/objects/"+res.object, nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header = fencing(res.scope, tok(presented))
				resp, err := e.srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				switch resp.StatusCode {
				case http.StatusNoContent:
					res.accepted = true
				case http.StatusConflict:
					var p struct {
						Scope          string `json:"scope"`
						PresentedToken uint64 `json:"presentedToken"`
						HighestToken   uint64 `json:"highestToken"`
					}
					if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
						t.Error(err)
					}
					if p.Scope != res.scope || p.PresentedToken != presented || p.HighestToken <= presented {
						t.Errorf("409 for %s/%d says %+v", res.scope, presented, p)
					}
					res.highest = p.HighestToken
				default:
					t.Errorf("PUT %s token %d: status %d", res.object, presented, resp.StatusCode)
				}
				resp.Body.Close()
				results[w] = append(results[w], res)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	recs := e.audit()
	type key struct {
		scope, object string
		token         uint64
	}
	acceptedWrites := map[key]int{}
	rejections := 0
	for _, rs := range results {
		for _, r := range rs {
			if r.accepted {
				acceptedWrites[key{r.scope, r.object, r.presented}]++
			} else {
				rejections++
			}
		}
	}
	if rejections == 0 {
		t.Error("no write was rejected; the test did not exercise stale tokens")
	}

	maxTok := map[string]uint64{}
	accepted := map[string]map[uint64]bool{}
	last := map[string]store.AuditRecord{}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("audit record %d has seq %d", i, r.Seq)
		}
		if r.HighestBefore != maxTok[r.Scope] {
			t.Errorf("seq %d: HighestBefore %d, but the highest earlier token of %q is %d", r.Seq, r.HighestBefore, r.Scope, maxTok[r.Scope])
		}
		if r.Token < maxTok[r.Scope] {
			t.Errorf("seq %d: token %d accepted for %q after token %d", r.Seq, r.Token, r.Scope, maxTok[r.Scope])
		}
		maxTok[r.Scope] = max(maxTok[r.Scope], r.Token)
		if accepted[r.Scope] == nil {
			accepted[r.Scope] = map[uint64]bool{}
		}
		accepted[r.Scope][r.Token] = true
		last[r.Object] = r
		k := key{r.Scope, r.Object, r.Token}
		if acceptedWrites[k] == 0 {
			t.Errorf("audit seq %d %+v was not acknowledged to any writer", r.Seq, k)
		}
		acceptedWrites[k]--
	}
	for k, n := range acceptedWrites {
		if n != 0 {
			t.Errorf("acknowledged write %+v appears %d times too few in the audit", k, n)
		}
	}

	for _, rs := range results {
		for _, r := range rs {
			if !r.accepted && !accepted[r.scope][r.highest] {
				t.Errorf("rejection of %s/%d cites highest %d, which was never accepted", r.scope, r.presented, r.highest)
			}
		}
	}
	for _, s := range scopes {
		if h := e.highest(s); h != maxTok[s] {
			t.Errorf("Highest(%q) = %d, want %d", s, h, maxTok[s])
		}
	}
	for obj, r := range last {
		got := e.get(obj)
		if got.header.Get(fencehttp.HeaderToken) != tok(r.Token) || got.header.Get(store.HeaderAuditSeq) != tok(r.Seq) {
			t.Errorf("GET %s: token %s seq %s, want the last audited write %+v",
				obj, got.header.Get(fencehttp.HeaderToken), got.header.Get(store.HeaderAuditSeq), r)
		}
	}
	t.Logf("%d writes accepted, %d rejected", len(recs), rejections)
}
