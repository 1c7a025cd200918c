package resend

import "github.com/keybrake/keybrake"

// Pricer prices emails.send and emails.batch in USD micros from the
// operator's rates. At least one rate must be set: a Pricer without rates
// refuses, since keybrake cannot then tell what a send costs.
type Pricer struct {
	PerEmail     keybrake.Micros // per email sent, whatever its recipients
	PerRecipient keybrake.Micros // added per recipient (to + cc + bcc): Resend's quota counts each as an email
}

// Cost is what one request costs and counts.
type Cost struct {
	Micros     keybrake.Micros
	Emails     int // emails sent, for count caps
	Recipients int // recipients over every email
}

// Price prices the emails one request sends: a batch costs the sum of its
// emails and is reserved whole, so that either all of it fits under the
// caps or nothing is sent. Returns EFORBIDDEN when no rate is configured.
func (p Pricer) Price(emails []*Email) (Cost, error) {
	if p.PerEmail <= 0 && p.PerRecipient <= 0 {
		return Cost{}, keybrake.Errorf(keybrake.EFORBIDDEN, "no Resend rate is configured, so keybrake cannot price this request.")
	}
	var c Cost
	for _, e := range emails {
		c.Emails++
		c.Recipients += e.Recipients()
		c.Micros += p.PerEmail + p.PerRecipient*keybrake.Micros(e.Recipients())
	}
	return c, nil
}
