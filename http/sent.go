package http

import (
	"context"
	"slices"

	"github.com/keybrake/keybrake"
)

// SentScoper is a Vendor whose objects a vault key may read or act on by
// id only when it sent them through keybrake, or a key minted under it
// did: Twilio's messages and calls, Resend's emails. Every vault key of
// the vendor shares keybrake's one credential upstream, which reaches any
// of the account's objects by id, so without this one key read another's
// login links and one-time codes, or canceled its scheduled email (which
// stays counted on its owner). A request naming an object sets
// VendorRequest.SentID; a create sets Sends, and its answer's ids are
// recorded for its key before the client sees them.
type SentScoper interface {
	// SentIDs returns the ids a 2xx answer to operation (a request's
	// Operation: "emails.batch") names as made: every email of a batch.
	SentIDs(operation string, body []byte) []string
	// NotSent is what the vendor answers for an id it does not know, for
	// req's SentID: keybrake answers so for an object its key did not
	// send, and forwards nothing, so the answer tells nothing of whether
	// the object exists.
	NotSent(req *VendorRequest) error
}

// maxSenderDepth bounds the walk from an object's sender up to the key
// asking: a chain of children deeper than this is not searched further.
const maxSenderDepth = 32

// checkSent refuses c's request naming an object (VendorRequest.SentID)
// that c's key did not send: neither it nor a key minted under it, at any
// depth, is recorded as its sender. A parent sees its children's objects,
// as it sees their spend (it answers for their budget); a child does not
// see its parent's, nor its siblings'. An id keybrake has no record of
// (sent outside keybrake, or before keybrake kept the record) is refused
// too: fail closed. A store that cannot answer refuses (503).
func (s *Server) checkSent(ctx context.Context, c *call) error {
	sc, ok := c.v.(SentScoper)
	if !ok {
		return keybrake.Errorf(keybrake.EINTERNAL, "%s names an object but keeps no record of who sent it.", c.req.Label)
	}
	senders, err := s.Store.FindSenders(ctx, c.v.Name(), c.req.SentID)
	if err != nil {
		return c.storeError(err)
	}
	if slices.Contains(senders, c.key.ID) {
		return nil
	}
	for _, id := range senders {
		under, err := s.descends(ctx, id, c.key.ID)
		if err != nil {
			return c.storeError(err)
		}
		if under {
			return nil
		}
	}
	return sc.NotSent(c.req)
}

// descends reports whether key id was minted under ancestor, at any depth.
func (s *Server) descends(ctx context.Context, id, ancestor string) (bool, error) {
	for range maxSenderDepth {
		k, err := s.Store.FindKeyByID(ctx, id)
		if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if k.ParentID == "" {
			return false, nil
		}
		if k.ParentID == ancestor {
			return true, nil
		}
		id = k.ParentID
	}
	return false, nil
}

// recordSent records the ids a create's 2xx answer names as made by c's
// key, before the answer goes to the client: a fetch the client sends as
// soon as it has the id, on any replica, finds them. A failure is logged
// and returned for the audit reason; the answer still goes out (what it
// made was made), and its objects stay unreadable through keybrake.
func (s *Server) recordSent(ctx context.Context, c *call, body []byte) error {
	sc, ok := c.v.(SentScoper)
	if !ok || !c.req.Sends {
		return nil
	}
	ids := sc.SentIDs(c.req.Operation, body)
	if len(ids) == 0 {
		return nil
	}
	rsvID := ""
	if c.rsv != nil {
		rsvID = c.rsv.ID
	}
	err := s.Store.RecordSent(context.WithoutCancel(ctx), keybrake.RecordSentArgs{Vendor: c.v.Name(), KeyID: c.key.ID, ReservationID: rsvID, IDs: ids, Now: s.Now()})
	if err != nil {
		s.logger().Error("recording what a create sent failed; its key cannot read it through keybrake", "vendor", c.v.Name(), "key", c.key.ID, "ids", len(ids), "err", err)
	}
	return err
}

// recordResolved records the ids a resolved create made (VendorOutcome.Sent)
// as rsv's key's own: a Resend send's ids its replay read, the Twilio
// message or call the lookup matched by To, sender, body and time. An id
// keybrake already records as another key's is not added: that key's
// create was answered with it, so it is not rsv's, whatever a match by
// content says (an identical send of an untracked key, which no
// reservation names).
func (s *Server) recordResolved(ctx context.Context, vendor string, rsv *keybrake.Reservation, out VendorOutcome) {
	ids := make([]string, 0, len(out.Sent))
	for _, id := range out.Sent {
		senders, err := s.Store.FindSenders(ctx, vendor, id)
		if err != nil {
			s.logger().Warn("reading who sent what a resolved create made failed; its key cannot read it through keybrake", "reservation", rsv.ID, "err", err)
			return
		}
		if len(senders) > 0 && !slices.Contains(senders, rsv.KeyID) {
			s.logger().Warn("a resolved create matched an object keybrake records as another key's; not recording it as this key's", "reservation", rsv.ID, "object", id)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return
	}
	if err := s.Store.RecordSent(ctx, keybrake.RecordSentArgs{Vendor: vendor, KeyID: rsv.KeyID, ReservationID: rsv.ID, IDs: ids, Now: s.Now()}); err != nil {
		s.logger().Warn("recording what a resolved create sent failed; its key cannot read it through keybrake", "reservation", rsv.ID, "err", err)
	}
}
