package fences3_test

import (
	"context"
	"errors"
	"log"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fences3"
)

// The examples are compiled, not run: they need an S3 server. The tests
// run the same calls against versitygw.

func ExampleBucket_PutLease() {
	ctx := context.Background()
	var c *client.Client // a fenced client
	var s3c *s3.Client   // e.g. s3.NewFromConfig(cfg) with config.LoadDefaultConfig
	guard, err := fences3.New(s3c, "reports", fences3.Config{})
	if err != nil {
		log.Fatal(err)
	}
	lease, err := c.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	err = guard.PutLease(ctx, lease, "reports/daily.csv", []byte("day,total\n1,42\n"),
		&fences3.PutOptions{ContentType: "text/csv"})
	if errors.Is(err, fence.ErrStaleToken) {
		return // a newer holder wrote the report; PutLease has called lease.MarkLost
	}
	if err != nil {
		log.Fatal(err)
	}
	o, err := guard.Get(ctx, "reports/daily.csv")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s, written under token %d", o.Data, o.Token)
}

// A scope spanning many objects: the data goes to new keys that nothing
// overwrites, then one manifest naming them is written through the guard.
// Readers read the manifest; a stale writer's data is never named by it.
func ExampleBucket_PutData() {
	ctx := context.Background()
	var guard *fences3.Bucket
	var lease fence.Lease // holds "tables/orders"
	var parts [][]byte
	var keys []string
	for _, p := range parts {
		k := fences3.DataKey("tables/orders/data/", lease.Token())
		if err := guard.PutDataLease(ctx, lease, k, p, nil); err != nil {
			log.Fatal(err)
		}
		keys = append(keys, k)
	}
	// The commit: stale writers are refused here.
	err := guard.PutLease(ctx, lease, "tables/orders/manifest", []byte(strings.Join(keys, "\n")), nil)
	if err != nil {
		log.Fatal(err)
	}
}
