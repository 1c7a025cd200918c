package postgres

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// ReserveManyForTest decides rs, the reservation i decided on key version
// versions[i], in one keybrake_reserve_many statement (the batched path,
// whatever the timing), and returns each one's status.
func ReserveManyForTest(ctx context.Context, s *Store, rs []*keybrake.Reservation, versions []string, now time.Time) ([]string, error) {
	ops := make([]*reserveOp, len(rs))
	for i, in := range rs {
		loc, err := s.location(ctx, in.KeyID)
		if err != nil {
			return nil, err
		}
		r := *in
		r.ID = keybrake.NewReservationID(now)
		r.State = keybrake.StateReserved
		r.Day, r.Month = keybrake.Buckets(now, loc)
		r.CreatedAt, r.UpdatedAt = ts(now), ts(now)
		ops[i] = &reserveOp{ctx: ctx, r: r, version: versions[i]}
	}
	outs, err := s.reserveMany(ctx, ops)
	if err != nil {
		return nil, err
	}
	st := make([]string, len(outs))
	for i, o := range outs {
		st[i] = o.status
	}
	return st, nil
}
