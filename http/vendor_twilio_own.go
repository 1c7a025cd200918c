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
// numbers are read from Twilio (IncomingPhoneNumbers): a create waits for
// the first read, and is refused when the list cannot be read (fail
// closed). Past ownNumbersTTL the list is read again in the background
// while creates go on with the last one, so a read (a round trip or more
// to Twilio) never stalls them; past ownNumbersMaxAge they wait for it.
const (
	ownNumbersTTL      = 5 * time.Minute
	ownNumbersMaxAge   = 3 * ownNumbersTTL
	ownNumbersPageSize = 1000
	// maxOwnNumberPages bounds the read; an account with more numbers
	// cannot be checked, and its creates are refused.
	maxOwnNumberPages = 50
)

// twilioOwnNumbers is the account's incoming phone numbers, as last read.
type twilioOwnNumbers struct {
	rt  http.RoundTripper
	now func() time.Time

	mu      sync.Mutex
	set     map[string]bool
	at      time.Time     // when set was read
	reading chan struct{} // closed when the read in flight ends; nil when none is
	err     error         // the last read's failure, nil after a success
}

// has reports whether number (E.164) is one of the account's own.
func (o *twilioOwnNumbers) has(ctx context.Context, v *twilioVendor, number string) (bool, error) {
	o.mu.Lock()
	now := o.now()
	age := now.Sub(o.at)
	if o.set != nil && age >= 0 && age < ownNumbersMaxAge {
		if age >= ownNumbersTTL {
			o.startRead(v)
		}
		own := ownNumber(o.set, number)
		o.mu.Unlock()
		return own, nil
	}
	done := o.startRead(v)
	o.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return false, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake was still reading this account's own phone numbers from Twilio when the request ended; nothing was sent.")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.set == nil || o.err != nil && o.now().Sub(o.at) >= ownNumbersMaxAge {
		return false, keybrake.Errorf(keybrake.EUNAVAILABLE, "keybrake could not read this account's own phone numbers from Twilio (%s), which it needs to tell whether To is one of them (billed again as inbound and answered by that number's webhook); nothing was sent.", o.err.Error())
	}
	return ownNumber(o.set, number), nil
}

// ownNumber reports whether number is in set, as written or with a
// national trunk prefix after its country code: +44 0 7700 900123 is
// +44 7700 900123 to a parser that strips the prefix, as libphonenumber
// does ("1" in the +1 plan, "0" in most others), and keybrake cannot show
// Twilio's does not. set holds E.164 numbers as Twilio lists them.
func ownNumber(set map[string]bool, number string) bool {
	if set[number] {
		return true
	}
	cc, ok := twilio.CallingCode(number)
	if !ok {
		return false
	}
	rest := number[1+len(cc):]
	if rest == "" || rest[0] != '0' && (cc != "1" || rest[0] != '1') {
		return false
	}
	return set["+"+cc+rest[1:]]
}

// startRead starts reading the numbers unless a read is in flight, and
// returns the channel closed when that read ends. o.mu is held. The read
// is not the request's: a client that gives up does not cancel it for the
// others waiting.
func (o *twilioOwnNumbers) startRead(v *twilioVendor) <-chan struct{} {
	if o.reading != nil {
		return o.reading
	}
	done := make(chan struct{})
	o.reading = done
	go func() {
		set, err := o.read(context.Background(), v)
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.err = err; err == nil {
			o.set, o.at = set, o.now()
		}
		o.reading = nil
		close(done)
	}()
	return done
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
