package server_test

import (
	"net/http"
	"strings"
	"testing"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/scopetest"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// acquireProto encodes an AcquireRequest by hand, so that a key that is not
// valid UTF-8 reaches the server as sent.
func acquireProto(key string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "scope-rule")
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, 60_000)
}

// Acquire applies the scope rule of the guards (fence.ValidateScope) to
// keys: every case gets the same verdict here as at a guard, so the service
// never issues a token that a guard would refuse for its scope.
func TestAcquireKeyScopeRule(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	for _, tc := range scopetest.Cases {
		status, _, raw := a.do(http.MethodPost, servicePath+"Acquire", "application/proto", acquireProto(tc.Scope))
		if !tc.Valid {
			e := a.checkError(tc.Name, status, raw, "invalid_argument")
			// The codec refuses invalid UTF-8 and the body limit 1 MiB
			// before the key is looked at; both are invalid_argument too.
			if !strings.Contains(e.Message, "key") && !strings.Contains(e.Message, "UTF-8") && !strings.Contains(e.Message, "limit") {
				t.Errorf("%s: message %q does not say what is wrong", tc.Name, e.Message)
			}
			continue
		}
		var r fencedv1.AcquireResponse
		if status != http.StatusOK {
			t.Errorf("%s: HTTP %d %.200s; want 200", tc.Name, status, raw)
		} else if err := proto.Unmarshal(raw, &r); err != nil || r.GetLease().GetKey() != tc.Scope || r.GetLease().GetToken() == 0 {
			t.Errorf("%s: answer %v, %v; want a lease on the key", tc.Name, &r, err)
		}
	}
}
