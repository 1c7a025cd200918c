package twilio

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
)

// MaxTimeLimit is the longest call Twilio places, in seconds, and the
// length of a call created without TimeLimit: four hours.
const MaxTimeLimit = 4 * 60 * 60

// FailedMessageFee is what Twilio bills for a message that ends failed
// (its "Failed Message Processing Fee", since 2024-09-30): $0.001. The
// message's price need not show it, so keybrake settles a failed message
// at no less (twilioOutcome), over-counting a failure Twilio exempts rather
// than releasing one it bills.
const FailedMessageFee keybrake.Micros = 1_000

// Pricer prices messages.create and calls.create in USD micros.
type Pricer struct {
	// Rates is the operator's table.
	Rates Rates
	// MaxCallSeconds, when above zero, is the longest call a key may
	// place: a larger TimeLimit is refused, and a call without TimeLimit
	// is priced at MaxCallSeconds and Cost.AddTimeLimit tells the proxy to
	// add TimeLimit to the body it forwards, so that Twilio cannot let the
	// call run longer than was reserved. When zero, a call without
	// TimeLimit is priced at MaxTimeLimit (Twilio's own default), which a
	// capped key should refuse with ErrTimeLimitRequired.
	MaxCallSeconds int
	// SpeechPer100 is what a call's text-to-speech in a priced voice
	// costs per started 100 characters (see Speech), on top of its
	// minutes; zero means DefaultSpeechPer100.
	SpeechPer100 keybrake.Micros
	// DefaultVoice is the account's default text-to-speech voice, set in
	// Twilio's Console, in which a <Say> without voice speaks. "" (not
	// declared) prices such a <Say> like a priced voice: keybrake cannot
	// read the Console's setting, and a Polly or Google default is billed
	// per character. Declare man or woman only if that is what the
	// account's Console says, for every language the keys use.
	DefaultVoice string
}

// Cost is what one request costs and counts.
type Cost struct {
	Micros   keybrake.Micros // the amount to reserve, rounded up
	Messages int             // messages the request sends, for count caps
	Calls    int             // calls the request places, for count caps
	Country  string          // ISO country of To
	// Countries are all the countries To may be in (Countries): Country
	// alone, or the countries of a shared code, priced at the dearest.
	Countries []string

	// Messages only.
	Encoding string // GSM7 or UCS2; for MMS, of the body MMS Converter would send
	Segments int    // SMS segments billed; for MMS, those MMS Converter would bill
	MMS      bool

	// Calls only.
	TimeLimit    int             // seconds reserved
	Minutes      int             // TimeLimit rounded up to whole minutes
	AddTimeLimit bool            // the body had no TimeLimit: forward it with TimeLimit=TimeLimit
	Speech       int64           // hundreds of characters spoken in priced voices (see Speech)
	SpeechMicros keybrake.Micros // what they cost, included in Micros
}

// ErrTimeLimitRequired is the refusal for a call without TimeLimit on a
// capped key when no maximum call length is configured.
func ErrTimeLimitRequired() error {
	return keybrake.ErrorParam("TimeLimit", "keybrake needs TimeLimit (seconds) on calls made with a capped key: "+
		"without it Twilio lets a call run %d seconds, and keybrake reserves what the call can cost before it is placed.", MaxTimeLimit)
}

// Price prices op with body form. Call it for what Classify says is
// ClassPriced (or ClassUnpriced on a key that allows unpriced operations:
// the price is then a floor).
//
//   - messages.create: To's country (see Country); MMS when MediaUrl is
//     given or SendAsMms=true, at the dearer of the country's mms rate and
//     the SMS that Twilio's MMS Converter would send instead
//     (ConvertedBody); otherwise Segments(Body) × its sms rate. Counts one
//     message.
//   - calls.create: TimeLimit, rounded up to whole minutes, × To's voice
//     rate (see MaxCallSeconds for a call without TimeLimit), plus the
//     Twiml's text-to-speech in priced voices (Speech × SpeechPer100).
//     Counts one call.
//
// Returns EINVALID naming the param for a missing or malformed To, From,
// Body or TimeLimit (Twilio's own checks, made before anything is sent);
// EFORBIDDEN for a destination keybrake cannot price: another channel
// (whatsapp:, client:, sip:), an unknown country, or a country without a
// configured rate.
func (p *Pricer) Price(op Operation, form *Form) (Cost, error) {
	if form == nil {
		form = &Form{}
	}
	switch op.Name {
	case "messages.create":
		return p.message(form)
	case "calls.create":
		return p.call(form)
	}
	return Cost{}, keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake cannot price %s.", op.Name)
}

