package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fenced.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every kind of flag can be set in the file, and the command line wins.
func TestConfigFile(t *testing.T) {
	path := writeConfig(t, `{
		"node-id": "n2",
		"listen": "127.0.0.1:8420",
		"heartbeat-timeout": "300ms",
		"max-body-bytes": 1024,
		"max-leases": "77",
		"max-lease-bytes": "64MiB",
		"join": true,
		"log-level": "warn",
		"auth-file": "/etc/fenced/auth.json",
		"cert-file": "/etc/fenced/tls.crt",
		"key-file": "/etc/fenced/tls.key",
		"trusted-ca-file": "/etc/fenced/ca.crt",
		"client-cert-auth": true,
		"signing-key-file": "/etc/fenced/signing.json",
		"peer-cert-file": "/etc/fenced/peer.crt",
		"peer-key-file": "/etc/fenced/peer.key",
		"peer-trusted-ca-file": "/etc/fenced/peer-ca.crt"
	}`)
	cmd := rootCmd()
	if err := cmd.ParseFlags([]string{"--config", path, "--listen", "127.0.0.1:9420", "--max-leases=5"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(cmd, path); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"node-id": "n2", "heartbeat-timeout": "300ms", "max-body-bytes": "1024", "join": "true", "log-level": "warn",
		"max-lease-bytes": "64MiB", "listen": "127.0.0.1:9420", "max-leases": "5", // the last two from the command line
		"data-dir":  "fenced-data", // in neither: the default
		"auth-file": "/etc/fenced/auth.json", "cert-file": "/etc/fenced/tls.crt", "key-file": "/etc/fenced/tls.key",
		"trusted-ca-file": "/etc/fenced/ca.crt", "client-cert-auth": "true", "signing-key-file": "/etc/fenced/signing.json",
		"peer-cert-file": "/etc/fenced/peer.crt", "peer-key-file": "/etc/fenced/peer.key", "peer-trusted-ca-file": "/etc/fenced/peer-ca.crt",
	}
	for name, v := range want {
		if got := cmd.Flags().Lookup(name).Value.String(); got != v {
			t.Errorf("--%s = %q, want %q", name, got, v)
		}
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"unknown key", `{"node-name": "n1"}`, `"node-name" is not a flag`},
		{"config in config", `{"config": "other.json"}`, `"config" is not a flag`},
		{"bad value", `{"min-ttl": "soon"}`, `"min-ttl"`},
		{"wrong type", `{"node-id": ["n1"]}`, "want a string, number or boolean"},
		{"not an object", `["node-id"]`, "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := rootCmd()
			err := applyConfigFile(cmd, writeConfig(t, tc.body))
			if !errors.Is(err, errConfigFile) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want errConfigFile with %q", err, tc.want)
			}
		})
	}
	if err := applyConfigFile(rootCmd(), filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// The configuration guide's table names every flag of fenced, which is
// also every key of its config file, each in one row.
func TestConfigurationGuideListsEveryFlag(t *testing.T) {
	guide, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(guide)
	start := strings.Index(section, "\n## fenced\n")
	end := strings.Index(section[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("docs/configuration.md has no \"## fenced\" section")
	}
	section = section[start : start+1+end]
	listed := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| (.*?) \\|").FindAllStringSubmatch(section, -1) {
		for _, f := range regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(m[1], -1) {
			listed[f[1]]++
		}
	}
	rootCmd().Flags().VisitAll(func(f *pflag.Flag) {
		switch listed[f.Name] {
		case 0:
			t.Errorf("--%s is not in the configuration table of docs/configuration.md", f.Name)
		case 1:
		default:
			t.Errorf("--%s has %d rows in the configuration table of docs/configuration.md", f.Name, listed[f.Name])
		}
	})
}

// A byte size is a count or one with a binary suffix; anything else, a
// negative size or one past int64 is refused and changes nothing.
func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1000": 1000, "64MiB": 64 << 20, "1 KiB": 1 << 10, "3GiB": 3 << 30, "1536KiB": 1536 << 10} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for in, want := range map[int64]string{0: "0", 1000: "1000", 64 << 20: "64MiB", 1536 << 10: "1536KiB", 1<<30 + 1: "1073741825"} {
		if b := byteSize(in); b.String() != want {
			t.Errorf("%d: %q, want %q", in, b.String(), want)
		}
	}
	for _, in := range []string{"", "-1", "64MB", "1.5GiB", "MiB", "9999999999GiB"} {
		b := byteSize(7)
		if err := b.Set(in); err == nil || b != 7 {
			t.Errorf("Set(%q): %v, value %d; want refused, 7 kept", in, err, b)
		}
	}
}
