package keybrake

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Velocity window kinds (VelocityLimit.WindowKind).
const (
	// WindowSliding counts, at second s, the requests made in the
	// seconds after s-WindowSeconds: a request stops counting
	// WindowSeconds after the second it was made in, rounded up to its
	// counter's bucket (see VelocityLimit.BucketSeconds).
	WindowSliding = "sliding"
	// WindowFixed counts the requests made since the start of the
	// current window; windows follow one another from the Unix epoch
	// (UTC), so a 86400-second window is a UTC day.
	WindowFixed = "fixed"
)

// The guards' windows are counted, not searched: each reservation adds one
// (and its amount) to a counter per guard scope and time bucket, in the
// same transaction, and a guard sums the buckets its window covers. A
// window of W seconds has buckets of ceil(W/60) seconds (one for a fixed
// window), so a check reads at most 61 counters whatever the traffic.
//
// A GuardCounter is one such counter a reservation counts in: the scope
// (which guard, and for a per-customer limit which customer), the bucket's
// first second (Unix), and the second after which no window needs it.
type GuardCounter struct {
	Scope   string
	Bucket  int64
	Expires int64
}

// BucketCount is the content of one counter.
type BucketCount struct {
	Bucket int64
	N      int64
	Micros int64
}

// Kind returns v's window kind, sliding unless set.
func (v VelocityLimit) Kind() string {
	if v.WindowKind == "" {
		return WindowSliding
	}
	return v.WindowKind
}

// BucketSeconds is the width of v's counters: the window itself for a
// fixed window, else a sixtieth of it rounded up, so windows up to a minute
// are counted by the second, an hour by the minute, a day by 24 minutes.
func (v VelocityLimit) BucketSeconds() int64 {
	if v.Kind() == WindowFixed {
		return v.WindowSeconds
	}
	return bucketWidth(v.WindowSeconds)
}

func bucketWidth(window int64) int64 { return (window + 59) / 60 }

// Scope names v's counters for customer ("" for a per-key limit). It
// follows what v counts, not its name or limit: renaming a limit or
// changing its number keeps its count; changing its window, kind, scope,
// operations or whether it counts reads starts a new count.
func (v VelocityLimit) Scope(customer string) string {
	ops := slices.Clone(v.Operations)
	slices.Sort(ops)
	var b strings.Builder
	if v.Requests {
		b.WriteString("q:")
	} else {
		b.WriteString("v:")
	}
	b.WriteString(v.Kind()[:1])
	b.WriteString(strconv.FormatInt(v.WindowSeconds, 10))
	b.WriteString(":")
	b.WriteString(strings.Join(ops, ","))
	if v.Per == PerCustomer {
		b.WriteString(":")
		b.WriteString(customer)
	}
	return b.String()
}

// Since returns the first bucket v counts at now: buckets from it on hold
// the requests of v's window.
func (v VelocityLimit) Since(now time.Time) int64 {
	s, w := now.Unix(), v.BucketSeconds()
	if v.Kind() == WindowFixed {
		return floorTo(s, w)
	}
	return slidingSince(s, v.WindowSeconds, w)
}

// slidingSince is the first bucket of width w holding a second after
// s-window: bucket b holds seconds b … b+w-1.
func slidingSince(s, window, w int64) int64 { return s - window - w + 2 }

// Counter returns the counter a request at now counts in for customer.
func (v VelocityLimit) Counter(customer string, now time.Time) GuardCounter {
	w := v.BucketSeconds()
	b := floorTo(now.Unix(), w)
	return GuardCounter{Scope: v.Scope(customer), Bucket: b, Expires: b + w + v.WindowSeconds}
}

// RetryAt returns when v's count, over limit with the buckets given (of
// v's window, any order), falls below its limit: when enough of its oldest
// buckets have left the window.
func (v VelocityLimit) RetryAt(buckets []BucketCount) time.Time {
	w := v.BucketSeconds()
	if v.Kind() == WindowFixed {
		if len(buckets) == 0 {
			return time.Unix(0, 0)
		}
		return time.Unix(buckets[0].Bucket+w, 0).UTC()
	}
	slices.SortFunc(buckets, func(a, b BucketCount) int { return int(a.Bucket - b.Bucket) })
	var total int64
	for _, b := range buckets {
		total += b.N
	}
	for _, b := range buckets {
		total -= b.N
		if total < int64(v.Limit) {
			// Bucket b stops counting at the second s where
			// slidingSince(s) > b.
			return time.Unix(b.Bucket+v.WindowSeconds+w-1, 0).UTC()
		}
	}
	return time.Unix(0, 0)
}

// Spend-rate counters: the recent window's and the baseline's.
func spendScopes(b *Breaker) (recent, base string) {
	return "sr:" + strconv.FormatInt(b.SpendWindowSeconds, 10), "sb:" + strconv.FormatInt(b.BaselineSeconds, 10)
}

