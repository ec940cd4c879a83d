package rejections

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

var errBad = errors.New("bad input")

// strictRules refuse the fields that name themselves bad.
type strictRules struct{}

func (strictRules) Key(key string) error {
	if key == "" || key == "bad" {
		return fmt.Errorf("%w: key", errBad)
	}
	return nil
}

func (strictRules) Owner(owner string) error {
	if owner == "bad" {
		return fmt.Errorf("%w: owner", errBad)
	}
	return nil
}

func (strictRules) Text(field, s string) error {
	if strings.ContainsRune(s, '\n') {
		return fmt.Errorf("%w: %s", errBad, field)
	}
	return nil
}

func (strictRules) Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBad, fmt.Sprintf(format, args...))
}

func TestValidate(t *testing.T) {
	good := &fencedv1.StaleRejection{Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: "r", Owner: "o"}
	if err := Validate([]*fencedv1.StaleRejection{good, good}, strictRules{}); err != nil {
		t.Fatalf("good report: %v", err)
	}
	many := make([]*fencedv1.StaleRejection, MaxReportEntries+1)
	for i := range many {
		many[i] = good
	}
	if err := Validate(many[:MaxReportEntries], strictRules{}); err != nil {
		t.Fatalf("MaxReportEntries entries: %v", err)
	}
	for name, tc := range map[string]struct {
		batch []*fencedv1.StaleRejection
		want  string
	}{
		"too many":              {many, "1001 rejections in one report, the limit is 1000"},
		"bad scope":             {[]*fencedv1.StaleRejection{good, {Scope: "bad", PresentedToken: 3, HighestToken: 4}}, "rejection 1: bad input: key"},
		"presented 0":           {[]*fencedv1.StaleRejection{{Scope: "a/1", HighestToken: 4}}, "rejection 0: bad input: presented token 0 is not below"},
		"presented not below":   {[]*fencedv1.StaleRejection{{Scope: "a/1", PresentedToken: 4, HighestToken: 4}}, "presented token 4 is not below highest token 4"},
		"bad owner":             {[]*fencedv1.StaleRejection{{Scope: "a/1", PresentedToken: 3, HighestToken: 4, Owner: "bad"}}, "rejection 0: bad input: owner"},
		"resource too long":     {[]*fencedv1.StaleRejection{{Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: strings.Repeat("r", MaxResourceBytes+1)}}, "resource is 129 bytes, the limit is 128"},
		"resource with newline": {[]*fencedv1.StaleRejection{{Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: "r\n"}}, "rejection 0: bad input: resource"},
	} {
		err := Validate(tc.batch, strictRules{})
		if !errors.Is(err, errBad) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the rules' error with %q", name, err, tc.want)
		}
	}
	if err := Validate([]*fencedv1.StaleRejection{{Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: strings.Repeat("r", MaxResourceBytes)}}, strictRules{}); err != nil {
		t.Errorf("resource of MaxResourceBytes: %v", err)
	}
}
