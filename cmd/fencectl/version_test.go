package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fencedio/fenced/internal/buildinfo"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(t *testing.T, out []byte)
	}{
		{[]string{"version"}, func(t *testing.T, out []byte) {
			if want := buildinfo.Read().Text("fencectl"); string(out) != want {
				t.Errorf("fencectl version printed\n%s\nwant\n%s", out, want)
			}
		}},
		{[]string{"--json", "version"}, func(t *testing.T, out []byte) {
			var got buildinfo.Info
			if err := json.Unmarshal(out, &got); err != nil || got != buildinfo.Read() {
				t.Errorf("fencectl --json version printed %s (%v), want %+v", out, err, buildinfo.Read())
			}
		}},
	} {
		cmd := rootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(tc.args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		tc.want(t, out.Bytes())
	}
	cmd := rootCmd()
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetArgs([]string{"version", "extra"})
	if err := cmd.Execute(); err == nil {
		t.Error("fencectl version extra: no error")
	}
}
