package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ctx := context.Background()
	recs := make([]Recorder, 2)
	for i := 1; i <= 100; i++ {
		recs[i%2].Op(ctx, time.Duration(i)*time.Millisecond, nil)
	}
	recs[0].Op(ctx, -1, nil) // counted, no latency
	boom := errors.New("boom")
	recs[1].Op(ctx, time.Second, boom)
	recs[1].Fail(ctx, errors.New("second"))

	res := Summarize(recs, 2*time.Second)
	if res.Ops != 101 || res.Errors != 2 || res.FirstError != "boom" || res.OpsPerSec != 50.5 || res.Seconds != 2 {
		t.Fatalf("counts %+v", res)
	}
	near := func(got, want float64) bool { return got <= want && got >= want*0.98 }
	if !near(res.P50Ms, 51) || !near(res.P90Ms, 91) || !near(res.P99Ms, 100) || res.MaxMs != 100 || res.MeanMs != 50.5 {
		t.Fatalf("latencies %+v, want p50 51 p90 91 p99 100 max 100 mean 50.5 (quantiles within 2%% below)", res)
	}
}

func TestCancellationIsNoError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var r Recorder
	r.Op(ctx, 0, context.Canceled) // not cancelled yet: a real error
	cancel()
	r.Op(ctx, 0, context.Canceled)
	r.Fail(ctx, errors.Join(errors.New("call"), context.Canceled))
	r.Fail(ctx, context.DeadlineExceeded) // not ctx's error
	if res := Summarize([]Recorder{r}, time.Second); res.Errors != 2 || res.Ops != 0 {
		t.Fatalf("%+v, want 2 errors", res)
	}
}

func TestRunStopsAtTheDeadlineAndOnCancel(t *testing.T) {
	var calls [3]atomic.Int64
	loops := make([]func(context.Context), 3)
	for i := range loops {
		loops[i] = func(context.Context) { calls[i].Add(1); time.Sleep(time.Millisecond) }
	}
	if took := Run(context.Background(), 30*time.Millisecond, loops); took < 30*time.Millisecond {
		t.Fatalf("run took %v, want at least the 30ms asked", took)
	}
	for i := range calls {
		if calls[i].Load() == 0 {
			t.Fatalf("loop %d never ran", i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var n atomic.Int64
	Run(ctx, time.Hour, []func(context.Context){func(context.Context) { n.Add(1) }})
	if n.Load() != 0 {
		t.Fatalf("a cancelled run made %d calls", n.Load())
	}
}
