package fenceamqp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencemsg/fenceamqp"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/msgtest"
	"github.com/fencedio/fenced/internal/testenv"
)

// child is a helper process running TestHelperProcess in one role.
type child struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{"FENCEMSG_HELPER=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, lines: make(chan string, 100)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

// expect returns the next line of the child that starts with prefix,
// passing the others to other.
func (c *child) expect(t *testing.T, prefix string, other func(string)) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("%s: helper exited before %q", c.cmd.Env[len(c.cmd.Env)-1], prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			if other != nil {
				other(l)
			}
		case <-timeout:
			t.Fatalf("no %q from the helper within 20s", prefix)
		}
	}
}

// TestHelperProcess is the producer and the consumers of
// TestFrozenProducerKilledConsumer, run as processes of their own. It does
// nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv("FENCEMSG_HELPER")
	if role == "" {
		return
	}
	ctx := context.Background()
	url, queue := os.Getenv("FENCEMSG_AMQP"), os.Getenv("FENCEMSG_QUEUE")
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	in := bufio.NewScanner(os.Stdin)
	switch role {
	case "producer":
		// A: publishes a1..a4, stamps a5 and waits (the parent freezes it
		// here), then publishes a5 with its old token when told to.
		c, err := client.New(client.Config{Endpoint: os.Getenv("FENCEMSG_FENCED"), Owner: "A", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lease, err := c.Acquire(ctx, os.Getenv("FENCEMSG_SCOPE"))
		if err != nil {
			t.Fatal(err)
		}
		l := fence.Sequenced(lease)
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		send := func(id string, s fencemsg.Stamp) {
			p := amqp.Publishing{Headers: amqp.Table{}, MessageId: id, DeliveryMode: amqp.Persistent}
			s.Write(fenceamqp.Table(p.Headers))
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				t.Fatalf("publish %s: %v %v", id, ok, err)
			}
		}
		for _, id := range []string{"a1", "a2", "a3", "a4"} {
			send(id, fencemsg.LeaseStamp(ctx, l))
		}
		a5 := fencemsg.LeaseStamp(ctx, l)
		fmt.Printf("stamped %d\n", lease.Token())
		in.Scan()
		send("a5", a5)
		fmt.Println("published a5")
		in.Scan() // until the parent closes stdin
	case "consumer":
		// Applies what comes; after committing FENCEMSG_CRASH_AFTER it
		// stops acking and says so (the parent kills it then).
		scopes, effects := os.Getenv("FENCEMSG_SCOPES"), os.Getenv("FENCEMSG_EFFECTS")
		sink := msgtest.AttachSink(t, scopes, effects, func(d fence.Decision) {
			fmt.Printf("stale %s %d %d\n", d.Owner, d.Presented, d.Highest)
		})
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() { in.Scan(); os.Exit(0) }() // stdin closed: stop
		crashAfter := os.Getenv("FENCEMSG_CRASH_AFTER")
		for d := range deliveries {
			apply := sink.Apply(d.MessageId, fenceamqp.Table(d.Headers))
			if d.MessageId == crashAfter {
				o, err := fenceamqp.Decide(ctx, sink.Consumer, d.Headers, apply)
				fmt.Printf("outcome %s %s %v\n", d.MessageId, o, err)
				fmt.Println("committed, not acked")
				select {}
			}
			o, err := fenceamqp.Handle(ctx, sink.Consumer, d, apply)
			fmt.Printf("outcome %s %s %v\n", d.MessageId, o, err)
		}
	}
}

var outcomeByName = map[string]fencemsg.Outcome{}

func init() {
	for o := fencemsg.Redeliver; o <= fencemsg.Refused; o++ {
		outcomeByName[o.String()] = o
	}
}

