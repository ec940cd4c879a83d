package rejections

import (
	"fmt"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// Rules are the node's checks of the fields a report shares with the rest
// of the wire contract, whose errors Validate returns as they are, and the
// node's error for bad input, which Validate uses for the rules of reports.
type Rules interface {
	Key(key string) error       // a scope is a key
	Owner(owner string) error   // the owner a reporter saw
	Text(field, s string) error // printable UTF-8
	Invalid(format string, args ...any) error
}

// Validate checks every entry of a report; nothing may be recorded unless
// all pass.
func Validate(rs []*fencedv1.StaleRejection, rules Rules) error {
	if len(rs) > MaxReportEntries {
		return rules.Invalid("%d rejections in one report, the limit is %d", len(rs), MaxReportEntries)
	}
	for i, r := range rs {
		if err := validateEntry(r, rules); err != nil {
			return fmt.Errorf("rejection %d: %w", i, err)
		}
	}
	return nil
}

func validateEntry(r *fencedv1.StaleRejection, rules Rules) error {
	if err := rules.Key(r.GetScope()); err != nil {
		return err
	}
	if r.GetPresentedToken() == 0 || r.GetHighestToken() <= r.GetPresentedToken() {
		return rules.Invalid("presented token %d is not below highest token %d: not a stale rejection",
			r.GetPresentedToken(), r.GetHighestToken())
	}
	if err := rules.Owner(r.GetOwner()); err != nil {
		return err
	}
	if len(r.GetResource()) > MaxResourceBytes {
		return rules.Invalid("resource is %d bytes, the limit is %d", len(r.GetResource()), MaxResourceBytes)
	}
	return rules.Text("resource", r.GetResource())
}
