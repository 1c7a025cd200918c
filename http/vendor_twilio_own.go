package http

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/twilio"
)

// A message or call to one of the account's own numbers is billed twice,
// out and in, and runs that number's webhook, which may reply, forward or
// <Dial> at the account's expense: nothing keybrake can price. So a create
// whose To is an incoming phone number of the account is unpriced. The
// numbers are read from Twilio (IncomingPhoneNumbers) and kept
// ownNumbersTTL; a create waits for the first read, and is refused when
// the list cannot be read (fail closed).
const (
	ownNumbersTTL      = 5 * time.Minute
	ownNumbersPageSize = 1000
	// maxOwnNumberPages bounds the read; an account with more numbers
	// cannot be checked, and its creates are refused.
	maxOwnNumberPages = 50
)

// twilioOwnNumbers is the account's incoming phone numbers, as last read.
type twilioOwnNumbers struct {
	rt  http.RoundTripper
	now func() time.Time

	mu  sync.Mutex // held while reading, so that one read serves everyone waiting
	set map[string]bool
	at  time.Time
}

// has reports whether number (E.164) is one of the account's own.
func (o *twilioOwnNumbers) has(ctx context.Context, v *twilioVendor, number string) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	if o.set == nil || now.Sub(o.at) >= ownNumbersTTL || now.Before(o.at) {
		set, err := o.read(ctx, v)
		if err != nil {
			return false, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake could not read this account's own phone numbers from Twilio (%s), which it needs to tell whether To is one of them (billed again as inbound and answered by that number's webhook); nothing was sent.", err.Error())
		}
		o.set, o.at = set, now
	}
	return o.set[number], nil
}

func (o *twilioOwnNumbers) read(ctx context.Context, v *twilioVendor) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	set := map[string]bool{}
	next := "/" + twilio.APIVersion + "/Accounts/" + v.cfg.AccountSid + "/IncomingPhoneNumbers.json?" + url.Values{"PageSize": {strconv.Itoa(ownNumbersPageSize)}}.Encode()
	for range maxOwnNumberPages {
		body, err := v.get(ctx, next, o.rt)
		if err != nil {
			return nil, err
		}
		var p struct {
			Numbers []struct {
				PhoneNumber string `json:"phone_number"`
			} `json:"incoming_phone_numbers"`
			NextPageURI string `json:"next_page_uri"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, err
		}
		for _, n := range p.Numbers {
			set[n.PhoneNumber] = true
		}
		if next = p.NextPageURI; next == "" {
			return set, nil
		}
	}
	return nil, errTooManyNumbers
}

var errTooManyNumbers = keybrake.Errorf(keybrake.EINTERNAL, "the account has more than %d numbers", maxOwnNumberPages*ownNumbersPageSize)

// ownTo reclassifies a create to one of the account's own numbers as
// unpriced (see above).
func (v *twilioVendor) ownTo(ctx context.Context, req *VendorRequest) error {
	tr := req.Parsed.(*twilioRequest)
	if v.own == nil || (tr.op.Name != "messages.create" && tr.op.Name != "calls.create") {
		return nil
	}
	to, _ := tr.form.Get("To")
	if _, rest, ok := strings.Cut(to, ":"); ok {
		to = rest // whatsapp:+1…: the pricer refuses it anyway
	}
	own, err := v.own.has(ctx, v, to)
	if err != nil || !own {
		return err
	}
	req.Class = ClassUnpriced
	req.Reason = "To " + to + " is one of this account's own numbers: Twilio bills it again as inbound and runs that number's webhook, which may reply, forward or <Dial> where keybrake cannot see"
	return nil
}
