package logs

import (
	"context"
	"io"
	"log"
	"log/slog"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// raftLogger is an hclog.Logger, the interface raft and raft-wal log
// through, that writes to a slog.Logger: raft's records come out in the
// server's format (JSON with fenced --log-format json), with the hclog
// name as the module attribute. Records below minLevel are dropped before
// they reach the handler, which filters further by its own level.
type raftLogger struct {
	log   *slog.Logger
	name  string
	args  []any         // ImpliedArgs
	level *atomic.Int32 // an hclog.Level, shared with the loggers made from this one
}

var _ hclog.Logger = (*raftLogger)(nil)

// NewRaftLogger returns raft's logger over l, at minLevel and above.
func NewRaftLogger(l *slog.Logger, minLevel hclog.Level) *raftLogger {
	r := &raftLogger{log: l, name: "raft", level: new(atomic.Int32)}
	r.level.Store(int32(minLevel))
	return r
}

// slogLevel maps hclog's levels onto slog's (trace below debug).
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (r *raftLogger) enabled(l hclog.Level) bool {
	return l >= hclog.Level(r.level.Load()) && r.log.Enabled(context.Background(), slogLevel(l))
}

func (r *raftLogger) Log(l hclog.Level, msg string, args ...any) {
	if l == hclog.NoLevel {
		l = hclog.Info
	}
	if l == hclog.Off || !r.enabled(l) {
		return
	}
	attrs := make([]any, 0, 2+len(r.args)+len(args))
	attrs = append(attrs, "module", r.name)
	attrs = append(attrs, r.args...)
	r.log.Log(context.Background(), slogLevel(l), msg, append(attrs, args...)...)
}

func (r *raftLogger) Trace(msg string, args ...any) { r.Log(hclog.Trace, msg, args...) }
func (r *raftLogger) Debug(msg string, args ...any) { r.Log(hclog.Debug, msg, args...) }
func (r *raftLogger) Info(msg string, args ...any)  { r.Log(hclog.Info, msg, args...) }
func (r *raftLogger) Warn(msg string, args ...any)  { r.Log(hclog.Warn, msg, args...) }
func (r *raftLogger) Error(msg string, args ...any) { r.Log(hclog.Error, msg, args...) }

func (r *raftLogger) IsTrace() bool { return r.enabled(hclog.Trace) }
func (r *raftLogger) IsDebug() bool { return r.enabled(hclog.Debug) }
func (r *raftLogger) IsInfo() bool  { return r.enabled(hclog.Info) }
func (r *raftLogger) IsWarn() bool  { return r.enabled(hclog.Warn) }
func (r *raftLogger) IsError() bool { return r.enabled(hclog.Error) }

func (r *raftLogger) ImpliedArgs() []any { return r.args }

func (r *raftLogger) With(args ...any) hclog.Logger {
	c := *r
	c.args = append(append([]any(nil), r.args...), args...)
	return &c
}

func (r *raftLogger) Name() string { return r.name }

func (r *raftLogger) Named(name string) hclog.Logger {
	c := *r
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (r *raftLogger) ResetNamed(name string) hclog.Logger {
	c := *r
	c.name = name
	return &c
}

func (r *raftLogger) SetLevel(l hclog.Level) { r.level.Store(int32(l)) }
func (r *raftLogger) GetLevel() hclog.Level  { return hclog.Level(r.level.Load()) }

// StandardLogger returns a log.Logger whose lines are records of r at
// opts.ForceLevel (Info when unset).
func (r *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(r.StandardWriter(opts), "", 0)
}

func (r *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{r: r, level: level}
}

// stdWriter turns each write, one line of a log.Logger, into a record.
type stdWriter struct {
	r     *raftLogger
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	msg := string(p)
	if n := len(msg); n > 0 && msg[n-1] == '\n' {
		msg = msg[:n-1]
	}
	w.r.Log(w.level, msg)
	return len(p), nil
}
