package http

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// countCapKinds maps the admin fields of the count caps to what they
// count.
var countCapKinds = map[string]string{
	"daily_message_cap":   keybrake.CountMessages,
	"daily_call_cap":      keybrake.CountCalls,
	"daily_email_cap":     keybrake.CountEmails,
	"monthly_message_cap": keybrake.CountMessages,
	"monthly_call_cap":    keybrake.CountCalls,
	"monthly_email_cap":   keybrake.CountEmails,
}

// maxCountCap bounds a count cap: far above any real month, far below
// overflow when added to what a month has used.
const maxCountCap = 1_000_000_000

// applyCountField validates a count cap field (a whole number from 0 to
// maxCountCap, or null for no cap) into upd. It reports whether name is
// one.
func applyCountField(name string, raw json.RawMessage, upd *keybrake.KeyUpdate) (bool, error) {
	kind, ok := countCapKinds[name]
	if !ok {
		return false, nil
	}
	var v *int64
	if s := string(raw); s != "null" {
		n, err := strconv.ParseInt(s, 10, 64) // no sign, fraction, exponent, quotes or spaces
		if err != nil || n < 0 || n > maxCountCap || s != strconv.FormatInt(n, 10) {
			per := "day"
			if strings.HasPrefix(name, "monthly_") {
				per = "month"
			}
			return true, keybrake.ErrorParam(name, "%s must be a whole number of %s per %s from 0 to %d, or null for no cap.", name, kind, per, maxCountCap)
		}
		v = &n
	}
	if upd.CountCaps == nil {
		upd.CountCaps = &keybrake.CountCaps{}
	}
	c := upd.CountCaps
	*map[string]**int64{
		"daily_message_cap": &c.DailyMessages, "daily_call_cap": &c.DailyCalls, "daily_email_cap": &c.DailyEmails,
		"monthly_message_cap": &c.MonthlyMessages, "monthly_call_cap": &c.MonthlyCalls, "monthly_email_cap": &c.MonthlyEmails,
	}[name] = v
	upd.CountCapFields = append(upd.CountCapFields, name)
	return true, nil
}

// checkCountVendor refuses a count cap on a key whose vendor never counts
// that kind: a message cap on a Resend key would silently limit nothing.
func checkCountVendor(vendor string, upd keybrake.KeyUpdate) error {
	if upd.CountCaps == nil {
		return nil
	}
	for _, name := range upd.CountCapFields {
		kind := countCapKinds[name]
		if upd.CountCaps.For(kind) == nil && upd.CountCaps.ForMonth(kind) == nil {
			continue // removing a cap is always allowed
		}
		allowed := false
		for _, k := range keybrake.CountKindsOf(vendor) {
			allowed = allowed || k == kind
		}
		if !allowed {
			return keybrake.ErrorParam(name, "%s applies only to keys of a vendor that sends %s; this key's vendor is %s.", name, kind, vendor)
		}
	}
	return nil
}

// checkCountUpdate applies checkVendorFields to an update of key id.
func (s *Server) checkCountUpdate(ctx context.Context, id string, upd keybrake.KeyUpdate) error {
	if upd.CountCaps == nil && upd.TwilioScope == nil && upd.ResendScope == nil {
		return nil
	}
	k, err := s.Store.FindKeyByID(ctx, id)
	if err != nil {
		return err
	}
	return checkVendorFields(k.Vendor, upd)
}

// countBudget is a daily count cap's use and what is left, with the
// monthly cap's beside it.
type countBudget struct {
	Cap       *int64         `json:"cap"`
	Used      int64          `json:"used"`
	Remaining *int64         `json:"remaining"`
	ResetsAt  time.Time      `json:"resets_at"`
	Monthly   *countInWindow `json:"monthly"`
}

// countInWindow is the monthly count cap's use and what is left.
type countInWindow struct {
	Cap       *int64    `json:"cap"`
	Used      int64     `json:"used"`
	Remaining *int64    `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
}

// countBudgets returns the day's and month's counts of every kind the
// key's vendor counts, nil for a vendor that counts none (Stripe).
func (s *Server) countBudgets(ctx context.Context, k *keybrake.Key, now time.Time, loc *time.Location) (map[string]*countBudget, error) {
	kinds := keybrake.CountKindsOf(k.Vendor)
	cs, ok := s.Store.(keybrake.CountService)
	if len(kinds) == 0 || !ok {
		return nil, nil
	}
	used, err := cs.CountsUsed(ctx, k.ID, now)
	if err != nil {
		return nil, fmt.Errorf("counts %s: %w", k.ID, err)
	}
	out := make(map[string]*countBudget, len(kinds))
	for _, kind := range kinds {
		b := &countBudget{Cap: k.CountCaps.For(kind), Used: used[kind].Day, ResetsAt: keybrake.DayReset(now, loc),
			Monthly: &countInWindow{Cap: k.CountCaps.ForMonth(kind), Used: used[kind].Month, ResetsAt: keybrake.MonthReset(now, loc)}}
		if b.Cap != nil {
			r := max(*b.Cap-b.Used, 0)
			b.Remaining = &r
		}
		if m := b.Monthly; m.Cap != nil {
			r := max(*m.Cap-m.Used, 0)
			m.Remaining = &r
		}
		out[kind] = b
	}
	return out, nil
}

// checkCountMint refuses to mint a child of a key with count caps or
// counting guards (keybrake.Guards.Counts): a child's sends and
// reservations would count on the child only, so parent and children
// together could send past the parent's cap, or charge a customer past its
// velocity limit or twice past its duplicate guard. Fail closed until
// children count against their parent's counts.
func checkCountMint(parent *keybrake.Key) error {
	if keybrake.ScopeOf(parent) != nil {
		// A child's scope is not checked against its parent's yet.
		return keybrake.Errorf(keybrake.EFORBIDDEN, "Vault key %s has a %s scope; keybrake cannot yet check a child's scope against its parent's, so it mints no children of it.", parent.ID, parent.Vendor)
	}
	if parent.Guards.Counts() {
		// A child's reservations are counted in its own guards only.
		return keybrake.Errorf(keybrake.EFORBIDDEN, "Vault key %s has guards that count its requests (duplicate, velocity, breaker); keybrake cannot yet count a child's requests in its parent's guards, so it mints no children of it.", parent.ID)
	}
	if !parent.CountCaps.Any() {
		return nil
	}
	return keybrake.Errorf(keybrake.EFORBIDDEN, "Vault key %s has count caps; keybrake cannot yet count a child's messages, calls or emails against its parent, so it mints no children of it.", parent.ID)
}
