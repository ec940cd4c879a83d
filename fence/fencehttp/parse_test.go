package fencehttp_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  error
	}{
		{in: "1", want: 1},
		{in: "42", want: 42},
		{in: "007", want: 7},
		{in: "18446744073709551615", want: 1<<64 - 1},
		{in: "", err: fence.ErrNoToken},
		{in: "0", err: fencehttp.ErrInvalidToken},
		{in: "000", err: fencehttp.ErrInvalidToken},
		{in: "+1", err: fencehttp.ErrInvalidToken},
		{in: "-1", err: fencehttp.ErrInvalidToken},
		{in: " 1", err: fencehttp.ErrInvalidToken},
		{in: "1 ", err: fencehttp.ErrInvalidToken},
		{in: "1\t", err: fencehttp.ErrInvalidToken},
		{in: "1_000", err: fencehttp.ErrInvalidToken},
		{in: "0x10", err: fencehttp.ErrInvalidToken},
		{in: "1e3", err: fencehttp.ErrInvalidToken},
		{in: "1.0", err: fencehttp.ErrInvalidToken},
		{in: "abc", err: fencehttp.ErrInvalidToken},
		{in: "٣", err: fencehttp.ErrInvalidToken}, // a non-ASCII digit
		{in: "18446744073709551616", err: fencehttp.ErrInvalidToken},
		{in: strings.Repeat("9", 100), err: fencehttp.ErrInvalidToken},
	}
	for _, tt := range tests {
		got, err := fencehttp.ParseToken(tt.in)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("ParseToken(%q) = %d, %v; want error matching %v", tt.in, got, err, tt.err)
			}
			// Missing and malformed get different answers, so they must not overlap.
			if errors.Is(err, fence.ErrNoToken) && errors.Is(err, fencehttp.ErrInvalidToken) {
				t.Errorf("ParseToken(%q) error %v matches both ErrNoToken and ErrInvalidToken", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestValidateScope(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"orders/7", true},
		{"a", true},
		{"commandes/été", true},
		{"with space", true},
		{strings.Repeat("k", fencehttp.MaxScopeBytes), true},
		{"", false},
		{strings.Repeat("k", fencehttp.MaxScopeBytes+1), false},
		{"a\x00b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x7fb", false},
		{"a\u0085b", false}, // C1 control
		{"a\xffb", false},   // invalid UTF-8
	}
	for _, tt := range tests {
		err := fencehttp.ValidateScope(tt.in)
		if tt.ok && err != nil {
			t.Errorf("ValidateScope(%q) = %v; want nil", tt.in, err)
		}
		if !tt.ok && !errors.Is(err, fence.ErrInvalidScope) {
			t.Errorf("ValidateScope(%q) = %v; want error matching ErrInvalidScope", tt.in, err)
		}
	}
}

func TestFromHeader(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		scope  string
		token  uint64
		err    error
	}{
		{name: "valid", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"9"}}, scope: "s", token: 9},
		{name: "nothing", header: http.Header{}, err: fence.ErrNoToken},
		{name: "scope only", header: http.Header{"Fencing-Scope": {"s"}}, err: fence.ErrNoToken},
		{name: "empty token", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {""}}, err: fence.ErrNoToken},
		{name: "token only", header: http.Header{"Fencing-Token": {"9"}}, err: fence.ErrInvalidScope},
		{name: "two tokens", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"9", "10"}}, err: fencehttp.ErrInvalidToken},
		{name: "two scopes", header: http.Header{"Fencing-Scope": {"s", "t"}, "Fencing-Token": {"9"}}, err: fence.ErrInvalidScope},
		{name: "bad token", header: http.Header{"Fencing-Scope": {"s"}, "Fencing-Token": {"x"}}, err: fencehttp.ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope, token, err := fencehttp.FromHeader(tt.header)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("FromHeader = %q, %d, %v; want error matching %v", scope, token, err, tt.err)
				}
				return
			}
			if err != nil || scope != tt.scope || token != tt.token {
				t.Fatalf("FromHeader = %q, %d, %v; want %q, %d", scope, token, err, tt.scope, tt.token)
			}
		})
	}
}
