package rejections

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var errDenied = errors.New("denied")

// wired marks an error as the caller gets it.
type wired struct{ err error }

func (w wired) Error() string { return "wire: " + w.err.Error() }
func (w wired) Unwrap() error { return w.err }

// leaderClient is the leader's RejectionService as a forwarding node calls
// it: it answers with what it was asked and the headers it got.
type leaderClient struct {
	fencedv1connect.UnimplementedRejectionServiceHandler
	headers []http.Header
}

func (c *leaderClient) ReportRejections(_ context.Context, req *connect.Request[fencedv1.ReportRejectionsRequest]) (*connect.Response[fencedv1.ReportRejectionsResponse], error) {
	c.headers = append(c.headers, req.Header())
	return connect.NewResponse(&fencedv1.ReportRejectionsResponse{Recorded: 100}), nil
}

func (c *leaderClient) ListRejections(_ context.Context, req *connect.Request[fencedv1.ListRejectionsRequest]) (*connect.Response[fencedv1.ListRejectionsResponse], error) {
	c.headers = append(c.headers, req.Header())
	return connect.NewResponse(&fencedv1.ListRejectionsResponse{Total: 100}), nil
}

// testService is a Service on a node that leads (leader nil) or follows
// leader, whose callers may read and report anything but "secret/".
func testService(t *testing.T, leader fencedv1connect.RejectionServiceClient) (*Service, *[]string) {
	b, _ := newTestBook(t)
	var forwards []string
	v := &Service{
		Book: b, Rules: strictRules{},
		Wire: func(err error) error { return wired{err} },
		MayReport: func(_ context.Context, scope string) error {
			if scope == "secret/" {
				return errDenied
			}
			return nil
		},
		MayRead: func(_ context.Context, prefix string) error {
			if prefix == "secret/" {
				return errDenied
			}
			return nil
		},
		Record: func(ctx context.Context, rs []*fencedv1.StaleRejection) uint64 {
			return b.Record(ctx, rs, unresolved, func(*fencedv1.Rejection) {})
		},
		Leader: func(context.Context, http.Header) fencedv1connect.RejectionServiceClient { return leader },
		Forward: func(ctx context.Context, call func(context.Context) error) error {
			forwards = append(forwards, "forwarded")
			return call(ctx)
		},
		Name: func(_ context.Context, h http.Header) { h.Set("Forwarded-By", "node-2") },
	}
	if leader == nil {
		v.Leader = func(context.Context, http.Header) fencedv1connect.RejectionServiceClient { return nil }
	}
	return v, &forwards
}

func report(scopes ...string) *connect.Request[fencedv1.ReportRejectionsRequest] {
	req := &fencedv1.ReportRejectionsRequest{}
	for _, s := range scopes {
		req.Rejections = append(req.Rejections, &fencedv1.StaleRejection{Scope: s, PresentedToken: 1, HighestToken: 2})
	}
	return connect.NewRequest(req)
}

// The leader records a report whole, once every entry is valid and the
// caller may report all of them; the refusals are counted and answered
// through Wire.
func TestServiceReport(t *testing.T) {
	v, forwards := testService(t, nil)
	ctx := context.Background()
	if _, err := v.ReportRejections(ctx, report("a/", "bad")); !errors.As(err, new(wired)) || !errors.Is(err, errBad) {
		t.Errorf("invalid report: %v, want the rules' error through Wire", err)
	}
	if _, err := v.ReportRejections(ctx, report("a/", "secret/")); !errors.As(err, new(wired)) || !errors.Is(err, errDenied) {
		t.Errorf("report beyond the caller's permission: %v, want denied through Wire", err)
	}
	resp, err := v.ReportRejections(ctx, report("a/", "b/"))
	if err != nil || resp.Msg.GetRecorded() != 2 {
		t.Fatalf("report: %v, %v; want 2 recorded", resp, err)
	}
	if _, total := v.Book.List("", 10); total != 2 {
		t.Errorf("book total %d, want 2: only the accepted report", total)
	}
	for o, want := range map[Outcome]float64{Invalid: 1, Denied: 1, Recorded: 1} {
		if got := testutil.ToFloat64(v.Book.reports.WithLabelValues(string(o))); got != want {
			t.Errorf("reports %s = %v, want %v", o, got, want)
		}
	}
	if len(*forwards) != 0 {
		t.Errorf("the leader forwarded %d calls", len(*forwards))
	}
}

