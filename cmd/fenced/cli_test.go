package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

// TestErrorsArePrinted runs the binary with arguments it cannot work with:
// each run must exit with status 1 and say on stderr what went wrong and
// what to do about it, never exit silently.
func TestErrorsArePrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildFenced(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string // on stderr, in addition to the "fenced: " prefix
	}{
		{"unknown flag", []string{"--bogus"}, []string{"unknown flag: --bogus", "fenced --help"}},
		{"unknown flag of store", []string{"store", "--bogus"}, []string{"unknown flag: --bogus", "fenced store --help"}},
		{"stray argument", []string{"serve"}, []string{`"serve"`, "fenced --help"}},
		{"bad log format", []string{"--log-format", "foo"}, []string{"--log-format", `"foo"`, "text or json"}},
		{"bad log level", []string{"--log-level", "loud"}, []string{"--log-level", `"loud"`, "debug, info, warn or error"}},
		{"bad duration", []string{"--min-ttl", "soon"}, []string{"--min-ttl", `"soon"`, "fenced --help"}},
		{"bad config", []string{"--min-ttl", "1s", "--max-ttl", "10ms"}, []string{"MaxTTL", "fenced --help"}},
		{"missing config file", []string{"--config", "missing.json"}, []string{"missing.json", "fenced --help"}},
		{"store on an unusable address", []string{"store", "--listen", "999.1.1.1:1"}, []string{"999.1.1.1:1", "--listen", "HOST:PORT"}},
		{"API on an unusable address", []string{"--listen", "999.1.1.1:1"}, []string{"999.1.1.1:1", "--listen", "HOST:PORT"}},
		{"raft on an unusable address", []string{"--raft-listen", "999.1.1.1:1"}, []string{"999.1.1.1:1", "--raft-listen", "HOST:PORT"}},
		{"cert without key", []string{"--cert-file", "node.pem"}, []string{"cert file and key file go together", "fenced --help"}},
		{"peer cert without key or CA", []string{"--peer-cert-file", "node.pem"}, []string{"--peer-cert-file, --peer-key-file and --peer-trusted-ca-file go together", "fenced --help"}},
		{"peer cert and key without CA", []string{"--peer-cert-file", "node.pem", "--peer-key-file", "node-key.pem"}, []string{"--peer-trusted-ca-file go together"}},
		{"missing peer CA file", []string{"--peer-cert-file", "node.pem", "--peer-key-file", "node-key.pem", "--peer-trusted-ca-file", "/nonexistent/ca.pem"}, []string{"peer tls"}},
		{"advertised client URL without a scheme", []string{"--advertise-client-url", "127.0.0.1:7420"}, []string{"client URL", "127.0.0.1:7420", "fenced --help"}},
		{"missing auth file", []string{"--auth-file", "/nonexistent/auth.json"}, []string{"bad auth file", "/nonexistent/auth.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := tc.args
			// Anything that gets as far as serving uses fresh data and free
			// addresses, except the one the case makes unusable.
			if tc.args[0] == "store" {
				args = append([]string{"store", "--data-dir", filepath.Join(dir, "store")}, tc.args[1:]...)
			} else if !strings.Contains(tc.name, "flag") && tc.args[0] != "serve" {
				args = append([]string{"--data-dir", filepath.Join(dir, "data"), "--listen", testutil.MustFreeAddr(t), "--raft-listen", testutil.MustFreeAddr(t)}, args...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Dir = dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("fenced %q: %v, want exit status 1\nstderr:\n%s", args, err, &stderr)
			}
			out := stderr.String()
			if !strings.Contains(out, "fenced: ") {
				t.Errorf("fenced %q: stderr has no \"fenced: \" error line:\n%s", args, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("fenced %q: stderr lacks %q:\n%s", args, w, out)
				}
			}
		})
	}
}
