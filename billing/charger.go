package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/keybrake/keybrake"
)

// ChargeRequest is one charge to create. Key is sent as the Idempotency-Key
// and as metadata[keybrake_key], so the charge can be found again after
// Stripe forgets the key.
type ChargeRequest struct {
	Key            string
	Amount         int64 // minor units of Currency
	Currency       string
	StripeCustomer string
	PaymentMethod  string // when set, a PaymentIntent confirmed at once
	Source         string // otherwise a charge on this source (or the customer's default)
	Description    string
	Metadata       map[string]string
}

// ChargeResult is a charge Stripe created (or replayed for the same key).
type ChargeResult struct {
	ChargeID string
	Status   string // the charge's status: "succeeded", or "failed" for a declined one
	Amount   int64
	Currency string
	Replayed bool // Stripe answered with the saved response of an earlier request
}

// Charger creates charges. Implementations must not retry by themselves:
// the Processor owns retries, and records each attempt in the ledger first.
type Charger interface {
	// Charge creates the charge, or returns the one an earlier request with
	// the same Key created. Failures are *ChargeError; any other error
	// (network, timeout, cancelled context) is transient: the charge may or
	// may not exist.
	Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error)

	// FindByMetadata returns the charges created with key, newest first,
	// through a search on metadata[keybrake_key]; none is not an error.
	// Failures are as for Charge.
	FindByMetadata(ctx context.Context, key string) ([]ChargeResult, error)
}

// Class is how the Processor treats a failed charge.
type Class int

// Classes of charge failures.
const (
	// ClassTransient: the outcome is unknown or the request was refused
	// for now (5xx, timeout, network, 409 idempotency_key_in_use, 429 rate
	// limit or keybrake over cap). Release the lease and retry later with
	// the same key.
	ClassTransient Class = iota
	// ClassDeclined: the card was declined (402 card_error). Final: record
	// it and acknowledge; retrying would only decline again.
	ClassDeclined
	// ClassFailed: the request can never succeed as sent (400
	// idempotency_error, other 400s). Final: record it and dead-letter;
	// except that after an idempotency_error the Processor first looks for
	// the charge the key's earlier use may have made.
	ClassFailed
	// ClassOperator: the credentials or the policy refused the request (401
	// revoked or expired vault key, 403 forbidden by the key's policy).
	// Nothing was charged and an operator can fix it, so the event is kept:
	// released and retried with a long backoff, and logged as an error.
	ClassOperator
)

// String names the class for logs.
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassDeclined:
		return "declined"
	case ClassFailed:
		return "failed"
	case ClassOperator:
		return "operator"
	}
	return "unknown"
}

// ChargeError is a charge that failed with an answer from Stripe (or from
// keybrake in front of it).
type ChargeError struct {
	Class       Class
	Status      int    // the HTTP status
	Type        string // Stripe's error type (card_error, idempotency_error…)
	Code        string // Stripe's or keybrake's error code
	DeclineCode string
	Message     string
	ChargeID    string // the declined charge, when Stripe names one
	RequestID   string
	Err         error // the client library's error
}

// Error implements the error interface.
func (e *ChargeError) Error() string {
	s := fmt.Sprintf("charge %s: %d %s", e.Class, e.Status, e.Type)
	if e.Code != "" {
		s += "/" + e.Code
	}
	if e.DeclineCode != "" {
		s += "/" + e.DeclineCode
	}
	return s + ": " + e.Message
}

// Unwrap returns the keybrake error the class maps to, and the client
// library's error.
func (e *ChargeError) Unwrap() []error {
	code := keybrake.EUNAVAILABLE
	switch {
	case e.Code == "keybrake_spend_cap_exceeded":
		code = keybrake.EOVERCAP
	case e.Class == ClassOperator && e.Status == 401:
		code = keybrake.EUNAUTHORIZED
	case e.Class == ClassOperator:
		code = keybrake.EFORBIDDEN
	case e.Class == ClassDeclined, e.Class == ClassFailed:
		code = keybrake.EINVALID
	}
	errs := []error{&keybrake.Error{Code: code, Message: e.Message}}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// ClassOf returns the class of a Charger error: a *ChargeError's Class, and
// ClassTransient for anything else, since a network error or a timeout
// leaves the charge's existence unknown.
func ClassOf(err error) Class {
	var ce *ChargeError
	if errors.As(err, &ce) {
		return ce.Class
	}
	return ClassTransient
}

// classify returns the class of an HTTP answer from Stripe or keybrake.
func classify(status int, typ, code string) Class {
	switch {
	case status == 402 || typ == "card_error":
		return ClassDeclined
	case status == 409, status == 429, status >= 500, status == 0:
		// Before the type: keybrake answers a key whose first request is
		// still upstream 409 with type idempotency_error, and that first
		// request may well charge.
		return ClassTransient
	case typ == "idempotency_error":
		return ClassFailed
	case status == 401, status == 403:
		return ClassOperator
	case status >= 400:
		return ClassFailed
	}
	return ClassTransient
}
