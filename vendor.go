package keybrake

import "time"

// The vendors keybrake proxies. A key's Vendor field names the one vendor
// its vault key may call: a Stripe key on /twilio/… is refused.
const (
	VendorTwilio = "twilio" // /twilio/2010-04-01/…: Programmable Messaging and Voice
	VendorResend = "resend" // /resend/emails…: transactional email
)

// Vendors returns the names of every vendor keybrake proxies.
func Vendors() []string { return []string{VendorStripe, VendorTwilio, VendorResend} }

// KnownVendor reports whether name is one of Vendors.
func KnownVendor(name string) bool {
	for _, v := range Vendors() {
		if v == name {
			return true
		}
	}
	return false
}

// Count kinds: what a count cap limits per day, beside the USD caps. A
// reservation counts at most one kind (Reservation.CountKind); it counts
// while reserved, uncertain, held or settled, and stops counting when
// released, exactly like its USD amount.
const (
	CountMessages = "messages" // Twilio messages created (SMS or MMS)
	CountCalls    = "calls"    // Twilio calls placed
	CountEmails   = "emails"   // Resend emails sent (a batch counts each)
)

// CountCaps are a key's daily count limits, in the key's calendar day like
// the daily USD cap. A nil cap is no limit.
type CountCaps struct {
	DailyMessages *int64 `json:"daily_message_cap"`
	DailyCalls    *int64 `json:"daily_call_cap"`
	DailyEmails   *int64 `json:"daily_email_cap"`
}

// For returns the daily cap of kind, nil when there is none.
func (c CountCaps) For(kind string) *int64 {
	switch kind {
	case CountMessages:
		return c.DailyMessages
	case CountCalls:
		return c.DailyCalls
	case CountEmails:
		return c.DailyEmails
	}
	return nil
}

// OverCount describes a daily count cap a reservation would exceed.
type OverCount struct {
	Kind      string    `json:"kind"` // CountMessages, CountCalls or CountEmails
	Cap       int64     `json:"cap"`
	Used      int64     `json:"used"` // reserved, uncertain, held and settled today
	Requested int64     `json:"requested"`
	ResetsAt  time.Time `json:"resets_at"`
}

// CheckCount returns the OverCount of a reservation of n of kind on a key
// whose caps are caps and which has used used today (in loc), or nil when
// it fits. Landing exactly on the cap passes.
func CheckCount(caps CountCaps, kind string, used, n int64, now time.Time, loc *time.Location) *OverCount {
	c := caps.For(kind)
	if c == nil || n <= 0 || used+n <= *c {
		return nil
	}
	return &OverCount{Kind: kind, Cap: *c, Used: used, Requested: n, ResetsAt: DayReset(now, loc)}
}

func (c CountCaps) clone() CountCaps {
	cp := func(p *int64) *int64 {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	return CountCaps{DailyMessages: cp(c.DailyMessages), DailyCalls: cp(c.DailyCalls), DailyEmails: cp(c.DailyEmails)}
}

// DefaultVendorEndpoints returns the operations a key of vendor created
// without allowed_endpoints may call: sending and reading messages or
// emails, not calls, account resources or anything that changes the
// account.
func DefaultVendorEndpoints(vendor string) []string {
	switch vendor {
	case VendorTwilio:
		return []string{"messages.create", "messages.fetch", "messages.list"}
	case VendorResend:
		return []string{"emails.send", "emails.batch", "emails.get", "emails.list"}
	}
	return DefaultEndpoints()
}
