package resendsim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resend/resend-go/v3"

	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/resendsim"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// newClient points resend-go at baseURL: its Client.BaseURL is exported,
// and must end in "/" because the SDK resolves relative paths ("emails")
// against it; through keybrake it is http://127.0.0.1:8080/resend/.
func newClient(tb testing.TB, baseURL, key string) *resend.Client {
	tb.Helper()
	c := resend.NewCustomClient(&http.Client{Timeout: 10 * time.Second}, key)
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/") + "/")
	if err != nil {
		tb.Fatal(err)
	}
	c.BaseURL = u
	return c
}

func mustServer(tb testing.TB) (*resendsim.Server, *resend.Client, string) {
	tb.Helper()
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	sim := resendsim.New(resendsim.Options{Now: clk.Now})
	ts := httptest.NewServer(sim)
	tb.Cleanup(ts.Close)
	return sim, newClient(tb, ts.URL, resendsim.DefaultAPIKey), ts.URL
}

func email(to ...string) *resend.SendEmailRequest {
	return &resend.SendEmailRequest{From: "Acme <billing@example.com>", To: to, Subject: "Your invoice", Text: "hi"}
}

func TestSendAndLifecycle(t *testing.T) {
	sim, rs, _ := mustServer(t)
	sent, err := rs.Emails.Send(email("a@x.com", "b@x.com"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		after time.Duration
		event string
	}{{0, "queued"}, {time.Second, "sent"}, {2 * time.Second, "delivered"}} {
		sim.Advance(st.after)
		got, err := rs.Emails.Get(sent.Id)
		if err != nil {
			t.Fatal(err)
		}
		if got.LastEvent != st.event || len(got.To) != 2 {
			t.Errorf("after %s: %s, want %s", st.after, got.LastEvent, st.event)
		}
	}
	if b := sim.Billed(); b.Emails != 1 || b.Recipients != 2 {
		t.Errorf("billed = %+v", b)
	}
	list, err := rs.Emails.List()
	if err != nil || len(list.Data) != 1 {
		t.Errorf("list = %+v %v", list, err)
	}
	domains, err := rs.Domains.List()
	if err != nil || len(domains.Data) != 2 {
		t.Fatalf("domains = %+v %v", domains, err)
	}
	if _, err := rs.Domains.Get(domains.Data[0].Id); err != nil {
		t.Error(err)
	}
}

func TestErrors(t *testing.T) {
	sim, rs, base := mustServer(t)
	for name, tt := range map[string]struct {
		client *resend.Client
		req    *resend.SendEmailRequest
		want   string
	}{
		"WrongKey":       {newClient(t, base, "re_wrong"), email("a@x.com"), "API key is invalid"},
		"UnverifiedFrom": {rs, &resend.SendEmailRequest{From: "a@unverified.com", To: []string{"a@x.com"}, Subject: "s"}, "domain is not verified"},
		"NoSubject":      {rs, &resend.SendEmailRequest{From: "a@example.com", To: []string{"a@x.com"}}, "Missing `subject` field"},
		"BadTo":          {rs, email("not an address"), "Invalid `to` field"},
	} {
		_, err := tt.client.Emails.Send(tt.req)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tt.want)
		}
	}
	if _, err := rs.ApiKeys.List(); err == nil {
		t.Error("api-keys answered; the simulator serves only what keybrake proxies")
	}
	if n := len(sim.GroundTruth().Emails); n != 0 {
		t.Errorf("%d emails created by refused requests", n)
	}
}

func TestBatchAllOrNothing(t *testing.T) {
	sim, rs, _ := mustServer(t)
	good := []*resend.SendEmailRequest{email("a@x.com"), email("b@x.com")}
	out, err := rs.Batch.Send(good)
	if err != nil || len(out.Data) != 2 {
		t.Fatalf("batch = %+v %v", out, err)
	}
	bad := []*resend.SendEmailRequest{email("c@x.com"), {From: "a@unverified.com", To: []string{"d@x.com"}, Subject: "s"}}
	if _, err := rs.Batch.Send(bad); err == nil {
		t.Fatal("a batch with an unverified sender was accepted")
	}
	if b := sim.Billed(); b.Emails != 2 {
		t.Errorf("strict batch sent part of a bad batch: %+v", b)
	}
	out, err = rs.Batch.SendWithOptions(context.Background(), bad, &resend.BatchSendEmailOptions{BatchValidation: resend.BatchValidationPermissive})
	if err != nil || len(out.Data) != 1 || len(out.Errors) != 1 || out.Errors[0].Index != 1 {
		t.Fatalf("permissive batch = %+v %v", out, err)
	}
	if b := sim.Billed(); b.Emails != 3 {
		t.Errorf("billed = %+v", b)
	}
}

