package keybrake

// A key's scope is what its vendor's requests may name beyond the
// operation: the destinations, senders and recipients of the messages,
// calls and emails it sends. A key carries the scope of its own vendor
// only (the admin API refuses another vendor's); the vendor packages
// decide a request against it (twilio.Policy, resend.Policy) before
// anything is reserved or forwarded. An empty list allows anything.

// TwilioScope is a Twilio key's allowlists. Every entry is stored as the
// admin API normalized it.
type TwilioScope struct {
	// Countries are the ISO 3166-1 alpha-2 countries (upper case) a
	// message's or call's To may be in: "US", "CA".
	Countries []string `json:"allowed_countries,omitempty"`
	// NumberPrefixes are E.164 prefixes To must start with: "+1415".
	NumberPrefixes []string `json:"allowed_number_prefixes,omitempty"`
	// From are the senders the key may send or call from, exactly as
	// Twilio takes them: "+14155550100", "whatsapp:+14155550100".
	From []string `json:"allowed_from,omitempty"`
	// MessagingServices are the Messaging Service sids (MG…) the key may
	// send through.
	MessagingServices []string `json:"allowed_messaging_services,omitempty"`
}

// IsZero reports whether s allows everything.
func (s TwilioScope) IsZero() bool {
	return len(s.Countries) == 0 && len(s.NumberPrefixes) == 0 && len(s.From) == 0 && len(s.MessagingServices) == 0
}

// ResendScope is a Resend key's allowlists.
type ResendScope struct {
	// Senders are the from addresses the key may use: an address
	// ("billing@example.com") or a whole domain ("example.com"), lower
	// case, domains in their ASCII (xn--) form. A domain does not allow
	// its subdomains.
	Senders []string `json:"allowed_senders,omitempty"`
	// RecipientDomains are the domains every recipient (to, cc and bcc of
	// every email) must be in, exactly: "example.com" does not allow
	// "mail.example.com".
	RecipientDomains []string `json:"allowed_recipient_domains,omitempty"`
	// MaxRecipients, when above zero, bounds to + cc + bcc of each email.
	MaxRecipients int `json:"max_recipients,omitempty"`
}

// IsZero reports whether s allows everything.
func (s ResendScope) IsZero() bool {
	return len(s.Senders) == 0 && len(s.RecipientDomains) == 0 && s.MaxRecipients == 0
}

// Scope is the one stored form of a key's scope: the scope of its vendor,
// the other nil. Both stores keep it as one JSON value.
type Scope struct {
	Twilio *TwilioScope `json:"twilio,omitempty"`
	Resend *ResendScope `json:"resend,omitempty"`
}

// ScopeOf returns k's scope, nil when it has none.
func ScopeOf(k *Key) *Scope {
	if k.TwilioScope == nil && k.ResendScope == nil {
		return nil
	}
	return &Scope{Twilio: k.TwilioScope, Resend: k.ResendScope}
}

// SetScope sets k's scope fields from sc (nil for none).
func (k *Key) SetScope(sc *Scope) {
	k.TwilioScope, k.ResendScope = nil, nil
	if sc != nil {
		k.TwilioScope, k.ResendScope = sc.Twilio, sc.Resend
	}
}

// applyScope replaces the scopes upd sets, copying the lists so that k
// shares nothing with upd.
func (k *Key) applyScope(upd KeyUpdate) {
	if upd.TwilioScope != nil {
		k.TwilioScope = nil
		if !upd.TwilioScope.IsZero() {
			s := TwilioScope{
				Countries:         clone(upd.TwilioScope.Countries),
				NumberPrefixes:    clone(upd.TwilioScope.NumberPrefixes),
				From:              clone(upd.TwilioScope.From),
				MessagingServices: clone(upd.TwilioScope.MessagingServices),
			}
			k.TwilioScope = &s
		}
	}
	if upd.ResendScope != nil {
		k.ResendScope = nil
		if !upd.ResendScope.IsZero() {
			s := ResendScope{Senders: clone(upd.ResendScope.Senders), RecipientDomains: clone(upd.ResendScope.RecipientDomains), MaxRecipients: upd.ResendScope.MaxRecipients}
			k.ResendScope = &s
		}
	}
}

func clone(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	return append([]string(nil), l...)
}
