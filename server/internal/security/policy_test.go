package security

import (
	"errors"
	"fmt"
	"testing"
)

func TestPolicyRejects(t *testing.T) {
	for name, body := range map[string]string{
		"unknown permission": `{"rules": [{"principal": "a", "prefix": "", "permissions": ["write"]}]}`,
		"short hash":         `{"tokens": [{"principal": "a", "sha256": "abcd"}]}`,
		"no principal":       fmt.Sprintf(`{"tokens": [{"sha256": %q}]}`, HashSecret("x")),
		"duplicate secret":   fmt.Sprintf(`{"tokens": [{"principal": "a", "sha256": %q}, {"principal": "b", "sha256": %q}]}`, HashSecret("x"), HashSecret("x")),
		"unknown field":      `{"token": []}`,
		"not json":           `rules: []`,
	} {
		if _, err := ParsePolicy([]byte(body)); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("%s: %v, want ErrBadPolicy", name, err)
		}
	}
}
