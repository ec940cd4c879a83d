package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

// runEndpoints executes fencectl with --endpoints and returns its output.
func runEndpoints(t *testing.T, endpoints string, args ...string) (string, error) {
	t.Helper()
	cmd := rootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--endpoints", endpoints}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestEndpointsAndMembers runs commands with a dead first endpoint: they
// go on at the next one.
func TestEndpointsAndMembers(t *testing.T) {
	srv := fencedtest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	eps := "http://" + dead + "," + srv.URL

	// The leader records its client URL as it starts leading.
	var out string
	testutil.Eventually(t, 10*time.Second, func() error {
		var err error
		out, err = runEndpoints(t, eps, "member", "list")
		if err != nil || !strings.Contains(out, "CLIENT URL") || !strings.Contains(out, srv.URL) {
			return fmt.Errorf("member list: %v\n%s", err, out)
		}
		return nil
	})
	if !strings.Contains(out, "node1") || !strings.Contains(out, "voter") || !strings.Contains(out, "*") {
		t.Fatalf("member list:\n%s", out)
	}
	out, err = runEndpoints(t, eps, "--json", "member", "list")
	if err != nil || !strings.Contains(out, `"clientURL": "`+srv.URL+`"`) {
		t.Fatalf("member list --json: %v\n%s", err, out)
	}
	out, err = runEndpoints(t, eps, "member", "remove", "nobody")
	if err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("member remove of an unknown member: %v\n%s", err, out)
	}
	out, err = runEndpoints(t, eps, "status")
	if err != nil || !strings.Contains(out, "unreachable") || !strings.Contains(out, "node1, leader") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, err = runEndpoints(t, eps, "get", "k")
	if err != nil || !strings.Contains(out, "is free") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	t.Setenv("FENCED_ENDPOINTS", eps)
	cmd := rootCmd()
	var buf bytes.Buffer
	cmd.SetOut(&buf)
	cmd.SetArgs([]string{"list"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("list with FENCED_ENDPOINTS: %v\n%s", err, buf.String())
	}
}
