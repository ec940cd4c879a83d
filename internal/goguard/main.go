// Command goguard makes one fenced write with the Go guards, for the
// interop tests of the Python and TypeScript SDKs: a Go writer and one in
// another language on one scope must see each other's tokens (and
// sequences).
//
//	goguard pg DSN TABLE SCOPE TOKEN
//	goguard redis ADDR PREFIX SCOPE TOKEN KEY VALUE
//
// TOKEN may be TOKEN:SEQUENCE, a write with a sequence (fence.WithSequence).
// It prints {"accepted":true}, {"stale":true,"highest":"N"} or
// {"duplicate":true,"last":"N"}, and exits 1 on any other error.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/fence/fencesql"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "goguard:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	ctx := context.Background()
	var err error
	switch {
	case len(args) == 5 && args[0] == "pg":
		err = pg(ctx, args[1], args[2], args[3], args[4])
	case len(args) == 7 && args[0] == "redis":
		err = rds(ctx, args[1], args[2], args[3], args[4], args[5], args[6])
	default:
		return errors.New("usage: goguard pg DSN TABLE SCOPE TOKEN | redis ADDR PREFIX SCOPE TOKEN KEY VALUE")
	}
	out := map[string]any{"accepted": true}
	if stale, ok := errors.AsType[*fence.StaleTokenError](err); ok {
		out = map[string]any{"stale": true, "highest": strconv.FormatUint(stale.Highest, 10)}
	} else if dup, ok := errors.AsType[*fence.DuplicateError](err); ok {
		out = map[string]any{"duplicate": true, "last": strconv.FormatUint(dup.Last, 10)}
	} else if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// parseToken reads TOKEN or TOKEN:SEQUENCE, and puts the sequence in ctx.
func parseToken(ctx context.Context, tok string) (context.Context, uint64, error) {
	tok, seq, sequenced := strings.Cut(tok, ":")
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || !sequenced {
		return ctx, token, err
	}
	q, err := strconv.ParseUint(seq, 10, 64)
	return fence.WithSequence(ctx, q), token, err
}

func pg(ctx context.Context, dsn, table, scope, tok string) error {
	ctx, token, err := parseToken(ctx, tok)
	if err != nil {
		return err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	g, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Table: table})
	if err != nil {
		return err
	}
	if err := g.Migrate(ctx); err != nil {
		return err
	}
	return g.Do(ctx, scope, token, func(context.Context, *sql.Tx) error { return nil })
}

func rds(ctx context.Context, addr, prefix, scope, tok, key, value string) error {
	ctx, token, err := parseToken(ctx, tok)
	if err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	g, err := fenceredis.New(c, fenceredis.Config{Prefix: prefix})
	if err != nil {
		return err
	}
	return g.Set(ctx, scope, token, key, value, 0)
}
