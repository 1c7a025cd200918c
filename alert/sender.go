package alert

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// Defaults of a Sender.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultRetryFor = 24 * time.Hour
	DefaultParallel = 8
)

// Store is what the sender needs of keybrake's store.
type Store interface {
	keybrake.AlertService
	FindKeyByID(ctx context.Context, id string) (*keybrake.Key, error)
	FindApprovalByID(ctx context.Context, id string) (*keybrake.Approval, error)
	LinkSecret(ctx context.Context, name string) ([]byte, error)
}

// Sender delivers the outbox. Each Tick, in this order:
//
//	ScanAlerts      write the time-driven alerts due now (expiring keys, uncertain reservations)
//	ClaimAlerts     log and count each new alert once, across replicas
//	Lease           take due pending deliveries (lease = Timeout + a margin)
//	attempt         POST the signed body; 2xx is delivered
//	Record          pending --2xx--> delivered
//	                pending --failed, RetryFor not over--> pending at now + Backoff(attempts)
//	                pending --failed, RetryFor over--> failed
//
// A replica that dies holding a lease leaves the delivery to be taken again
// when the lease ends; an attempt whose record finds the lease lost is
// dropped (the delivery was leased by another sender, which records its own
// attempt). A delivery may therefore reach an endpoint more than once, always
// with the same event id: receivers deduplicate on Keybrake-Event-Id.
type Sender struct {
	Store  Store
	Client *http.Client // default: no redirects, Timeout per attempt
	Owner  string       // names this sender in leases; required
	Now    func() time.Time
	Logger *slog.Logger

	Timeout  time.Duration // one attempt; default DefaultTimeout
	RetryFor time.Duration // from the first attempt; default DefaultRetryFor
	// Backoff returns the wait after the n-th failed attempt; default
	// Backoff.
	Backoff  func(n int) time.Duration
	Parallel int // attempts at once; default DefaultParallel

	// OnFired is called once per new alert (across replicas); OnAttempt
	// after each recorded attempt with the delivery's new state, or
	// "retry" for a failure that will be retried.
	OnFired   func(a *keybrake.Alert)
	OnAttempt func(outcome string)

	// PublicURL returns the base URL people reach the admin listener at
	// (e.g. https://keybrake.example); approval_required alerts carry the
	// console link and signed approve/deny links under it. nil or "": the
	// alert names the approval without links.
	PublicURL func() string
}

