package resend

import (
	"encoding/json"
	"net/http"

	"github.com/keybrake/keybrake"
)

// Error is an error as Resend answers it, and as its SDKs decode it:
//
//	{"statusCode": 422, "name": "validation_error", "message": "…"}
type Error struct {
	StatusCode int    `json:"statusCode"`
	Name       string `json:"name"`
	Message    string `json:"message"`
}

// Error implements error.
func (e *Error) Error() string { return "resend " + e.Name + ": " + e.Message }

// Body returns the JSON body of the error.
func (e *Error) Body() []byte {
	b, _ := json.Marshal(e)
	return b
}

// Resend's error names, and keybrake's own for a cap.
const (
	NameValidation           = "validation_error"
	NameMissingAPIKey        = "missing_api_key"
	NameInvalidAPIKey        = "invalid_api_key"
	NameNotFound             = "not_found"
	NameMethodNotAllowed     = "method_not_allowed"
	NameInvalidIdempotent    = "invalid_idempotent_request"     // 409: the key was used with another body
	NameConcurrentIdempotent = "concurrent_idempotent_requests" // 409: the key's first request is running
	NameInvalidIdempotency   = "invalid_idempotency_key"        // 400: empty or longer than 256
	NameRateLimit            = "rate_limit_exceeded"
	NameSpendCap             = "spend_cap_exceeded" // keybrake: a spend or count cap; not retryable until the window resets
	NameApprovalRequired     = "approval_required"  // keybrake: held for a person's approval; retry with the same Idempotency-Key once approved
	NameApplication          = "application_error"
	NameInternal             = "internal_server_error"
)

var names = map[string]struct {
	name   string
	status int
}{
	keybrake.EINVALID:      {NameValidation, http.StatusUnprocessableEntity},
	keybrake.EUNAUTHORIZED: {NameInvalidAPIKey, http.StatusForbidden},
	keybrake.EFORBIDDEN:    {NameValidation, http.StatusForbidden},
	keybrake.ENOTFOUND:     {NameNotFound, http.StatusNotFound},
	keybrake.ECONFLICT:     {NameInvalidIdempotent, http.StatusConflict},
	keybrake.EOVERCAP:      {NameSpendCap, http.StatusTooManyRequests},
	keybrake.EAPPROVAL:     {NameApprovalRequired, http.StatusPaymentRequired},
	keybrake.EUNAVAILABLE:  {NameApplication, http.StatusServiceUnavailable},
	keybrake.EINTERNAL:     {NameInternal, http.StatusInternalServerError},
}

// ErrorFor renders a keybrake error as Resend does, with keybrake's
// message. A missing key is 401 missing_api_key as on Resend; a wrong one
// 403 invalid_api_key; a refusal by policy 403 validation_error, the name
// Resend gives an unverified sender domain.
func ErrorFor(err error) *Error {
	n, ok := names[keybrake.ErrorCode(err)]
	if !ok {
		n = names[keybrake.EINTERNAL]
	}
	msg := keybrake.ErrorMessage(err)
	if n.name == NameInvalidAPIKey && len(msg) > 7 && msg[:7] == "Missing" {
		n.name, n.status = NameMissingAPIKey, http.StatusUnauthorized
	}
	return &Error{StatusCode: n.status, Name: n.name, Message: msg}
}
