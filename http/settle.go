package http

import (
	"context"

	"github.com/keybrake/keybrake"
)

// settleVendor applies a resolver's outcome to rsv and returns the audit
// reason. A failed settle leaves the reservation counted for the next
// pass.
func (s *Server) settleVendor(ctx context.Context, rsv *keybrake.Reservation, out VendorOutcome, status int) (string, error) {
	if !out.Final {
		return out.Reason, nil
	}
	args, reason := s.settleArgs(rsv, status, out)
	if _, err := s.Store.Settle(context.WithoutCancel(ctx), args); err != nil {
		s.logger().Error("settle failed; left for the resolver", "reservation", rsv.ID, "err", err)
		return reason + " (settle failed: " + keybrake.ErrorMessage(err) + ")", err
	}
	return reason, nil
}
