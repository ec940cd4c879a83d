package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/server"
)

func TestConfigCluster(t *testing.T) {
	three := []server.Peer{{ID: "n1", Address: "127.0.0.1:7421"}, {ID: "n2", Address: "127.0.0.1:7423"}, {ID: "n3", Address: "127.0.0.1:7425"}}
	tests := []struct {
		name       string
		cfg        server.Config
		wantErr    string // substring; "" for none
		wantListen string
	}{
		{name: "single node default", cfg: server.Config{}, wantListen: "127.0.0.1:7421"},
		{name: "raft listen from the list", cfg: server.Config{NodeID: "n2", InitialCluster: three}, wantListen: "127.0.0.1:7423"},
		{name: "raft listen as listed", cfg: server.Config{NodeID: "n3", RaftListen: "127.0.0.1:7425", InitialCluster: three}, wantListen: "127.0.0.1:7425"},
		{name: "all interfaces, same port", cfg: server.Config{NodeID: "n3", RaftListen: "0.0.0.0:7425", InitialCluster: three}, wantListen: "0.0.0.0:7425"},
		{name: "not in the list", cfg: server.Config{NodeID: "n4", InitialCluster: three}, wantErr: `"n4" is not in the initial cluster`},
		{name: "default id not in the list", cfg: server.Config{InitialCluster: three}, wantErr: `"node1" is not in the initial cluster`},
		{name: "listens elsewhere", cfg: server.Config{NodeID: "n1", RaftListen: "127.0.0.1:9999", InitialCluster: three}, wantErr: "but listens on 127.0.0.1:9999"},
		{name: "advertised through a proxy", cfg: server.Config{NodeID: "n1", RaftListen: "127.0.0.1:9999", RaftAdvertise: "127.0.0.1:7421", InitialCluster: three}, wantListen: "127.0.0.1:9999"},
		{name: "advertises another address than listed", cfg: server.Config{NodeID: "n1", RaftListen: "127.0.0.1:9999", RaftAdvertise: "127.0.0.1:7423", InitialCluster: three}, wantErr: "advertises the raft address 127.0.0.1:7423"},
		{name: "duplicate id", cfg: server.Config{NodeID: "n1", InitialCluster: append([]server.Peer{{ID: "n1", Address: "127.0.0.1:7427"}}, three...)}, wantErr: "appears twice"},
		{name: "shared address", cfg: server.Config{NodeID: "n1", InitialCluster: append([]server.Peer{{ID: "n4", Address: "127.0.0.1:7423"}}, three...)}, wantErr: "share the address"},
		{name: "undialable address", cfg: server.Config{NodeID: "n1", InitialCluster: append([]server.Peer{{ID: "n4", Address: "0.0.0.0:7427"}}, three...)}, wantErr: "peers cannot dial it"},
		{name: "port 0", cfg: server.Config{NodeID: "n1", InitialCluster: append([]server.Peer{{ID: "n4", Address: "127.0.0.1:0"}}, three...)}, wantErr: "fixed port"},
		{name: "min TTL below two heartbeats", cfg: server.Config{NodeID: "n1", InitialCluster: three, MinTTL: 900 * time.Millisecond}, wantErr: "at least twice the HeartbeatTimeout"},
		{name: "min TTL of two heartbeats", cfg: server.Config{NodeID: "n1", InitialCluster: three, MinTTL: 600 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond}, wantListen: "127.0.0.1:7421"},
		{name: "cluster of one keeps the single-node rule", cfg: server.Config{NodeID: "n1", InitialCluster: three[:1], MinTTL: 300 * time.Millisecond}, wantListen: "127.0.0.1:7421"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if got := cfg.WithDefaults().RaftListen; got != tt.wantListen {
					t.Errorf("RaftListen %q, want %q", got, tt.wantListen)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
