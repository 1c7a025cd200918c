package keybrake

import (
	"context"
	"time"
)

// SentService records which vault key sent each message, call and email
// through keybrake, so that a key reads or acts on one by its id only when
// it sent it (or a key minted under it did). Every vault key of a vendor
// shares keybrake's one credential upstream, which reads, changes and
// cancels any of the account's objects whose id it is given: without this
// record one key read another's one-time codes or canceled its scheduled
// email (docs/money-model.md).
type SentService interface {
	// RecordSent records that args.KeyID sent args.Vendor's objects
	// args.IDs (a message's sid, every email of a batch). Recording an id
	// the key already has changes nothing: a replayed create answers with
	// the same id. Empty ids are skipped. Returns ENOTFOUND for an
	// unknown key, EINVALID without a vendor.
	RecordSent(ctx context.Context, args RecordSentArgs) error

	// FindSenders returns the IDs of the keys recorded as having sent
	// vendor's object objectID, sorted; none, and no error, for an id
	// keybrake has no record of (sent outside keybrake, or before it kept
	// one). The match is exact: ids are compared byte for byte.
	FindSenders(ctx context.Context, vendor, objectID string) ([]string, error)
}

// RecordSentArgs names the objects a key's create made upstream.
type RecordSentArgs struct {
	Vendor        string // VendorTwilio, VendorResend
	KeyID         string
	ReservationID string // the create's reservation, "" for one reserved nothing (unpriced, untracked)
	IDs           []string
	Now           time.Time
}

// MaxSentIDs bounds the ids one RecordSent takes: Resend's batch sends at
// most 100 emails.
const MaxSentIDs = 1000
