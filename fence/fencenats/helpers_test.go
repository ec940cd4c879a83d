package fencenats_test

import (
	"context"
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencedio/fenced/internal/msgtest"
	"github.com/fencedio/fenced/internal/testenv"
)

// natsURL is the test NATS for the examples (which cannot skip).
func natsURL() string {
	if u := os.Getenv("FENCED_TEST_NATS"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(testenv.NATSURL(t))
	if err != nil {
		t.Fatalf("connect NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// bucket makes a KV bucket deleted when t ends.
func bucket(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	name := msgtest.Name("fence_")
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteKeyValue(context.Background(), name) })
	return kv
}

// stream makes a stream on subjects "<name>.>" deleted when t ends.
func stream(t *testing.T, js jetstream.JetStream) (jetstream.Stream, string) {
	t.Helper()
	name := msgtest.Name("FENCE_")
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name) })
	return s, name
}
