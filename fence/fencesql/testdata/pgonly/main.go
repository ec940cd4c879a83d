// Command pgonly is a program that uses only fence and fencesql, with
// PostgreSQL: TestLightDependencies checks what it links.
package main

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencesql"
)

func main() {
	db, err := sql.Open("pgx", "postgres://127.0.0.1/app")
	if err != nil {
		log.Fatal(err)
	}
	g, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Observer: fence.NewSlogObserver(nil)})
	if err != nil {
		log.Fatal(err)
	}
	_ = g.Migrate(context.Background())
}