// A node that does not lead forwards a report or a list it accepts to the
// leader, named as its own (Name), and hands back the leader's answer;
// it checks them first.
func TestServiceForwards(t *testing.T) {
	leader := &leaderClient{}
	v, forwards := testService(t, leader)
	ctx := context.Background()
	if _, err := v.ReportRejections(ctx, report("bad")); !errors.Is(err, errBad) {
		t.Errorf("invalid report: %v", err)
	}
	if _, err := v.ListRejections(ctx, connect.NewRequest(&fencedv1.ListRejectionsRequest{Prefix: "secret/"})); !errors.Is(err, errDenied) {
		t.Errorf("list beyond the caller's permission: %v", err)
	}
	if len(leader.headers) != 0 {
		t.Fatalf("refused calls forwarded: %d", len(leader.headers))
	}
	rep, err := v.ReportRejections(ctx, report("a/"))
	if err != nil || rep.Msg.GetRecorded() != 100 {
		t.Errorf("forwarded report: %v, %v; want the leader's answer", rep, err)
	}
	list, err := v.List(ctx, &fencedv1.ListRejectionsRequest{Prefix: "a/"})
	if err != nil || list.GetTotal() != 100 {
		t.Errorf("forwarded list: %v, %v; want the leader's answer", list, err)
	}
	if len(*forwards) != 2 || len(leader.headers) != 2 {
		t.Fatalf("%d forwards, %d calls at the leader; want 2", len(*forwards), len(leader.headers))
	}
	for _, h := range leader.headers {
		if h.Get("Forwarded-By") != "node-2" {
			t.Errorf("forwarded call's headers %v: not named", h)
		}
	}
	if _, total := v.Book.List("", 10); total != 0 {
		t.Errorf("a follower recorded %d rejections", total)
	}
	v.Forward = func(context.Context, func(context.Context) error) error { return errDenied }
	if resp, err := v.ReportRejections(ctx, report("a/")); resp != nil || err != errDenied {
		t.Errorf("failed forward: %v, %v; want no answer and Forward's error", resp, err)
	}
}

// A list checks its prefix (a key) and limit before answering from the
// book.
func TestServiceList(t *testing.T) {
	v, _ := testService(t, nil)
	ctx := context.Background()
	if _, err := v.ReportRejections(ctx, report("a/1", "a/2", "b/1")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.List(ctx, &fencedv1.ListRejectionsRequest{Prefix: "bad"}); !errors.As(err, new(wired)) || !errors.Is(err, errBad) {
		t.Errorf("bad prefix: %v", err)
	}
	_, err := v.List(ctx, &fencedv1.ListRejectionsRequest{Limit: -1})
	if !errors.As(err, new(wired)) || err.Error() != "wire: bad input: limit -1 is negative" {
		t.Errorf("negative limit: %v", err)
	}
	list, err := v.List(ctx, &fencedv1.ListRejectionsRequest{Prefix: "a/", Limit: 1})
	if err != nil || len(list.GetRejections()) != 1 || list.GetRejections()[0].GetScope() != "a/2" || list.GetTotal() != 3 {
		t.Errorf("list a/ limit 1: %v, %v; want a/2, total 3", list, err)
	}
}

// relaySource serves ServeRelay of its hub as Watch.
type relaySource struct {
	fencedv1connect.UnimplementedLeaseServiceHandler
	hub *fanout.Hub
}

func (s relaySource) Watch(ctx context.Context, _ *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	return ServeRelay(ctx, s.hub, time.Second, stream)
}

// ServeRelay sends the rejections the node records, and no lease
// transitions.
func TestServeRelay(t *testing.T) {
	hub := fanout.NewHub(16, 16, func(ev lease.Event) *fencedv1.Event {
		return &fencedv1.Event{Type: fencedv1.Event_ACQUIRED, Revision: ev.Revision}
	})
	done := make(chan struct{})
	defer close(done)
	go hub.Run(done)
	_, h := fencedv1connect.NewLeaseServiceHandler(relaySource{hub: hub})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The stream's headers go with its first message: open it meanwhile.
	opened := make(chan *connect.ServerStreamForClient[fencedv1.WatchResponse], 1)
	go func() {
		stream, err := fencedv1connect.NewLeaseServiceClient(srv.Client(), srv.URL).Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Rejections: true}))
		if err != nil {
			t.Error(err)
		}
		opened <- stream
	}()
	for hub.Watching() == 0 && ctx.Err() == nil { // until the relay subscribed
		time.Sleep(time.Millisecond)
	}
	hub.Publish(lease.Event{Type: lease.Acquired, Lease: lease.Lease{Key: "k", Token: 1}, Revision: 1})
	hub.PublishRejection(rejected("r1"))
	stream := <-opened
	if stream == nil {
		return
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("relay ended: %v", stream.Err())
	}
	if ev := stream.Msg().GetEvent(); ev.GetType() != fencedv1.Event_REJECTED || ev.GetRejection().GetResource() != "r1" {
		t.Fatalf("relayed %v, want the rejection of r1 only", ev)
	}
}
