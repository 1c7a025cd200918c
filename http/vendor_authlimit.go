package http

import (
	"net/http"
	"strconv"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/resend"
	"github.com/keybrake/keybrake/twilio"
)

// rateLimitWriter is implemented by a Vendor whose own rate-limit answer
// differs from its refusal of a cap: a client locked out after failed
// authentications is told to wait, in the vendor's shape, so its SDK
// treats it as the vendor's own 429.
type rateLimitWriter interface {
	WriteRateLimit(w http.ResponseWriter, msg string)
}

// checkVendorAuthLimit is checkAuthLimit on a vendor's route: the 429 of a
// lockout in v's error shape, with Retry-After. It returns false when the
// request was refused.
func (s *Server) checkVendorAuthLimit(w http.ResponseWriter, r *http.Request, v Vendor) bool {
	secs, msg, locked := s.authLockout(r)
	if !locked {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	if rl, ok := v.(rateLimitWriter); ok {
		rl.WriteRateLimit(w, msg)
		return false
	}
	v.WriteError(w, r, &keybrake.Error{Code: keybrake.EOVERCAP, Message: msg})
	return false
}

// WriteRateLimit answers as Stripe does when a client sends too many
// requests: 429 rate_limit, not to be retried at once.
func (v *stripeVendor) WriteRateLimit(w http.ResponseWriter, msg string) {
	w.Header().Set("Stripe-Should-Retry", "false")
	writeJSON(w, http.StatusTooManyRequests, stripeError{Error: stripeErrorBody{Type: "invalid_request_error", Code: "rate_limit", Message: msg}})
}

// WriteRateLimit answers as Twilio does when a client sends too many
// requests: 429, code 20429.
func (v *twilioVendor) WriteRateLimit(w http.ResponseWriter, msg string) {
	e := twilio.NewError(http.StatusTooManyRequests, twilio.CodeTooManyRequests, msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(e.Body())
}

// WriteRateLimit answers as Resend does when a client sends too many
// requests: 429 rate_limit_exceeded, which resend-go returns as a
// *resend.RateLimitError and Resend's own tools retry after Retry-After
// (a cap is spend_cap_exceeded instead: waiting does not help).
func (v *resendVendor) WriteRateLimit(w http.ResponseWriter, msg string) {
	e := &resend.Error{StatusCode: http.StatusTooManyRequests, Name: resend.NameRateLimit, Message: msg}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.StatusCode)
	w.Write(e.Body())
}
