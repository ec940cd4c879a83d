package server

import "testing"

func TestValidateClientURL(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:7420", "https://fenced-1.example.com:7420", "http://[::1]:7420", "http://h/"} {
		if err := ValidateClientURL(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:7420", "ftp://h:1", "http://", "http://h:1/path", "http://h:1?q", "http://u@h:1", "http://0.0.0.0:7420", "http://[::]:7420"} {
		if err := ValidateClientURL(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
