package http

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/keybrake/keybrake"
)

// codes maps keybrake error codes to HTTP statuses. It is the one table
// that decides the status of every error keybrake itself returns.
var codes = map[string]int{
	keybrake.ECONFLICT:     http.StatusConflict,
	keybrake.EINVALID:      http.StatusBadRequest,
	keybrake.ENOTFOUND:     http.StatusNotFound,
	keybrake.EUNAUTHORIZED: http.StatusUnauthorized,
	keybrake.EFORBIDDEN:    http.StatusForbidden,
	keybrake.EOVERCAP:      http.StatusTooManyRequests,
	keybrake.EAPPROVAL:     http.StatusPaymentRequired, // docs/approvals.md says why 402, not 409
	keybrake.EUNAVAILABLE:  http.StatusServiceUnavailable,
	keybrake.EINTERNAL:     http.StatusInternalServerError,
}

// ErrorStatus returns the HTTP status for a keybrake error code.
func ErrorStatus(code string) int {
	if s, ok := codes[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// stripeError is the body of every error keybrake returns, in Stripe's shape
// so that every Stripe SDK raises a typed error carrying keybrake's message.
type stripeError struct {
	Error stripeErrorBody `json:"error"`
}

type stripeErrorBody struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	DocURL  string `json:"doc_url,omitempty"`
	// Keybrake carries structured detail (the cap refused, the operation
	// attempted); Stripe SDKs ignore unknown fields.
	Keybrake any `json:"keybrake,omitempty"`
}

// stripeTypes maps keybrake codes to Stripe error types and codes.
var stripeTypes = map[string][2]string{
	keybrake.ECONFLICT:     {"invalid_request_error", "keybrake_conflict"},
	keybrake.EINVALID:      {"invalid_request_error", "parameter_invalid"},
	keybrake.ENOTFOUND:     {"invalid_request_error", "resource_missing"},
	keybrake.EUNAUTHORIZED: {"invalid_request_error", "keybrake_unauthorized"},
	keybrake.EFORBIDDEN:    {"invalid_request_error", "keybrake_forbidden"},
	keybrake.EOVERCAP:      {"invalid_request_error", "keybrake_spend_cap_exceeded"},
	keybrake.EAPPROVAL:     {"invalid_request_error", "keybrake_approval_required"},
	keybrake.EUNAVAILABLE:  {"api_error", "keybrake_unavailable"},
	keybrake.EINTERNAL:     {"api_error", "keybrake_internal"},
}

// writeStripeError writes err as a Stripe-shaped error. Internal errors are
// logged and their detail hidden. Retrying helps only when a dependency is
// unavailable, and the Stripe-Should-Retry header tells SDKs so.
func (s *Server) writeStripeError(w http.ResponseWriter, r *http.Request, err error, detail any) {
	code := keybrake.ErrorCode(err)
	if code == keybrake.EINTERNAL {
		s.logger().Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	t := stripeTypes[code]
	if t[0] == "" {
		t = stripeTypes[keybrake.EINTERNAL]
	}
	body := stripeError{Error: stripeErrorBody{
		Type:     t[0],
		Code:     t[1],
		Message:  keybrake.ErrorMessage(err),
		Param:    keybrake.ErrorParamOf(err),
		Keybrake: detail,
	}}
	if code == keybrake.EINVALID && body.Error.Param == "" {
		body.Error.Code = "invalid_request"
	}
	retry := "false"
	if code == keybrake.EUNAVAILABLE {
		retry = "true"
	}
	status := ErrorStatus(code)
	var rf *refusal
	if errors.As(err, &rf) { // refusal.go: the request path's hints
		status, body.Error.Type, body.Error.Code, retry = or(rf.status, status), or(rf.typ, body.Error.Type), or(rf.code, body.Error.Code), or(rf.retry, retry)
		if rf.detail != nil {
			body.Error.Keybrake = rf.detail
		}
	}
	w.Header().Set("Stripe-Should-Retry", retry)
	writeJSON(w, status, body)
}

// or returns v unless it is the zero value, else def.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// writeAdminError writes err as the admin API's JSON error.
func (s *Server) writeAdminError(w http.ResponseWriter, r *http.Request, err error) {
	code := keybrake.ErrorCode(err)
	if code == keybrake.EINTERNAL {
		s.logger().Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, ErrorStatus(code), map[string]any{"error": map[string]string{
		"code":    code,
		"message": keybrake.ErrorMessage(err),
		"param":   keybrake.ErrorParamOf(err),
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}
