package membership

import (
	"context"
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

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

func TestClientURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	all, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	addr := ln.Addr().String()
	for _, tt := range []struct {
		advertise string
		ln        net.Listener
		tls       bool
		want      string
	}{
		{"https://api.example:443", ln, false, "https://api.example:443"},
		{"http://api.example", nil, false, "http://api.example"},
		{"", nil, false, ""},
		{"", ln, false, "http://" + addr},
		{"", ln, true, "https://" + addr},
		{"", all, false, ""},
	} {
		if got := ClientURL(tt.advertise, tt.ln, tt.tls); got != tt.want {
			t.Errorf("ClientURL(%q, %v, %v) = %q, want %q", tt.advertise, tt.ln, tt.tls, got, tt.want)
		}
	}
}

// roles answers GET /v1/role as a member would, with the Role set.
type roles struct {
	mu   sync.Mutex
	role Role
}

func (r *roles) set(role Role) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.role = role
}

func (r *roles) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/role" {
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	json.NewEncoder(w).Encode(r.role)
}

func TestPublisher(t *testing.T) {
	ctx := context.Background()
	n := newLeader(t, "n1")
	n2, n3 := &roles{role: Role{NodeID: "n2", ClientURL: "http://n2.example:7420"}}, &roles{role: Role{NodeID: "n9", ClientURL: "http://n9.example"}}
	for id, h := range map[string]*roles{"n2": n2, "n3": n3} {
		srv := httptest.NewServer(h)
		defer srv.Close()
		if err := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(srv.Listener.Addr().String()), 0, 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	self := "http://n1.example:7420"
	p := &Publisher{Raft: n.raft, NodeID: "n1", Self: func() string { return self }, Applied: n.fsm.ClientURLs,
		Transport: http.DefaultTransport, Log: quiet}
	check := func(want map[string]string) {
		t.Helper()
		if got := n.fsm.ClientURLs(); !maps.Equal(got, want) {
			t.Errorf("client URLs %v, want %v", got, want)
		}
	}
	p.sync(ctx)
	// n3 answers as another node: nothing known of it.
	check(map[string]string{"n1": self, "n2": "http://n2.example:7420"})
	// The log's last index, not the applied one: raft records an entry as
	// applied only after the FSM answered its future.
	last := n.raft.LastIndex()
	p.sync(ctx)
	if n.raft.LastIndex() != last {
		t.Error("nothing changed, yet the log was written")
	}

	// n2 advertises an invalid URL, n3 answers none: the last URL is kept.
	n2.set(Role{NodeID: "n2", ClientURL: "ftp://n2.example"})
	self = "http://n1.example:7421"
	p.sync(ctx)
	check(map[string]string{"n1": self, "n2": "http://n2.example:7420"})

	n2.set(Role{NodeID: "n2", ClientURL: "https://n2.example"})
	n3.set(Role{NodeID: "n3", ClientURL: "http://n3.example"})
	p.sync(ctx)
	check(map[string]string{"n1": self, "n2": "https://n2.example", "n3": "http://n3.example"})

	// A removed member's URL is forgotten.
	if err := n.raft.RemoveServer("n2", 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	p.sync(ctx)
	check(map[string]string{"n1": self, "n3": "http://n3.example"})
}
