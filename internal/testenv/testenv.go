// Package testenv finds the external services that tests run against and
// says whether the long suites run (FENCED_LONG=1).
//
// Tests that need PostgreSQL, MariaDB/MySQL, Redis, RabbitMQ or NATS
// JetStream call the helpers here.
// When a service is unreachable the test is skipped with a message, unless
// the environment variable FENCED_REQUIRE_SERVICES=1 is set (as CI does), in
// which case the test fails.
//
// Addresses default to the local services and can be overridden with
// FENCED_TEST_POSTGRES (a pgx connection string), FENCED_TEST_MYSQL (a
// go-sql-driver DSN), FENCED_TEST_REDIS (host:port), FENCED_TEST_AMQP (an
// amqp:// URL) and FENCED_TEST_NATS (a nats:// URL of a server with
// JetStream).
package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

const (
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultMySQL    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	defaultRedis    = "127.0.0.1:6379"
	defaultAMQP     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATS     = "nats://127.0.0.1:4222"
)

// PostgresURL returns the connection string of the test PostgreSQL.
func PostgresURL(t testing.TB) string {
	t.Helper()
	dsn := env("FENCED_TEST_POSTGRES", defaultPostgres)
	require(t, "PostgreSQL", "127.0.0.1:5432", "FENCED_TEST_POSTGRES")
	return dsn
}

// MySQLDSN returns the go-sql-driver DSN of the test MariaDB/MySQL.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := env("FENCED_TEST_MYSQL", defaultMySQL)
	require(t, "MariaDB/MySQL", "127.0.0.1:3306", "FENCED_TEST_MYSQL")
	return dsn
}

// RedisAddr returns host:port of the test Redis.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := env("FENCED_TEST_REDIS", defaultRedis)
	require(t, "Redis", addr, "FENCED_TEST_REDIS")
	return addr
}

// AMQPURL returns the URL of the test RabbitMQ.
func AMQPURL(t testing.TB) string {
	t.Helper()
	url := env("FENCED_TEST_AMQP", defaultAMQP)
	require(t, "RabbitMQ", "127.0.0.1:5672", "FENCED_TEST_AMQP")
	return url
}

// NATSURL returns the URL of the test NATS server (with JetStream).
func NATSURL(t testing.TB) string {
	t.Helper()
	url := env("FENCED_TEST_NATS", defaultNATS)
	require(t, "NATS", "127.0.0.1:4222", "FENCED_TEST_NATS")
	return url
}

// VersityGW returns the path of a versitygw binary (an S3 server with a
// POSIX backend) for the tests to start: FENCED_TEST_VERSITYGW, or
// versitygw on PATH. Install it with
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
func VersityGW(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FENCED_TEST_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FENCED_TEST_VERSITYGW: %v", err)
		}
		return p
	}
	p, err := exec.LookPath("versitygw")
	if err == nil {
		return p
	}
	if Required() {
		t.Fatalf("versitygw is required (FENCED_REQUIRE_SERVICES=1) but neither FENCED_TEST_VERSITYGW nor PATH has it: %v", err)
	}
	t.Skipf("versitygw not found (set FENCED_TEST_VERSITYGW or put it on PATH: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0); set FENCED_REQUIRE_SERVICES=1 to fail instead")
	return ""
}

// Required reports whether missing services fail tests instead of skipping.
func Required() bool { return os.Getenv("FENCED_REQUIRE_SERVICES") == "1" }

func require(t testing.TB, name, defaultAddr, override string) {
	t.Helper()
	if os.Getenv(override) != "" {
		return // the caller's own address; the test reports failures itself
	}
	conn, err := net.DialTimeout("tcp", defaultAddr, 2*time.Second)
	if err == nil {
		conn.Close()
		return
	}
	if Required() {
		t.Fatalf("%s is required (FENCED_REQUIRE_SERVICES=1) but unreachable at %s: %v", name, defaultAddr, err)
	}
	t.Skipf("%s unreachable at %s (%v); set FENCED_REQUIRE_SERVICES=1 to fail instead", name, defaultAddr, err)
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Long reports whether the long suites run: torture, mutants, multi-process
// cluster scenarios, browser tests and the large restarts. They run when
// FENCED_LONG=1 is set, as CI sets it; `go test ./...` without it stays
// within a few minutes on a two-core machine.
func Long() bool { return os.Getenv("FENCED_LONG") == "1" }

// SkipUnlessLong skips a long test unless FENCED_LONG=1 is set.
func SkipUnlessLong(t testing.TB) {
	t.Helper()
	if !Long() {
		t.Skip("long test: set FENCED_LONG=1 to run it")
	}
}
