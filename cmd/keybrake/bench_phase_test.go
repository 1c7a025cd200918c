package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchOpenLoopCountsServerStalls: in the open loop a request that waits
// because every client is still waiting for an answer is counted from its
// scheduled time, not from when a client took it (coordinated omission):
// only the load generator's own timer lateness is left out (releasedAt).
func TestBenchOpenLoopCountsServerStalls(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 1 {
			<-release // the first request stalls until the schedule is over
		}
	}))
	defer srv.Close()
	b := &bench{client: srv.Client()}
	// The stalled request goes once the 200 ms schedule is over; the 19
	// requests scheduled behind it waited for the one client.
	time.AfterFunc(250*time.Millisecond, func() { close(release) })
	get := func(base, key string) *http.Request {
		req, _ := http.NewRequest("GET", base+"/", nil)
		return req
	}
	s := b.phase(context.Background(), target{path: pathDirect, bases: []string{srv.URL}, keys: []string{""}},
		get, 1, 200*time.Millisecond, 0, 100)
	if s.Requests != 20 || s.Errors != 0 {
		t.Fatalf("sample %+v", s)
	}
	// The request scheduled at 100 ms was sent after the stall ended (250
	// ms): ≥ 150 ms counted. Counted from when the client took it, it would
	// be about a millisecond.
	if s.P50 < 100_000 {
		t.Fatalf("p50 %.0f µs: the wait for a client behind a stalled request was not counted", s.P50)
	}
}

func TestReleasedAt(t *testing.T) {
	at := time.Unix(100, 0)
	if got := releasedAt(at, at.Add(-time.Millisecond)); !got.Equal(at) {
		t.Fatalf("woke before at: %v", got)
	}
	if got := releasedAt(at, at.Add(700*time.Microsecond)); !got.Equal(at.Add(700 * time.Microsecond)) {
		t.Fatalf("overslept: %v", got)
	}
}