// Backoff is the default retry schedule: 30 s after the first failure,
// doubling, at most an hour apart; about 30 attempts in 24 hours.
func Backoff(n int) time.Duration {
	d := 30 * time.Second
	for i := 1; i < n && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

func (s *Sender) defaults() {
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.RetryFor <= 0 {
		s.RetryFor = DefaultRetryFor
	}
	if s.Backoff == nil {
		s.Backoff = Backoff
	}
	if s.Parallel <= 0 {
		s.Parallel = DefaultParallel
	}
	if s.Client == nil {
		s.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
}

// Run ticks every interval until ctx ends.
func (s *Sender) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.Logger.Warn("alert sender", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick scans, claims and delivers what is due now, and returns once every
// attempt it started is recorded. It returns the first store error.
func (s *Sender) Tick(ctx context.Context) error {
	s.defaults()
	now := s.Now()
	if _, err := s.Store.ScanAlerts(ctx, now); err != nil {
		return fmt.Errorf("scan alerts: %w", err)
	}
	if err := s.claim(ctx); err != nil {
		return err
	}
	ds, err := s.Store.LeaseAlertDeliveries(ctx, s.Owner, now, now.Add(s.Timeout+time.Minute), 100)
	if err != nil {
		return fmt.Errorf("lease deliveries: %w", err)
	}
	keys := &keyCache{store: s.Store, keys: map[string]*keybrake.Key{}}
	sem := make(chan struct{}, s.Parallel)
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.deliver(ctx, d, keys)
		}()
	}
	wg.Wait()
	return nil
}

// claim logs and counts the alerts no sender has seen yet.
func (s *Sender) claim(ctx context.Context) error {
	for {
		as, err := s.Store.ClaimAlerts(ctx, 100)
		if err != nil {
			return fmt.Errorf("claim alerts: %w", err)
		}
		for _, a := range as {
			s.Logger.Warn("alert fired", "alert", a.ID, "kind", a.Kind, "key", a.KeyID, "alert_key", a.AlertKey)
			if s.OnFired != nil {
				s.OnFired(a)
			}
		}
		if len(as) < 100 {
			return nil
		}
	}
}

// deliver attempts d once and records the attempt.
func (s *Sender) deliver(ctx context.Context, d *keybrake.AlertDelivery, keys *keyCache) {
	status, latency, aerr := s.attempt(ctx, d, keys.get(ctx, d.Alert.KeyID))
	at := s.Now()
	args := keybrake.AttemptArgs{DeliveryID: d.ID, Owner: s.Owner, At: at, Status: status, Latency: latency, State: keybrake.DeliveryDelivered}
	outcome := keybrake.DeliveryDelivered
	if aerr != nil {
		args.Error = aerr.Error()
		args.State, args.NextAt, outcome = s.retry(d, at)
	}
	if _, err := s.Store.RecordAlertAttempt(ctx, args); err != nil {
		s.Logger.Warn("alert attempt not recorded", "delivery", d.ID, "err", err)
		return
	}
	if s.OnAttempt != nil {
		s.OnAttempt(outcome)
	}
	if outcome == keybrake.DeliveryFailed {
		s.Logger.Error("alert delivery failed for good", "delivery", d.ID, "alert", d.AlertID, "endpoint", d.EndpointID, "attempts", d.Attempts+1, "err", aerr)
	}
}

// retry decides what follows a failed attempt at `at`: another attempt
// after the backoff (the last one exactly when the retry period ends), or
// failure once the period is over.
func (s *Sender) retry(d *keybrake.AlertDelivery, at time.Time) (state string, next time.Time, outcome string) {
	first := at
	if d.FirstAttemptAt != nil {
		first = *d.FirstAttemptAt
	}
	deadline := first.Add(s.RetryFor)
	if !at.Before(deadline) {
		return keybrake.DeliveryFailed, time.Time{}, keybrake.DeliveryFailed
	}
	next = at.Add(s.Backoff(d.Attempts + 1))
	if next.After(deadline) {
		next = deadline
	}
	return keybrake.DeliveryPending, next, "retry"
}

// attempt POSTs d's body to its endpoint and returns the status (0 for no
// answer), the time it took, and why it failed if it did.
func (s *Sender) attempt(ctx context.Context, d *keybrake.AlertDelivery, k *keybrake.Key) (int, time.Duration, error) {
	ap, err := s.approvalInfo(ctx, d)
	if err != nil {
		return 0, 0, err
	}
	body, err := BodyWith(d.Endpoint.Format, d.Alert, k, ap)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Endpoint.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("bad endpoint URL: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "keybrake-alerts/1")
	req.Header.Set(EventIDHeader, d.Alert.ID)
	req.Header.Set(SignatureHeader, Sign(d.Endpoint.Secret, s.Now(), body))
	start := time.Now() // latency is measured, not scheduled: the real clock
	resp, err := s.Client.Do(req)
	latency := time.Since(start)
	if err != nil {
		return 0, latency, fmt.Errorf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, latency, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, latency, nil
}

// keyCache looks each key up once per tick.
type keyCache struct {
	store Store
	mu    sync.Mutex
	keys  map[string]*keybrake.Key
}

func (c *keyCache) get(ctx context.Context, id string) *keybrake.Key {
	if id == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.keys[id]; ok {
		return k
	}
	k, err := c.store.FindKeyByID(ctx, id)
	if err != nil {
		k = nil
	}
	c.keys[id] = k
	return k
}

// approvalInfo returns what d's approval_required alert says about its
// approval, with links signed for d's endpoint; nil for other alerts or an
// approval that is gone. A store error fails the attempt, to be retried.
func (s *Sender) approvalInfo(ctx context.Context, d *keybrake.AlertDelivery) (*ApprovalInfo, error) {
	a := d.Alert
	if a.Kind != keybrake.AlertApproval || a.ApprovalID == "" {
		return nil, nil
	}
	ap, err := s.Store.FindApprovalByID(ctx, a.ApprovalID)
	if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("find approval %s: %w", a.ApprovalID, err)
	}
	info := &ApprovalInfo{ID: ap.ID, KeyID: ap.KeyID, Operation: ap.Operation, Method: ap.Method, Path: ap.Path,
		Amount: ap.Amount, Currency: ap.Currency, USD: ap.Micros, IdempotencyKey: ap.IdempotencyKey,
		Reason: ap.Reason, Params: ap.Params, ExpiresAt: ap.ExpiresAt}
	base := ""
	if s.PublicURL != nil {
		base = strings.TrimRight(s.PublicURL(), "/")
	}
	if base == "" {
		return info, nil
	}
	info.ConsoleURL = base + "/console/approvals/" + ap.ID
	secret, err := s.Store.LinkSecret(ctx, keybrake.LinkSecretApprovals)
	if err != nil {
		return nil, fmt.Errorf("approval link secret: %w", err)
	}
	info.ApproveURL = ApprovalLink(secret, base, ap.ID, LinkApprove, d.EndpointID, ap.ExpiresAt)
	info.DenyURL = ApprovalLink(secret, base, ap.ID, LinkDeny, d.EndpointID, ap.ExpiresAt)
	return info, nil
}