func (p *Pricer) message(form *Form) (Cost, error) {
	c := Cost{Messages: 1}
	to, err := destination(form)
	if err != nil {
		return Cost{}, err
	}
	if c.Countries, err = Countries("To", to); err != nil {
		return Cost{}, err
	}
	c.Country = c.Countries[0]
	from, _ := form.Get("From")
	svc, _ := form.Get("MessagingServiceSid")
	switch {
	case from == "" && svc == "":
		return Cost{}, keybrake.ErrorParam("From", "A 'From' phone number or a 'MessagingServiceSid' is required.")
	case svc != "" && !isSid(svc, "MG"):
		return Cost{}, keybrake.ErrorParam("MessagingServiceSid", "Invalid MessagingServiceSid %q.", printable(svc))
	}
	body, _ := form.Get("Body")
	media := form.All("MediaUrl")
	if body == "" && len(media) == 0 {
		return Cost{}, keybrake.ErrorParam("Body", "Message body is required.")
	}
	if n := utf8.RuneCountInString(body); n > MaxBodyChars {
		return Cost{}, keybrake.ErrorParam("Body", "The concatenated message body exceeds the %d character limit (it has %d).", MaxBodyChars, n)
	}
	asMMS, given := form.Get("SendAsMms")
	if given && asMMS != "true" && asMMS != "false" {
		// Twilio may read True or 1 as true: a value keybrake does not
		// read as Twilio does would price an MMS as an SMS.
		return Cost{}, keybrake.ErrorParam("SendAsMms", "SendAsMms must be true or false.")
	}
	sms, err := p.Rates.dearest(c.Countries, "sms")
	if err != nil {
		return Cost{}, err
	}
	if len(media) > 0 || asMMS == "true" {
		// MMS Converter, on by default: to a carrier that takes no MMS
		// (abroad, and some in the US and Canada) Twilio sends the body
		// and a link to the media as SMS, billed by the segment. A long
		// body costs far more that way than one MMS, and the sender
		// picks the number, so the MMS reserves the dearer of the two.
		c.MMS = true
		mms, err := p.Rates.dearest(c.Countries, "mms")
		if err != nil {
			return Cost{}, err
		}
		c.Encoding, c.Segments = Segments(ConvertedBody(body, len(media)))
		c.Micros = max(mms, sms*keybrake.Micros(c.Segments))
		return c, nil
	}
	c.Encoding, c.Segments = Segments(body)
	if mayRCS(from, svc) {
		// A Messaging Service with an RCS sender in its pool (which
		// keybrake cannot read) sends RCS first, billed by the UTF-8
		// segment at the SMS rate in the United States.
		if n := RCSSegments(body); n > c.Segments {
			c.Encoding, c.Segments = UTF8, n
		}
	}
	c.Micros = sms * keybrake.Micros(c.Segments)
	return c, nil
}

// mayRCS reports whether a message from from, through the messaging
// service svc, may be sent as RCS: RCS goes out only through a Messaging
// Service, named by MessagingServiceSid or as From (MG…), or from an RCS
// sender (rcs:…). A From that is a phone number or a short code sends SMS.
func mayRCS(from, svc string) bool {
	if svc != "" {
		return true
	}
	if d, ok := strings.CutPrefix(from, "+"); ok && digits(d) {
		return false
	}
	return !digits(from)
}

// MaxConverterLink is the longest link, in characters, keybrake assumes
// Twilio's MMS Converter adds to a converted message for each medium.
const MaxConverterLink = 40

// ConvertedBody is the longest SMS body Twilio's MMS Converter can make
// of an MMS with body and media media: the body, then a line with a link
// of MaxConverterLink characters for each medium.
func ConvertedBody(body string, media int) string {
	link := "\n" + strings.Repeat("x", MaxConverterLink)
	return body + strings.Repeat(link, media)
}

