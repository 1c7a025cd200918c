package keybrake

import (
	"context"
	"time"
)

// Any reports whether at least one count cap is set.
func (c CountCaps) Any() bool {
	return c.DailyMessages != nil || c.DailyCalls != nil || c.DailyEmails != nil ||
		c.MonthlyMessages != nil || c.MonthlyCalls != nil || c.MonthlyEmails != nil
}

// CountKindsOf returns the count kinds a vendor's reservations count, none
// for a vendor without count caps (Stripe).
func CountKindsOf(vendor string) []string {
	switch vendor {
	case VendorTwilio:
		return []string{CountMessages, CountCalls}
	case VendorResend:
		return []string{CountEmails}
	}
	return nil
}

// CountService reads the count caps' counters. Both stores implement it
// beside Store; the admin API shows the counts through it.
type CountService interface {
	// CountsUsed returns what the key has used of each count kind in its
	// calendar day and month containing now: reservations of that kind and
	// window that are not released. A kind with nothing used this month is
	// absent. Returns ENOTFOUND for an unknown key.
	CountsUsed(ctx context.Context, keyID string, now time.Time) (map[string]CountUse, error)
}

// CountCapNames are the JSON names of the count caps, in CountCaps' order.
var CountCapNames = []string{"daily_message_cap", "daily_call_cap", "daily_email_cap",
	"monthly_message_cap", "monthly_call_cap", "monthly_email_cap"}

// merge returns c with the caps of upd that fields names (all six when
// fields is empty) copied in; the result shares no pointer with upd.
func (c CountCaps) merge(upd CountCaps, fields []string) CountCaps {
	upd = upd.clone()
	if len(fields) == 0 {
		return upd
	}
	out := c.clone()
	dst := []**int64{&out.DailyMessages, &out.DailyCalls, &out.DailyEmails, &out.MonthlyMessages, &out.MonthlyCalls, &out.MonthlyEmails}
	src := []*int64{upd.DailyMessages, upd.DailyCalls, upd.DailyEmails, upd.MonthlyMessages, upd.MonthlyCalls, upd.MonthlyEmails}
	for i, name := range CountCapNames {
		for _, f := range fields {
			if f == name {
				*dst[i] = src[i]
			}
		}
	}
	return out
}
