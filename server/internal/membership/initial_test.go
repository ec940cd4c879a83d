package membership

import (
	"strings"
	"testing"
	"time"
)

func TestParseInitialCluster(t *testing.T) {
	peers, err := ParseInitialCluster(" n1=127.0.0.1:7421, n2=127.0.0.1:7423 ,n3=host3:7421")
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{"n1", "127.0.0.1:7421"}, {"n2", "127.0.0.1:7423"}, {"n3", "host3:7421"}}
	if len(peers) != len(want) {
		t.Fatalf("got %v, want %v", peers, want)
	}
	for i := range want {
		if peers[i] != want[i] {
			t.Errorf("peer %d: got %v, want %v", i, peers[i], want[i])
		}
	}
	if got := FormatPeers(peers); got != "n1=127.0.0.1:7421,n2=127.0.0.1:7423,n3=host3:7421" {
		t.Errorf("FormatPeers: %q", got)
	}
	if peers, err := ParseInitialCluster(""); err != nil || peers != nil {
		t.Errorf("empty list: %v %v", peers, err)
	}
	for _, bad := range []string{"n1", "n1=", "=127.0.0.1:7421", "n1=127.0.0.1:7421,,n2=127.0.0.1:7423"} {
		if _, err := ParseInitialCluster(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	three := []Peer{{"n1", "127.0.0.1:7421"}, {"n2", "127.0.0.1:7423"}, {"n3", "127.0.0.1:7425"}}
	ok := func(c Config) Config { // a valid member of three
		c.MinTTL, c.HeartbeatTimeout = time.Second, 500*time.Millisecond
		return c
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" for none
	}{
		{name: "cluster of one", cfg: Config{NodeID: "n1"}},
		{name: "join alone", cfg: Config{NodeID: "n1", Join: true}},
		{name: "join with a list", cfg: Config{NodeID: "n1", Join: true, InitialCluster: three}, wantErr: "exclude each other"},
		{name: "member as listed", cfg: ok(Config{NodeID: "n2", RaftListen: "127.0.0.1:7423", InitialCluster: three})},
		{name: "every interface, same port", cfg: ok(Config{NodeID: "n2", RaftListen: "[::]:7423", InitialCluster: three})},
		{name: "empty host, same port", cfg: ok(Config{NodeID: "n2", RaftListen: ":7423", InitialCluster: three})},
		{name: "another port", cfg: ok(Config{NodeID: "n2", RaftListen: "0.0.0.0:9999", InitialCluster: three}), wantErr: "but listens on 0.0.0.0:9999"},
		{name: "not in the list", cfg: ok(Config{NodeID: "n4", InitialCluster: three}), wantErr: `"n4" is not in the initial cluster n1=127.0.0.1:7421,n2=`},
		{name: "advertised as listed", cfg: ok(Config{NodeID: "n1", RaftListen: "127.0.0.1:9999", RaftAdvertise: "127.0.0.1:7421", InitialCluster: three})},
		{name: "advertised elsewhere", cfg: ok(Config{NodeID: "n1", RaftAdvertise: "127.0.0.1:7423", InitialCluster: three}), wantErr: "advertises the raft address 127.0.0.1:7423"},
		{name: "duplicate id", cfg: ok(Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: append([]Peer{{"n1", "127.0.0.1:7427"}}, three...)}), wantErr: "appears twice"},
		{name: "shared address", cfg: ok(Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: append([]Peer{{"n4", "127.0.0.1:7423"}}, three...)}), wantErr: "share the address"},
		{name: "no port", cfg: ok(Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: append([]Peer{{"n4", "host4"}}, three...)}), wantErr: `node "n4" address "host4"`},
		{name: "no host", cfg: ok(Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: append([]Peer{{"n4", ":7427"}}, three...)}), wantErr: "peers cannot dial it"},
		{name: "port 0", cfg: ok(Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: append([]Peer{{"n4", "127.0.0.1:0"}}, three...)}), wantErr: "fixed port"},
		{name: "min TTL below two heartbeats", cfg: Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: three, MinTTL: 999 * time.Millisecond, HeartbeatTimeout: 500 * time.Millisecond}, wantErr: "at least twice the HeartbeatTimeout"},
		{name: "one member, short min TTL", cfg: Config{NodeID: "n1", RaftListen: "127.0.0.1:7421", InitialCluster: three[:1], MinTTL: time.Millisecond, HeartbeatTimeout: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestAdvertisedRaftAddress(t *testing.T) {
	three := []Peer{{"n1", "h1:7421"}, {"n2", "h2:7421"}}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{NodeID: "n1"}, ""},
		{Config{NodeID: "n2", InitialCluster: three}, "h2:7421"},
		{Config{NodeID: "n3", InitialCluster: three}, ""},
		{Config{NodeID: "n2", InitialCluster: three, RaftAdvertise: "proxy:1"}, "proxy:1"},
	} {
		if got := tt.cfg.AdvertisedRaftAddress(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.cfg, got, tt.want)
		}
	}
}

func TestJoining(t *testing.T) {
	if (Config{}).Joining() || !(Config{Join: true}).Joining() || !(Config{Existing: true}).Joining() {
		t.Error("Joining is not Join or Existing")
	}
}
