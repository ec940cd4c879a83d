package api

import (
	"fmt"
	"testing"
)

// Proposals go through ProposalsHeader whole, as digests, keeping the
// latest maxProposals; the nil Proposals holds nothing.
func TestProposalsHeader(t *testing.T) {
	var none *Proposals
	none.Add("x")
	if none.Any() || none.Made("x") || none.String() != "" {
		t.Fatal("the nil Proposals recorded a grant")
	}
	p := &Proposals{}
	for i := range maxProposals + 2 {
		p.Add(fmt.Sprintf("lease%d", i))
	}
	h := p.String()
	got := ParseProposals(h + ",, " + digest("extra"))
	for i, want := range map[int]bool{0: false, 1: false, 2: false, 3: true, maxProposals + 1: true} {
		if got.Made(fmt.Sprintf("lease%d", i)) != want {
			t.Errorf("lease%d made: %v, want %v", i, !want, want)
		}
	}
	if !got.Made("extra") {
		t.Error("the latest digest of the header was dropped")
	}
	if ParseProposals("").Any() {
		t.Error("an empty header names grants")
	}
}