// SpendProbe names the counters the breaker's spend-rate rule reads at
// now: the recent spend is the sum of Recent's buckets from RecentSince,
// the baseline the sum of Base's buckets from BaseSince minus the recent
// spend. The recent sum covers the spend window rounded up to its
// buckets; the baseline only buckets wholly inside the baseline: both
// err towards tripping, by at most a sixtieth of their window.
type SpendProbe struct {
	Recent, Base           string
	RecentSince, BaseSince int64
}

// SpendRateTrips reports whether recent, spent in the breaker's spend
// window, is over SpendMultiple times the average per spend window of
// before, spent in the rest of the baseline. No baseline spend, no rate:
// it never trips. Computed exactly, in integers.
func (b *Breaker) SpendRateTrips(recent, before int64) bool {
	if before <= 0 || b.SpendMultiple <= 0 {
		return false
	}
	// recent / w > x * before / (base - w)  ⇔  recent·(base-w) > x·before·w
	lhs := new(big.Int).Mul(big.NewInt(recent), big.NewInt(b.BaselineSeconds-b.SpendWindowSeconds))
	rhs := new(big.Int).Mul(big.NewInt(b.SpendMultiple), big.NewInt(before))
	rhs.Mul(rhs, big.NewInt(b.SpendWindowSeconds))
	return lhs.Cmp(rhs) > 0
}

// SpendRateReason is the suspension reason of a spend-rate trip with
// recent micros reserved in the spend window.
func (b *Breaker) SpendRateReason(recent int64) string {
	return fmt.Sprintf("breaker %s: $%s reserved in %ds, over %d times the key's rate in the %ds before",
		BreakerSpendRate, Micros(recent), b.SpendWindowSeconds, b.SpendMultiple, b.BaselineSeconds)
}

// Probe returns the counters b's spend-rate rule reads at now.
func (b *Breaker) Probe(now time.Time) SpendProbe {
	r, base := spendScopes(b)
	s := now.Unix()
	return SpendProbe{Recent: r, Base: base,
		RecentSince: slidingSince(s, b.SpendWindowSeconds, bucketWidth(b.SpendWindowSeconds)),
		BaseSince:   s - b.BaselineSeconds + 1}
}

// CountersFor returns the counters a reservation in at now counts in on
// a key with guards g: one per velocity limit that applies to it (one per
// distinct scope), and the spend-rate rule's two. A request of an
// operation no limit names, or naming no customer for a per-customer
// limit, counts in no counter of that limit.
func CountersFor(g *Guards, operation, customer string, now time.Time) []GuardCounter {
	if g.IsZero() {
		return nil
	}
	var cs []GuardCounter
	seen := map[string]bool{}
	for _, v := range g.Velocity {
		if v.Requests || !v.Applies(operation) || (v.Per == PerCustomer && customer == "") {
			continue
		}
		c := v.Counter(customer, now)
		if !seen[c.Scope] {
			seen[c.Scope] = true
			cs = append(cs, c)
		}
	}
	if b := g.Breaker; b != nil && b.SpendMultiple > 0 {
		cs = append(cs, SpendCounters(b, now)...)
	}
	return cs
}

// SpendCounters returns the two counters (recent, baseline) a reservation
// at now counts in for b's spend-rate rule.
func SpendCounters(b *Breaker, now time.Time) []GuardCounter {
	r, base := spendScopes(b)
	s := now.Unix()
	rw, bw := bucketWidth(b.SpendWindowSeconds), bucketWidth(b.BaselineSeconds)
	rb, bb := floorTo(s, rw), floorTo(s, bw)
	return []GuardCounter{
		{Scope: r, Bucket: rb, Expires: rb + rw + b.SpendWindowSeconds},
		{Scope: base, Bucket: bb, Expires: bb + bw + b.BaselineSeconds},
	}
}

// EncodeCounters is how a reservation records the counters it counts in
// (JSON [[scope, bucket, expires], …]), so that the stores can take it out
// of them when it is released and put it back when it is re-armed, even
// after the key's guards changed. "" for none.
func EncodeCounters(cs []GuardCounter) string {
	if len(cs) == 0 {
		return ""
	}
	rows := make([][3]any, len(cs))
	for i, c := range cs {
		rows[i] = [3]any{c.Scope, c.Bucket, c.Expires}
	}
	b, _ := json.Marshal(rows) // strings and integers: cannot fail
	return string(b)
}

// floorTo rounds s down to a multiple of w (w > 0), also for s < 0.
func floorTo(s, w int64) int64 {
	q := s / w
	if s%w != 0 && s < 0 {
		q--
	}
	return q * w
}
