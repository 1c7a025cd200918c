package stripesim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Stripe's error types, the "type" of an error body.
const (
	typeInvalidRequest = "invalid_request_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeAPI            = "api_error"
)

// apiError is an error as Stripe answers it: an HTTP status and the body
// {"error": {...}}. Fields left empty are left out of the body, as Stripe does.
type apiError struct {
	Status        int            `json:"-"`
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *PaymentIntent `json:"payment_intent,omitempty"`
	DocURL        string         `json:"doc_url,omitempty"`
	RequestLogURL string         `json:"request_log_url,omitempty"`
}

// MarshalJSON wraps the error in Stripe's {"error": …} envelope.
func (e *apiError) MarshalJSON() ([]byte, error) {
	type inner apiError
	return json.Marshal(struct {
		Error *inner `json:"error"`
	}{(*inner)(e)})
}

// Error implements error so handlers can return an *apiError as an error.
func (e *apiError) Error() string { return e.Type + ": " + e.Message }

// newError returns an error whose doc_url follows from its code, as Stripe's do.
func newError(status int, typ, code, param, format string, args ...any) *apiError {
	e := &apiError{Status: status, Type: typ, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
	if code != "" {
		e.DocURL = "https://stripe.com/docs/error-codes/" + strings.ReplaceAll(code, "_", "-")
	}
	return e
}

// invalid returns a 400 invalid_request_error.
func invalid(code, param, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, typeInvalidRequest, code, param, format, args...)
}

func errUnknownParam(name string) *apiError {
	return invalid("parameter_unknown", name, "Received unknown parameter: %s", name)
}

func errMissingParam(name string) *apiError {
	return invalid("parameter_missing", name, "Missing required param: %s.", name)
}

// errNoSuch is the 404 for an object that does not exist in the caller's
// account, or for a referenced object when status is 400.
func errNoSuch(status int, kind, param, id string) *apiError {
	return newError(status, typeInvalidRequest, "resource_missing", param, "No such %s: '%s'", kind, id)
}

func errUnexpectedState(code, format string, args ...any) *apiError {
	return invalid(code, "", format, args...)
}

// errInternal is the 500 Stripe answers when something broke on its side; the
// fail modes of the fault injector answer it too.
func errInternal(status int) *apiError {
	return &apiError{Status: status, Type: typeAPI,
		Message: "An unknown error occurred while processing your request. (simulated by stripesim)"}
}
