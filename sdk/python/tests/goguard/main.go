// Command goguard runs one write through a Go guard, for the Python SDK's
// interoperability tests: a Go guard and a Python guard on one scope must
// refuse each other's stale tokens.
//
//	goguard pg DSN TABLE SCOPE TOKEN [SEQUENCE]
//	goguard redis ADDR SCOPE TOKEN KEY VALUE [SEQUENCE]
//
// It prints "ok" when the write was accepted, "stale HIGHEST" when the
// token was refused as stale, "duplicate LAST" for a sequence already
// accepted, and exits 1 on any other error.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"

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
	case (len(args) == 5 || len(args) == 6) && args[0] == "pg":
		if ctx, err = withSequence(ctx, args[5:]); err != nil {
			return err
		}
		err = pg(ctx, args[1], args[2], args[3], args[4])
	case (len(args) == 6 || len(args) == 7) && args[0] == "redis":
		if ctx, err = withSequence(ctx, args[6:]); err != nil {
			return err
		}
		err = rds(ctx, args[1], args[2], args[3], args[4], args[5])
	default:
		return errors.New("usage: goguard pg DSN TABLE SCOPE TOKEN [SEQUENCE] | goguard redis ADDR SCOPE TOKEN KEY VALUE [SEQUENCE]")
	}
	if dup, ok := errors.AsType[*fence.DuplicateError](err); ok {
		fmt.Println("duplicate", dup.Last)
		return nil
	}
	if stale, ok := errors.AsType[*fence.StaleTokenError](err); ok {
		fmt.Println("stale", stale.Highest)
		return nil
	}
	if err == nil {
		fmt.Println("ok")
	}
	return err
}

func pg(ctx context.Context, dsn, table, scope, token string) error {
	tok, err := strconv.ParseUint(token, 10, 64)
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
	return g.Do(ctx, scope, tok, func(context.Context, *sql.Tx) error { return nil })
}

func rds(ctx context.Context, addr, scope, token, key, value string) error {
	tok, err := strconv.ParseUint(token, 10, 64)
	if err != nil {
		return err
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	g, err := fenceredis.New(rc, fenceredis.Config{})
	if err != nil {
		return err
	}
	return g.Set(ctx, scope, tok, key, value, 0)
}

// withSequence puts the optional sequence argument in ctx.
func withSequence(ctx context.Context, arg []string) (context.Context, error) {
	if len(arg) == 0 {
		return ctx, nil
	}
	seq, err := strconv.ParseUint(arg[0], 10, 64)
	if err != nil {
		return ctx, err
	}
	return fence.WithSequence(ctx, seq), nil
}