func (p *Pricer) call(form *Form) (Cost, error) {
	c := Cost{Calls: 1}
	to, err := destination(form)
	if err != nil {
		return Cost{}, err
	}
	if c.Countries, err = Countries("To", to); err != nil {
		return Cost{}, err
	}
	c.Country = c.Countries[0]
	if from, _ := form.Get("From"); from == "" {
		return Cost{}, keybrake.ErrorParam("From", "A 'From' phone number is required.")
	}
	limit, given := form.Get("TimeLimit")
	switch {
	case given:
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > MaxTimeLimit || strings.HasPrefix(limit, "+") || strings.HasPrefix(limit, "0") {
			return Cost{}, keybrake.ErrorParam("TimeLimit", "TimeLimit must be a whole number of seconds from 1 to %d.", MaxTimeLimit)
		}
		if p.MaxCallSeconds > 0 && n > p.MaxCallSeconds {
			return Cost{}, keybrake.ErrorParam("TimeLimit", "TimeLimit %d is above the longest call keybrake allows, %d seconds.", n, p.MaxCallSeconds)
		}
		c.TimeLimit = n
	case p.MaxCallSeconds > 0:
		c.TimeLimit, c.AddTimeLimit = min(p.MaxCallSeconds, MaxTimeLimit), true
	default:
		c.TimeLimit = MaxTimeLimit
	}
	c.Minutes = (c.TimeLimit + 59) / 60
	rate, err := p.Rates.dearest(c.Countries, "voice")
	if err != nil {
		return Cost{}, err
	}
	c.Micros = rate * keybrake.Micros(c.Minutes)
	// A Twiml whose speech cannot be priced is unpriced (Classify): the
	// price is then the floor of its minutes.
	twiml, _ := form.Get("Twiml")
	c.Speech, c.SpeechMicros, _ = p.speech(twiml)
	c.Micros += c.SpeechMicros
	return c, nil
}

// SpeechCost is what the text-to-speech of a calls.create body costs
// (see Speech): Twilio bills it apart from the call, whose price does not
// include it, so a call settled at its price must keep it counted.
func (p *Pricer) SpeechCost(form *Form) (keybrake.Micros, error) {
	twiml, _ := form.Get("Twiml")
	_, m, err := p.speech(twiml)
	return m, err
}

func (p *Pricer) speech(twiml string) (int64, keybrake.Micros, error) {
	if twiml == "" {
		return 0, 0, nil
	}
	n, err := Speech(twiml, p.DefaultVoice)
	if err != nil {
		return 0, 0, keybrake.ErrorParam("Twiml", "keybrake cannot price the Twiml's text-to-speech: %s.", err.Error())
	}
	rate := p.SpeechPer100
	if rate <= 0 {
		rate = DefaultSpeechPer100
	}
	return n, rate * keybrake.Micros(n), nil
}

// destination returns To, refusing channels keybrake does not price.
func destination(form *Form) (string, error) {
	to, _ := form.Get("To")
	if to == "" {
		return "", keybrake.ErrorParam("To", "A 'To' phone number is required.")
	}
	if channel, _, ok := strings.Cut(to, ":"); ok {
		return "", keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake prices SMS, MMS and calls to phone numbers only, not %s: addresses.", printable(channel))
	}
	return to, nil
}

// ParsePrice reads the price Twilio reports on a message or call: a
// decimal string, negative for a charge ("-0.00790"), null (nil) until
// Twilio knows it, in unit (price_unit, "USD"). It returns the charge in
// USD micros, rounded up, and known=false while the price is null.
//
// Returns EINVALID for a malformed price and EFORBIDDEN for a unit other
// than USD, which keybrake cannot convert.
func ParsePrice(price *string, unit string) (m keybrake.Micros, known bool, err error) {
	if price == nil || *price == "" {
		return 0, false, nil
	}
	if !strings.EqualFold(unit, "USD") {
		return 0, false, keybrake.Errorf(keybrake.EFORBIDDEN, "Twilio reported a price in %s; keybrake settles USD only.", printable(unit))
	}
	s := strings.TrimPrefix(*price, "-")
	whole, frac, _ := strings.Cut(s, ".")
	if !digits(whole) || !digits(frac) {
		return 0, false, keybrake.Errorf(keybrake.EINVALID, "Twilio reported a malformed price %q.", printable(*price))
	}
	roundUp := false
	if len(frac) > 6 {
		roundUp = strings.Trim(frac[6:], "0") != ""
		frac = frac[:6]
	}
	if frac != "" {
		whole += "." + frac
	}
	if m, err = keybrake.ParseUSD(whole); err != nil {
		return 0, false, keybrake.Errorf(keybrake.EINVALID, "Twilio reported a malformed price %q.", printable(*price))
	}
	if roundUp {
		m++
	}
	return m, true, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