func TestIdempotency(t *testing.T) {
	sim, rs, _ := mustServer(t)
	ctx := context.Background()
	opts := &resend.SendEmailOptions{IdempotencyKey: "welcome/user-42"}
	first, err := rs.Emails.SendWithOptions(ctx, email("a@x.com"), opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := rs.Emails.SendWithOptions(ctx, email("a@x.com"), opts)
	if err != nil || again.Id != first.Id {
		t.Fatalf("replay = %v %v, want %s", again, err, first.Id)
	}
	if _, err := rs.Emails.SendWithOptions(ctx, email("other@x.com"), opts); err == nil || !strings.Contains(err.Error(), "different request payload") {
		t.Errorf("other body: %v", err)
	}
	if _, err := rs.Emails.SendWithOptions(ctx, email("a@x.com"), &resend.SendEmailOptions{IdempotencyKey: strings.Repeat("k", 257)}); err == nil {
		t.Error("a 257-character key was accepted")
	}
	sim.Advance(24 * time.Hour)
	later, err := rs.Emails.SendWithOptions(ctx, email("a@x.com"), opts)
	if err != nil || later.Id == first.Id {
		t.Errorf("after 24 h the key should be forgotten: %v %v", later, err)
	}
	if b := sim.Billed(); b.Emails != 2 {
		t.Errorf("billed = %+v, want 2", b)
	}
}

func TestCutAfterThenRetrySendsOnce(t *testing.T) {
	sim, rs, _ := mustServer(t)
	if _, err := sim.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.CutAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	opts := &resend.SendEmailOptions{IdempotencyKey: "k1"}
	if _, err := rs.Emails.SendWithOptions(context.Background(), email("a@x.com"), opts); err == nil {
		t.Fatal("the cut request succeeded")
	}
	got, err := rs.Emails.SendWithOptions(context.Background(), email("a@x.com"), opts)
	if err != nil {
		t.Fatal(err)
	}
	g := sim.GroundTruth()
	if len(g.Emails) != 1 || g.Emails[0].ID != got.Id {
		t.Errorf("ground truth = %+v, want one email %s", g.Emails, got.Id)
	}
}

func TestConcurrentSameKey(t *testing.T) {
	sim, rs, _ := mustServer(t)
	hold, fired := make(chan struct{}), make(chan string, 1)
	if _, err := sim.AddFault(simfault.Fault{Path: "/emails", Mode: simfault.Latency, Count: 1, Wait: hold, Fired: fired}); err != nil {
		t.Fatal(err)
	}
	opts := &resend.SendEmailOptions{IdempotencyKey: "k2"}
	done := make(chan error, 1)
	go func() {
		_, err := rs.Emails.SendWithOptions(context.Background(), email("a@x.com"), opts)
		done <- err
	}()
	<-fired
	_, err := rs.Emails.SendWithOptions(context.Background(), email("a@x.com"), opts)
	if err == nil || !strings.Contains(err.Error(), "still in progress") {
		t.Errorf("concurrent retry: %v", err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b := sim.Billed(); b.Emails != 1 {
		t.Errorf("billed = %+v", b)
	}
}

func TestScheduledCancel(t *testing.T) {
	sim, rs, _ := mustServer(t)
	req := email("a@x.com")
	req.ScheduledAt = sim.Now().Add(time.Hour).Format(time.RFC3339)
	sent, err := rs.Emails.Send(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Emails.Update(&resend.UpdateEmailRequest{Id: sent.Id, ScheduledAt: sim.Now().Add(2 * time.Hour).Format(time.RFC3339)}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Emails.Cancel(sent.Id); err != nil {
		t.Fatal(err)
	}
	sim.Advance(3 * time.Hour)
	got, err := rs.Emails.Get(sent.Id)
	if err != nil || got.LastEvent != "canceled" {
		t.Errorf("got %+v %v", got, err)
	}
	if _, err := rs.Emails.Cancel(sent.Id); err == nil {
		t.Error("canceled twice")
	}
	if b := sim.Billed(); b.Emails != 0 {
		t.Errorf("billed = %+v", b)
	}
}

func TestConcurrentSendsAllCounted(t *testing.T) {
	sim, rs, _ := mustServer(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rs.Emails.Send(email("a@x.com"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if b := sim.Billed(); b.Emails != 200 {
		t.Errorf("billed = %+v", b)
	}
}
