package http

import (
	"bytes"
	"net/http"

	"github.com/keybrake/keybrake"
)

// refusal is an error the request path answers with, carrying hints a
// vendor's error shape may use beyond keybrake's code and message: Stripe's
// shape has its own status, type and code for a duplicate (409
// keybrake_duplicate_charge), a busy object (429 lock_timeout) or a
// foreign replay (400 idempotency_error), and a "keybrake" detail object.
// keybrake.ErrorCode, ErrorMessage and ErrorParamOf read through it to the
// *keybrake.Error, which is what the other vendors' shapes render.
type refusal struct {
	err    *keybrake.Error
	status int    // the HTTP status, when not the code's
	typ    string // Stripe's error type, when not the code's
	code   string // the vendor-facing error code, when not the code's
	retry  string // Stripe-Should-Retry, when not the code's
	detail any    // the "keybrake" object of a Stripe error
}

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// withDetail attaches detail (the cap refused, the approval pending) to err.
func withDetail(err error, detail any) error {
	if detail == nil {
		return err
	}
	ke, ok := err.(*keybrake.Error)
	if !ok {
		return err
	}
	return &refusal{err: ke, detail: detail}
}

// recordedError is a refusal rendered by a vendor into a buffer, for
// replacing an upstream answer (a foreign replay, an answer that cannot be
// redacted).
type recordedError struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *recordedError) Header() http.Header         { return w.header }
func (w *recordedError) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *recordedError) WriteHeader(status int)      { w.status = status }

// renderError renders err in v's shape into a recordedError.
func renderError(v Vendor, r *http.Request, err error) *recordedError {
	rec := &recordedError{status: http.StatusOK, header: http.Header{}}
	v.WriteError(rec, r, err)
	return rec
}
