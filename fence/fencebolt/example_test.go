package fencebolt_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"go.etcd.io/bbolt"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "guard.db")
	ctx := context.Background()
	write := func(context.Context) error { return nil }

	g, err := fencebolt.Open(path, fencebolt.Config{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("write with 42:", g.Do(ctx, "orders/7", 42, write))
	g.Close()

	// The highest token survives a restart.
	g, err = fencebolt.Open(path, fencebolt.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	err = g.Do(ctx, "orders/7", 41, write)
	fmt.Println("write with 41:", err)
	fmt.Println("stale:", errors.Is(err, fence.ErrStaleToken))
	// Output:
	// write with 42: <nil>
	// write with 41: stale fencing token for scope "orders/7": presented 41, highest accepted 42
	// stale: true
}

// DoTx keeps data in the same file as the tokens, so both commit together.
func ExampleGuard_DoTx() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	g, err := fencebolt.Open(filepath.Join(dir, "store.db"), fencebolt.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()

	put := func(value string) func(tx *bbolt.Tx) error {
		return func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("objects"))
			if err != nil {
				return err
			}
			return b.Put([]byte("report"), []byte(value))
		}
	}
	fmt.Println(g.DoTx(ctx, "objects/report", 7, put("from the holder of 7")))
	fmt.Println(g.DoTx(ctx, "objects/report", 6, put("from the holder of 6")))

	_ = g.DB().View(func(tx *bbolt.Tx) error {
		fmt.Printf("%s\n", tx.Bucket([]byte("objects")).Get([]byte("report")))
		return nil
	})
	// Output:
	// <nil>
	// stale fencing token for scope "objects/report": presented 6, highest accepted 7
	// from the holder of 7
}
