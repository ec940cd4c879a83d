package fences3_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fences3"
	"github.com/fencedio/fenced/internal/signtest"
)

func TestEncodeScope(t *testing.T) {
	for scope, want := range map[string]string{
		"orders/7":  "orders/7",
		"a b":       "a%20b",
		"50%":       "50%25",
		"é":         "%C3%A9",
		"x~y.z_-Q9": "x~y.z_-Q9",
		"a:b+c":     "a%3Ab%2Bc",
		" lead":     "%20lead",
	} {
		if got := fences3.EncodeScope(scope); got != want {
			t.Errorf("EncodeScope(%q) = %q, want %q", scope, got, want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	c := s3.New(s3.Options{Region: "us-east-1"})
	for _, tc := range []struct {
		name   string
		client *s3.Client
		bucket string
		cfg    fences3.Config
	}{
		{"nil client", nil, "b", fences3.Config{}},
		{"no bucket", c, "", fences3.Config{}},
		{"negative attempts", c, "b", fences3.Config{Attempts: -1}},
	} {
		if _, err := fences3.New(tc.client, tc.bucket, tc.cfg); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
}

func TestDecisions(t *testing.T) {
	var seen decisions
	g, _ := newBucket(t, fences3.Config{Observer: &seen})
	ctx := context.Background()
	seq := func(q uint64) context.Context { return fence.WithSequence(ctx, q) }
	const key = "orders/7.json"
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		scope string
		token uint64
		value string
		err   error
	}{
		{"first", ctx, "orders/7", 5, "v1", nil},
		{"equal token", ctx, "orders/7", 5, "v2", nil},
		{"higher", ctx, "orders/7", 7, "v3", nil},
		{"stale", ctx, "orders/7", 6, "x", fence.ErrStaleToken},
		{"sequenced", seq(1), "orders/7", 7, "v4", nil},
		{"duplicate", seq(1), "orders/7", 7, "x", fence.ErrDuplicate},
		{"next sequence", seq(3), "orders/7", 7, "v5", nil},
		{"new epoch, any sequence", seq(9), "orders/7", 8, "v6", nil},
		{"sequence out of range", seq(1 << 63), "orders/7", 8, "x", fence.ErrInvalidSequence},
		{"no token", ctx, "orders/7", 0, "x", fence.ErrNoToken},
		{"invalid scope", ctx, "orders\x00", 9, "x", fence.ErrInvalidScope},
		{"another scope", ctx, "orders/8", 99, "x", fences3.ErrScopeMismatch},
	} {
		err := g.Put(tc.ctx, tc.scope, tc.token, key, []byte(tc.value), nil)
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Fatalf("%s: Put = %v, want %v", tc.name, err, tc.err)
		}
	}
	o, err := g.Get(ctx, key)
	if err != nil || string(o.Data) != "v6" || o.Token != 8 || o.Sequence != 9 || o.Scope != "orders/7" || o.Deleted {
		t.Fatalf("Get = %+v, %v; want v6 under token 8, sequence 9", o, err)
	}
	var stale *fence.StaleTokenError
	if err := g.Put(ctx, "orders/7", 2, key, nil, nil); !errors.As(err, &stale) || stale.Highest != 8 || stale.Presented != 2 || stale.Scope != "orders/7" {
		t.Fatalf("stale = %v", err)
	}
	if h, err := g.Highest(ctx, "orders/7", key); err != nil || h != 8 {
		t.Fatalf("Highest = %d, %v; want 8", h, err)
	}
	if h, err := g.Highest(ctx, "orders/7", "none"); err != nil || h != 0 {
		t.Fatalf("Highest of no object = %d, %v; want 0", h, err)
	}
	if _, err := g.Highest(ctx, "orders/8", key); !errors.Is(err, fences3.ErrScopeMismatch) {
		t.Fatalf("Highest under another scope = %v", err)
	}
	var accepted, rejected, dup int
	for _, d := range seen.all() {
		switch {
		case d.Accepted:
			accepted++
		case d.Duplicate:
			dup++
		default:
			rejected++
		}
	}
	if accepted != 6 || rejected != 2 || dup != 1 {
		t.Fatalf("observed %d accepted, %d stale, %d duplicates; want 6, 2, 1", accepted, rejected, dup)
	}
}

// The stored object as any S3 client sees it: the exact metadata names and
// values, and the body's write line, new for every write so that two
// writes of the same data have different ETags.
func TestStoredLayout(t *testing.T) {
	g, bucket := newBucket(t, fences3.Config{})
	c := newClient(t, nil)
	ctx := context.Background()
	key := "a/b c"
	opts := &fences3.PutOptions{ContentType: "application/json", Metadata: map[string]string{"origin": "test"}}
	if err := g.Put(fence.WithSequence(ctx, 4), "jobs/é 1", 42, key, []byte(`{"n":1}`), opts); err != nil {
		t.Fatal(err)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"fencing-scope": "jobs/%C3%A9%201", "fencing-token": "42", "fencing-sequence": "4", "origin": "test"}
	if len(head.Metadata) != len(want) {
		t.Fatalf("metadata %q, want %q", head.Metadata, want)
	}
	for k, v := range want {
		if head.Metadata[k] != v {
			t.Fatalf("metadata %q, want %q", head.Metadata, want)
		}
	}
	if aws.ToString(head.ContentType) != "application/json" {
		t.Fatalf("content type %q", aws.ToString(head.ContentType))
	}
	raw := func() []byte { return rawGet(t, bucket, key) }
	first := raw()
	if !regexp.MustCompile(`^fenced-s3 [A-Z2-7]{26}\n\{"n":1\}$`).Match(first) {
		t.Fatalf("body %q", first)
	}
	if err := g.Put(ctx, "jobs/é 1", 42, key, []byte(`{"n":1}`), opts); err != nil {
		t.Fatal(err)
	}
	again, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(again.ETag) == aws.ToString(head.ETag) || bytes.Equal(raw(), first) {
		t.Fatalf("two writes of the same data have ETag %s and %s: a compare-and-set could not tell them apart", aws.ToString(head.ETag), aws.ToString(again.ETag))
	}
	if again.Metadata["fencing-sequence"] != "4" {
		t.Fatalf("a write without a sequence under the same token changed the last sequence: %q", again.Metadata)
	}
	o, err := g.Get(ctx, key)
	if err != nil || string(o.Data) != `{"n":1}` || o.Metadata["origin"] != "test" || o.ContentType != "application/json" {
		t.Fatalf("Get = %+v, %v", o, err)
	}
}

// Objects the guard did not write are refused, never overwritten.
func TestForeignObjects(t *testing.T) {
	g, bucket := newBucket(t, fences3.Config{})
	c := newClient(t, nil)
	ctx := context.Background()
	put := func(key, body string, md map[string]string) {
		t.Helper()
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: strings.NewReader(body), Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
	}
	valid := func(extra map[string]string) map[string]string {
		md := map[string]string{"fencing-scope": "s", "fencing-token": "5", "fencing-sequence": "0"}
		for k, v := range extra {
			md[k] = v
		}
		return md
	}
	put("plain", "hello", nil)
	put("zero-token", "x", valid(map[string]string{"fencing-token": "0"}))
	put("leading-zero", "x", valid(map[string]string{"fencing-token": "05"}))
	put("no-sequence", "x", map[string]string{"fencing-scope": "s", "fencing-token": "5"})
	put("big-sequence", "x", valid(map[string]string{"fencing-sequence": "9223372036854775808"}))
	put("bad-scope", "x", valid(map[string]string{"fencing-scope": "a%2fb"}))
	put("bad-deleted", "x", valid(map[string]string{"fencing-deleted": "yes"}))
	for _, key := range []string{"plain", "zero-token", "leading-zero", "no-sequence", "big-sequence", "bad-scope", "bad-deleted"} {
		if err := g.Put(ctx, "s", 99, key, []byte("y"), nil); !errors.Is(err, fences3.ErrCorruptObject) {
			t.Errorf("Put over %q = %v, want ErrCorruptObject", key, err)
		}
	}
	// Valid metadata but a body without the write line: Put decides on the
	// metadata; Get and Update refuse the body.
	put("no-line", "hello", valid(nil))
	if _, err := g.Get(ctx, "no-line"); !errors.Is(err, fences3.ErrCorruptObject) {
		t.Errorf("Get of a body without the write line = %v", err)
	}
	if err := g.Update(ctx, "s", 5, "no-line", func(b []byte) ([]byte, error) { return b, nil }); !errors.Is(err, fences3.ErrCorruptObject) {
		t.Errorf("Update of a body without the write line = %v", err)
	}
	if err := g.Put(ctx, "s", 9, "k", nil, &fences3.PutOptions{Metadata: map[string]string{"Fencing-Token": "1"}}); err == nil {
		t.Error("Put with the guard's metadata name succeeded")
	}
	if _, err := g.Get(ctx, "missing"); !errors.Is(err, fences3.ErrNotFound) {
		t.Errorf("Get of no object = %v", err)
	}
}

func TestUpdateAndDelete(t *testing.T) {
	g, _ := newBucket(t, fences3.Config{})
	ctx := context.Background()
	app := func(s string) func([]byte) ([]byte, error) {
		return func(b []byte) ([]byte, error) { return append(b, s...), nil }
	}
	if err := g.Update(ctx, "log", 3, "log", app("a")); err != nil {
		t.Fatal(err)
	}
	if err := g.Update(ctx, "log", 3, "log", app("b")); err != nil {
		t.Fatal(err)
	}
	if err := g.Update(ctx, "log", 2, "log", app("c")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale Update = %v", err)
	}
	boom := errors.New("boom")
	if err := g.Update(ctx, "log", 4, "log", func([]byte) ([]byte, error) { return nil, boom }); err != boom {
		t.Fatalf("failing Update = %v", err)
	}
	if o, err := g.Get(ctx, "log"); err != nil || string(o.Data) != "ab" || o.Token != 3 {
		t.Fatalf("Get = %+v, %v; want ab under token 3 (a failed function records nothing)", o, err)
	}
	// Delete leaves a tombstone that keeps the token.
	if err := g.Delete(ctx, "log", 2, "log"); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale Delete = %v", err)
	}
	if err := g.Delete(ctx, "log", 5, "log"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(ctx, "log"); !errors.Is(err, fences3.ErrNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
	if o, err := g.Head(ctx, "log"); err != nil || !o.Deleted || o.Token != 5 {
		t.Fatalf("Head after Delete = %+v, %v; want a tombstone with token 5", o, err)
	}
	if err := g.Put(ctx, "log", 4, "log", []byte("late"), nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Put with token 4 after a Delete with 5 = %v; want stale", err)
	}
	if err := g.Update(ctx, "log", 5, "log", app("new")); err != nil {
		t.Fatal(err)
	}
	if o, err := g.Get(ctx, "log"); err != nil || string(o.Data) != "new" {
		t.Fatalf("Get after recreating = %+v, %v; want the data to start afresh", o, err)
	}
}

func TestSignatures(t *testing.T) {
	name := newBucketName(t)
	c := newClient(t, nil)
	plain := guardOver(t, c, name, fences3.Config{})
	signtest.CheckGuard(t, "orders/7", func(v *fence.Verifier) signtest.Mutate {
		g := guardOver(t, c, name, fences3.Config{Verifier: v})
		return func(ctx context.Context, scope string, token uint64) (bool, error) {
			err := g.Put(ctx, scope, token, "signed", []byte("x"), nil)
			return err == nil, err
		}
	}, func(ctx context.Context, scope string) (uint64, error) {
		return plain.Highest(ctx, scope, "signed")
	})
}
