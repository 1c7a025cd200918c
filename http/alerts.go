package http

import (
	"context"
	"net/http"
	"time"

	"github.com/keybrake/keybrake/alert"
)

// The alert sender of a Server. Alerts are written by the store in the
// transactions that cause them; this runs alert.Sender, which delivers them,
// every AlertInterval, on every replica (leases keep them from attempting
// one delivery at once).

// initAlerts builds the sender and registers the alert metrics.
func (s *Server) initAlerts() {
	s.metrics.addAlertMetrics()
	if s.KeyMetrics {
		s.metrics.reg.MustRegister(newKeyCollector(s))
	}
	s.sender = &alert.Sender{
		Store:    s.Store,
		Client:   s.AlertClient,
		Owner:    s.ID,
		Now:      s.Now,
		Logger:   s.logger(),
		Timeout:  s.AlertTimeout,
		RetryFor: s.AlertRetryFor,
		OnFired:  s.metrics.alertFired,
		OnAttempt: func(outcome string) {
			s.metrics.alertAttempt(outcome)
		},
		PublicURL: s.publicURL, // approval_link.go
	}
}

// startAlerts starts the sender loop if AlertInterval is set.
func (s *Server) startAlerts() {
	if s.AlertInterval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		<-s.stop
		cancel()
	}()
	go func() {
		defer s.wg.Done()
		s.sender.Run(ctx, s.AlertInterval)
	}()
}

// SendAlerts runs one pass of the alert sender: the time-driven rules, new
// alerts logged and counted, due deliveries attempted and recorded. The
// background loop calls it every AlertInterval; tests call it directly.
func (s *Server) SendAlerts(ctx context.Context) error {
	return s.sender.Tick(ctx)
}

// defaultAlertClient does not follow redirects: a webhook answers itself.
func defaultAlertClient() *http.Client {
	return &http.Client{
		Transport:     newTransport(),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       time.Minute,
	}
}
