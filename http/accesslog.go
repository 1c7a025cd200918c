package http

import (
	"log/slog"
	"net/http"
	"time"
)

// logAccess writes the access log line of one proxied request, at info:
// what was asked, what keybrake decided, what it cost and how long it took.
// It never carries a secret: the key is named by its ID, the request by
// keybrake's request ID, and neither the vault key, the Authorization
// header nor the body is logged.
func (p *proxy) logAccess(r *http.Request, c *call, decision, reason string, status int) {
	l := p.s.logger()
	if !l.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", c.requestID),
		slog.String("vendor", c.v.Name()),
		slog.String("method", r.Method),
		slog.String("operation", opName(c)),
		slog.String("decision", decision),
		slog.Duration("latency", p.s.Now().Sub(c.start).Round(time.Microsecond)),
		slog.String("client", p.s.clientAddr(r).String()),
	}
	if c.key != nil {
		attrs = append(attrs, slog.String("key_id", c.key.ID))
	}
	if reason != "" {
		attrs = append(attrs, slog.String("reason", reason))
	}
	if status != 0 {
		attrs = append(attrs, slog.Int("upstream_status", status))
	}
	if c.priced {
		attrs = append(attrs, slog.Int64("amount", c.cost.Amount), slog.String("currency", c.cost.Currency), slog.Int64("usd_micros", int64(c.cost.Micros)))
	}
	if c.rsv != nil {
		attrs = append(attrs, slog.String("reservation_id", c.rsv.ID))
	}
	l.LogAttrs(r.Context(), slog.LevelInfo, "proxied request", attrs...)
}
