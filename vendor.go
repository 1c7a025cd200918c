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

// Count kinds: what a count cap limits per day or month, beside the USD
// caps. A reservation counts at most one kind (Reservation.CountKind); it
// counts while reserved, uncertain, held or settled, and stops counting
// when released, exactly like its USD amount.
const (
	CountMessages = "messages" // Twilio messages created (SMS or MMS)
	CountCalls    = "calls"    // Twilio calls placed
	CountEmails   = "emails"   // Resend emails as Resend's quota counts them: one per recipient (to, cc and bcc), a batch each of its emails
)

// CountCaps are a key's count limits: daily in the key's calendar day like
// the daily USD cap, monthly in its calendar month like the monthly USD
// cap. A nil cap is no limit.
type CountCaps struct {
	DailyMessages   *int64 `json:"daily_message_cap"`
	DailyCalls      *int64 `json:"daily_call_cap"`
	DailyEmails     *int64 `json:"daily_email_cap"`
	MonthlyMessages *int64 `json:"monthly_message_cap"`
	MonthlyCalls    *int64 `json:"monthly_call_cap"`
	MonthlyEmails   *int64 `json:"monthly_email_cap"`
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

// ForMonth returns the monthly cap of kind, nil when there is none.
func (c CountCaps) ForMonth(kind string) *int64 {
	switch kind {
	case CountMessages:
		return c.MonthlyMessages
	case CountCalls:
		return c.MonthlyCalls
	case CountEmails:
		return c.MonthlyEmails
	}
	return nil
}

// OverCount describes a count cap a reservation would exceed.
type OverCount struct {
	Kind      string    `json:"kind"`   // CountMessages, CountCalls or CountEmails
	Window    string    `json:"window"` // WindowDaily or WindowMonthly
	Cap       int64     `json:"cap"`
	Used      int64     `json:"used"` // reserved, uncertain, held and settled in the window
	Requested int64     `json:"requested"`
	ResetsAt  time.Time `json:"resets_at"`
}

// CountUse is what a key has used of one count kind: in the calendar day
// and in the calendar month containing a time, in the key's zone.
type CountUse struct {
	Day, Month int64
}

// CheckCount returns the OverCount of a reservation of n of kind on a key
// whose caps are caps and which has used used in the day and month of now
// (in loc), or nil when it fits. The daily cap is checked first. Landing
// exactly on a cap passes.
func CheckCount(caps CountCaps, kind string, used CountUse, n int64, now time.Time, loc *time.Location) *OverCount {
	if n <= 0 {
		return nil
	}
	if c := caps.For(kind); c != nil && used.Day+n > *c {
		return &OverCount{Kind: kind, Window: WindowDaily, Cap: *c, Used: used.Day, Requested: n, ResetsAt: DayReset(now, loc)}
	}
	if c := caps.ForMonth(kind); c != nil && used.Month+n > *c {
		return &OverCount{Kind: kind, Window: WindowMonthly, Cap: *c, Used: used.Month, Requested: n, ResetsAt: MonthReset(now, loc)}
	}
	return nil
}

func (c CountCaps) clone() CountCaps {
	cp := func(p *int64) *int64 {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	return CountCaps{DailyMessages: cp(c.DailyMessages), DailyCalls: cp(c.DailyCalls), DailyEmails: cp(c.DailyEmails),
		MonthlyMessages: cp(c.MonthlyMessages), MonthlyCalls: cp(c.MonthlyCalls), MonthlyEmails: cp(c.MonthlyEmails)}
}

// DefaultVendorEndpoints returns the operations a key of vendor created
// without allowed_endpoints may call: sending messages or emails, and
// reading one by the id its send answered with (only its own, or its
// children's: http/sent.go); not calls, account resources, anything that
// changes the account, or lists: the vendor's
// list answers with what every vault key on the account sent (login
// links, one-time codes), not only this key's.
func DefaultVendorEndpoints(vendor string) []string {
	switch vendor {
	case VendorTwilio:
		return []string{"messages.create", "messages.fetch"}
	case VendorResend:
		return []string{"emails.send", "emails.batch", "emails.get"}
	}
	return DefaultEndpoints()
}
