package fencehttp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fencesql"
)

// TestMiddlewareTokenOutOfRange puts the middleware in front of a SQL guard,
// which stores tokens in a signed BIGINT. A token above 2^63-1 is a valid
// header value that this resource cannot accept: a client error, answered
// 400 with the reason, not a 503 that would tell the client to retry.
func TestMiddlewareTokenOutOfRange(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sg, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if err := sg.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv, c := newFencedServer(t, sg.External())

	for _, tc := range []struct {
		token  string
		status int
	}{
		{"9223372036854775807", http.StatusOK}, // 2^63-1, the largest BIGINT
		{"9223372036854775808", http.StatusBadRequest},
		{"18446744073709551615", http.StatusBadRequest},
	} {
		resp, body := send(t, srv.Client(), http.MethodPut, srv.URL+"/x", fencedHeader("big", tc.token), "")
		if resp.StatusCode != tc.status {
			t.Errorf("token %s: %d %s; want %d", tc.token, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.status != http.StatusBadRequest {
			continue
		}
		p := problemFields(t, body)
		if p["type"] != fencehttp.ProblemInvalidToken || !strings.Contains(fmt.Sprint(p["detail"]), "range") {
			t.Errorf("token %s: problem %v; want %s saying the token is out of range", tc.token, p, fencehttp.ProblemInvalidToken)
		}
	}
	if n := c.get("big"); n != 1 {
		t.Errorf("handler ran %d times, want once (only for the token in range)", n)
	}
}

func TestProblemForTokenOutOfRange(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fence.ErrTokenOutOfRange,
		fencesql.ErrTokenOutOfRange,
		fmt.Errorf("guard: %w", fencesql.ErrTokenOutOfRange),
	} {
		p := fencehttp.ProblemFor(err)
		if p.Status != http.StatusBadRequest || p.Type != fencehttp.ProblemInvalidToken || p.Detail != err.Error() {
			t.Errorf("ProblemFor(%v) = %+v; want 400 %s with the error as detail", err, p, fencehttp.ProblemInvalidToken)
		}
	}
	if !errors.Is(fencesql.ErrTokenOutOfRange, fence.ErrTokenOutOfRange) {
		t.Error("fencesql.ErrTokenOutOfRange does not match fence.ErrTokenOutOfRange")
	}
}
