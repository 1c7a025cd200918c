package stripe

// rawDataFields are the last segments of the parameter names under which
// Stripe's API takes raw card or bank account data: card[number],
// card[cvc], payment_method_data[card][number], card[network_token][number],
// card_present[number], bank_account[account_number],
// payment_method_data[us_bank_account][account_number],
// external_account[account_number], sepa_debit[iban] and the other debit
// schemes' account_number. The value says whether the name is sensitive at
// the top level too: a top-level number is an invoice's number, never a
// card's. Routing numbers and sort codes identify a bank, not an account,
// and are left alone.
var rawDataFields = map[string]bool{
	"number":         false,
	"cvc":            true,
	"cvv":            true,
	"account_number": true,
	"iban":           true,
}

// CardData reports the first parameter of form that carries raw card or bank
// account data: a parameter named as above with a non-empty value, or any
// parameter whose name or value holds something that looks like a card
// number (see LooksLikePAN), such as a card number pasted into metadata or a
// description. keybrake refuses such requests before storing or forwarding
// anything, as Stripe itself refuses raw card numbers sent with a secret key
// by default: card data belongs in Stripe.js or Elements, which turn it into
// a token or a PaymentMethod in the customer's browser.
func CardData(form *Form) (param string, found bool) {
	if form == nil {
		return "", false
	}
	for _, p := range form.Pairs {
		if IsCardData(p.Key, p.Value) {
			return p.Key, true
		}
	}
	return "", false
}

// IsCardData reports whether the parameter key=value carries raw card or
// bank account data as CardData reads it; the approval's view of a
// request masks such a parameter (http/approval_params.go).
func IsCardData(key, value string) bool {
	path, ok := SplitKey(key)
	if !ok {
		return false
	}
	last := path[len(path)-1]
	if top, ok := rawDataFields[last]; ok && value != "" && (top || len(path) > 1) {
		return true
	}
	if LooksLikePAN(value) {
		return true
	}
	for _, seg := range path {
		if LooksLikePAN(seg) {
			return true
		}
	}
	return false
}

// LooksLikePAN reports whether s holds a run of 13 to 19 digits, possibly
// grouped by single spaces or dashes (4242 4242 4242 4242,
// 4242-4242-4242-4242), that starts with 2 to 6 as the card networks' numbers
// do and passes the Luhn check. A longer run of digits is not a card number
// (it would be a card number followed by more digits), nor a shorter one. A
// run touching a letter or an underscore is part of a word — a hex digest,
// an object id, the billing worker's kb_… idempotency keys — and not a card
// number: about 2 in 1,000 random 64-digit hex strings hold a Luhn-valid run
// of card length, and refusing them refused legitimate charges.
func LooksLikePAN(s string) bool {
	var digits []byte
	inWord := false // the run began right after a letter or underscore
	flush := func(next byte) bool {
		ok := !inWord && !isWordByte(next) && isPAN(digits)
		digits = digits[:0]
		return ok
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if len(digits) == 0 {
				inWord = i > 0 && isWordByte(s[i-1])
			}
			digits = append(digits, c)
		case (c == ' ' || c == '-') && len(digits) > 0 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			// A single separator between digits continues the run.
		default:
			if len(digits) > 0 && flush(c) {
				return true
			}
		}
	}
	return len(digits) > 0 && flush(0)
}

// isWordByte reports whether c is an ASCII letter or an underscore: what
// joins a run of digits into an identifier.
func isWordByte(c byte) bool {
	return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// isPAN applies the length, network and Luhn checks to a run of digits.
func isPAN(d []byte) bool {
	if len(d) < 13 || len(d) > 19 || d[0] < '2' || d[0] > '6' {
		return false
	}
	sum := 0
	for i := 0; i < len(d); i++ {
		n := int(d[len(d)-1-i] - '0')
		if i%2 == 1 {
			n *= 2
			if n > 9 {
				n -= 9
			}
		}
		sum += n
	}
	return sum%10 == 0
}
