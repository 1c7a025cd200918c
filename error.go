package keybrake

import (
	"errors"
	"fmt"
)

// Error codes. Each maps to one HTTP status in http/error.go; only EINTERNAL
// is logged as an internal failure.
const (
	ECONFLICT     = "conflict"          // the request conflicts with current state
	EINTERNAL     = "internal"          // a bug or an unexpected failure
	EINVALID      = "invalid"           // malformed or unacceptable input
	ENOTFOUND     = "not_found"         // the named object does not exist
	EUNAUTHORIZED = "unauthorized"      // missing, unknown, expired or revoked credentials
	EFORBIDDEN    = "forbidden"         // authenticated but not allowed by policy
	EOVERCAP      = "over_cap"          // the amount would exceed a spend cap
	EUNAVAILABLE  = "unavailable"       // a dependency (the store, the upstream) is down
	EAPPROVAL     = "approval_required" // a person must approve the request first (approval.go)
)

// Error is keybrake's application error. Code is machine-readable, Message is
// safe to show to the client, and Param names the offending input field when
// there is one (Stripe's "param").
type Error struct {
	Code    string
	Message string
	Param   string
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("keybrake error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code string, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorParam returns an EINVALID *Error naming the offending parameter.
func ErrorParam(param string, format string, args ...any) *Error {
	return &Error{Code: EINVALID, Message: fmt.Sprintf(format, args...), Param: param}
}

// ErrorCode returns the code of the first *Error in err's chain, "" for a nil
// error, and EINTERNAL for any other error.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, "" for
// a nil error, and a generic message for any other error so internals never
// leak to clients.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error."
}

// ErrorParamOf returns the Param of the first *Error in err's chain, or "".
func ErrorParamOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Param
	}
	return ""
}
