package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// DefaultMaxClockSkew is the bound keybrake serve sets on Store.MaxClockSkew.
// NTP keeps servers within milliseconds of one another; two seconds is an
// error to act on, not noise.
const DefaultMaxClockSkew = 2 * time.Second

// clockRefresh is how often a replica measures its clock against the
// database's.
const clockRefresh = 10 * time.Second

// The guards' windows (velocity limits, the duplicate guard, the breaker's
// repeat and spend-rate rules) and the caps' calendar windows are computed
// from the time the replica passes with each reservation (its clock, which
// tests inject), and reservations are stamped with it. Replicas whose
// clocks disagree therefore disagree on windows: a replica d seconds ahead
// misses the d oldest seconds of a sliding window that the others counted
// in, and lets through up to that much more. Taking the window's time from
// the database instead would mix two clocks in one comparison (the
// database's now against created_at stamped by replicas, the caps' day
// buckets computed in Go), so keybrake bounds the skew instead: with
// MaxClockSkew set, a replica measures its clock against the database's
// (clock_timestamp(), allowing for the round trip) every clockRefresh and
// refuses to reserve or count requests, fail closed, while the time it
// would pass is further than MaxClockSkew from the database's. Windows are
// then exact up to MaxClockSkew: a request counted by a skewed-but-allowed
// replica shifts by at most that much. See docs/guards.md.
type dbClock struct {
	mu     sync.Mutex
	at     time.Time     // when measured (monotonic)
	offset time.Duration // database clock minus this process's time.Now
	uncert time.Duration // half the round trip of the measurement
}

// checkClock returns EUNAVAILABLE when now, the time this replica passes
// for a reservation or request, is more than MaxClockSkew from the
// database's clock. It does nothing when MaxClockSkew is zero (the
// default: tests inject clocks far from the database's).
func (s *Store) checkClock(ctx context.Context, now time.Time) error {
	if s.MaxClockSkew <= 0 {
		return nil
	}
	if now.IsZero() {
		now = s.now()
	}
	offset, uncert, err := s.clockOffset(ctx)
	if err != nil {
		return s.wrap("measure the database clock", err)
	}
	skew := now.Sub(time.Now().Add(offset))
	if skew < 0 {
		skew = -skew
	}
	if skew-uncert > s.MaxClockSkew {
		return keybrake.Errorf(keybrake.EUNAVAILABLE, "This keybrake replica's clock is %s off the database's (at most %s allowed), so its windows would disagree with the other replicas'; it refuses to reserve until its clock is fixed (NTP).",
			skew.Round(time.Millisecond), s.MaxClockSkew)
	}
	return nil
}

// clockOffset returns the database clock minus time.Now, measured at most
// clockRefresh ago, and the measurement's uncertainty.
func (s *Store) clockOffset(ctx context.Context) (time.Duration, time.Duration, error) {
	c := &s.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < clockRefresh {
		return c.offset, c.uncert, nil
	}
	t0 := time.Now()
	var db time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	half := t1.Sub(t0) / 2
	c.at, c.offset, c.uncert = t1, db.Sub(t0.Add(half)), half
	return c.offset, c.uncert, nil
}

// now is the store's clock.
func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