// TestFrozenProducerKilledConsumer is TestPausedProducer with real
// processes: the producer A is frozen with SIGSTOP past its TTL (its
// renewals stop with it) after it stamped a message, and a consumer is
// killed with SIGKILL between a commit and its ack.
func TestFrozenProducerKilledConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	url := testenv.AMQPURL(t)
	sink := msgtest.NewSink(t)
	scopes, effects := sink.Tables()
	srv := fencedtest.Start(t)
	ctx := context.Background()

	admin := dial(t, url)
	queue := msgtest.Name("fencemsg-")
	if _, err := admin.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ch.QueueDelete(queue, false, false, false) })
	scope := "orders/" + msgtest.Name("")
	env := []string{"FENCEMSG_AMQP=" + url, "FENCEMSG_QUEUE=" + queue, "FENCEMSG_FENCED=" + srv.URL,
		"FENCEMSG_SCOPE=" + scope, "FENCEMSG_SCOPES=" + scopes, "FENCEMSG_EFFECTS=" + effects}
	record := func(l string) {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "outcome":
			sink.Record(f[1], outcomeByName[f[2]])
		case len(f) == 4 && f[0] == "stale":
			p, _ := strconv.ParseUint(f[2], 10, 64)
			h, _ := strconv.ParseUint(f[3], 10, 64)
			sink.AddStale(fence.Decision{Owner: f[1], Presented: p, Highest: h})
		}
	}

	// A stalled consumer (in this process) will hold a3 and a4 unacked.
	stalled := dial(t, url)
	d1 := stalled.consume(t, queue, 4)
	producer := startChild(t, "producer", env...)
	producer.expect(t, "stamped", nil)
	handle := func(d amqp.Delivery) fencemsg.Outcome {
		o, err := fenceamqp.Handle(ctx, sink.Consumer, d, sink.Apply(d.MessageId, fenceamqp.Table(d.Headers)))
		if !o.Done() {
			t.Fatalf("%s: %v %v", d.MessageId, o, err)
		}
		sink.Record(d.MessageId, o)
		return o
	}
	for _, want := range []string{"a1", "a2"} {
		if m := next(t, d1); m.MessageId != want || handle(m) != fencemsg.Applied {
			t.Fatalf("stalled consumer: %s, want %s applied", m.MessageId, want)
		}
	}
	held := []amqp.Delivery{next(t, d1), next(t, d1)}
	if err := stalled.ch.Cancel(queue+"-consumer", false); err != nil {
		t.Fatal(err)
	}

	// A freezes with a5 stamped: no renewals; B gets the key after A's TTL.
	if err := producer.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := srv.Client(t, client.Config{Owner: "B"})
	leaseB, err := b.Acquire(ctx, scope, client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer leaseB.Release(ctx)
	lb := fence.Sequenced(leaseB)
	producerB := dial(t, url)
	if err := producerB.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		publish(t, producerB, queue, id, fencemsg.LeaseStamp(ctx, lb))
	}

	// A consumer process applies b1, b2, commits b3 and is killed before
	// its ack.
	c1 := startChild(t, "consumer", append(env, "FENCEMSG_CRASH_AFTER=b3")...)
	c1.expect(t, "committed, not acked", record)
	if err := c1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c1.cmd.Wait()

	// Its successor, the stalled consumer's end and A's thaw.
	c2 := startChild(t, "consumer", env...)
	stalled.c.Close()
	if err := producer.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(producer.in, "go")
	producer.expect(t, "published a5", nil)
	want := map[string]fencemsg.Outcome{"b3": fencemsg.Duplicate, "b4": fencemsg.Applied, "b5": fencemsg.Applied,
		"a3": fencemsg.Stale, "a4": fencemsg.Stale, "a5": fencemsg.Stale}
	for len(want) > 0 {
		l := c2.expect(t, "outcome", record)
		record(l)
		f := strings.Fields(l)
		if w, ok := want[f[1]]; ok && outcomeByName[f[2]] == w {
			delete(want, f[1])
		} else if outcomeByName[f[2]] != fencemsg.Redeliver {
			t.Fatalf("successor: %s, want %v", l, w)
		}
	}
	c2.in.Close()
	c2.cmd.Wait()
	for l := range c2.lines {
		record(l)
	}
	producer.in.Close()

	if held[0].MessageId != "a3" || held[1].MessageId != "a4" {
		t.Fatalf("stalled consumer held %s, %s", held[0].MessageId, held[1].MessageId)
	}
	sink.Check(t, []string{"a1", "a2", "b1", "b2", "b3", "b4", "b5"}, []string{"a3", "a4", "a5"}, "A")
	q, err := admin.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages left in the queue, want 0", q.Messages)
	}
}
