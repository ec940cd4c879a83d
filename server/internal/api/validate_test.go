package api

import (
	"errors"
	"strings"
	"testing"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/apierr"
)

func TestValidate(t *testing.T) {
	for name, err := range map[string]error{
		"empty key":         ValidateKey(""),
		"long key":          ValidateKey(strings.Repeat("k", MaxKeyBytes+1)),
		"long owner":        ValidateOwner(strings.Repeat("o", MaxOwnerBytes+1)),
		"owner with a tab":  ValidateOwner("a\tb"),
		"owner not UTF-8":   ValidateOwner("\xff"),
		"no lease ID":       ValidateID(""),
		"long lease ID":     ValidateID(strings.Repeat("i", maxIDBytes+1)),
		"prefix with a NUL": validatePrefix("a\x00"),
	} {
		if !errors.Is(err, apierr.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	for name, err := range map[string]error{
		"key":          ValidateKey("a/b"),
		"longest key":  ValidateKey(strings.Repeat("k", MaxKeyBytes)),
		"owner":        ValidateOwner("worker é"),
		"empty owner":  ValidateOwner(""),
		"lease ID":     ValidateID("0123abcd"),
		"empty prefix": validatePrefix(""),
	} {
		if err != nil {
			t.Errorf("%s: %v, want valid", name, err)
		}
	}
	if _, _, err := acquireTimes(&fencedv1.AcquireRequest{TtlMs: -1 << 62}); !errors.Is(err, apierr.ErrInvalid) ||
		err.Error() != "invalid argument: ttlMs -4611686018427387904 is outside every allowed range" {
		t.Errorf("a TTL no duration holds: %v", err)
	}
	if ttl, wait, err := acquireTimes(&fencedv1.AcquireRequest{TtlMs: 1500, WaitMs: 20}); err != nil || ttl.Milliseconds() != 1500 || wait.Milliseconds() != 20 {
		t.Errorf("acquireTimes: %v %v %v", ttl, wait, err)
	}
	if err := validatePrefix("a\x00"); !strings.HasPrefix(err.Error(), "prefix: invalid argument: key ") {
		t.Errorf("prefix error %q, want it to name the prefix", err)
	}
}
