package check_test

import (
	"fmt"
	"time"

	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/store"
)

// A store running without fencing accepted token 41 after 42: the checker
// reports the stale overwrite.
func ExampleStoreOrder() {
	audit := []store.AuditRecord{
		{Seq: 1, Scope: "orders/7", Token: 41, Object: "a"},
		{Seq: 2, Scope: "orders/7", Token: 42, HighestBefore: 41, Object: "b"},
		{Seq: 3, Scope: "orders/7", Token: 41, HighestBefore: 42, Object: "c"},
	}
	r := check.StoreOrder(audit)
	fmt.Println(r.Violations)
	fmt.Println(r.Examples[0])
	// Output:
	// 1
	// stale overwrite: audit seq 3, scope "orders/7", object "c": token 41 accepted after token 42 (seq 2)
}

// A read that starts after a grant returned must see it. A node that
// answers reads before it has replayed its log says "free, last token 0":
// not linearizable.
func ExampleLinearizablePerKey() {
	ms := int64(time.Millisecond)
	h := history.NewHistory([]*history.Op{
		{Worker: 0, Seq: 1, Kind: history.KindAcquire, Key: "orders/7", Owner: "w0-1", TTLMs: 1000,
			Call: 1 * ms, Return: 2 * ms, Outcome: history.OK, Token: 41},
		{Worker: 1, Seq: 1, Kind: history.KindGet, Key: "orders/7",
			Call: 3 * ms, Return: 4 * ms, Outcome: history.OK, LastToken: 0},
	})
	for _, r := range check.LinearizablePerKey(h, 10*time.Second, "") {
		fmt.Println(r.Key, r.Operations, r.Result)
	}
	// Output:
	// orders/7 2 Illegal
}
