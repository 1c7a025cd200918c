package twilio

import "unicode/utf16"

// Encodings of a message body.
const (
	GSM7 = "GSM-7" // the GSM 03.38 alphabet: 160 characters in one segment, 153 per part when split
	UCS2 = "UCS-2" // any other character: 70 UTF-16 code units in one segment, 67 per part
)

// MaxBodyChars is the longest body Twilio accepts, in characters.
const MaxBodyChars = 1600

// gsmBasic is the GSM 03.38 default alphabet: one septet each.
const gsmBasic = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?" +
	"¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"

// gsmExtension is the GSM 03.38 extension table: an escape and a septet,
// so two septets each.
const gsmExtension = "\f^{}\\[~]|€"

var gsmWidth = func() map[rune]int {
	m := map[rune]int{}
	for _, r := range gsmBasic {
		m[r] = 1
	}
	for _, r := range gsmExtension {
		m[r] = 2
	}
	return m
}()

// Segments returns the encoding of body and the number of SMS segments
// Twilio bills for it, counting as the carriers do: a body entirely in
// the GSM-7 alphabet fits 160 septets in one segment, and is otherwise
// split into parts of 153 (a User Data Header takes the rest), with each
// extension-table character (^ { } \ [ ~ ] | € and form feed) taking two
// septets that are never split across parts; any other body is UCS-2, 70
// UTF-16 code units in one segment or parts of 67, a surrogate pair (an
// emoji) taking two units never split across parts. An empty body is one
// segment.
//
// Twilio's optional Smart Encoding can turn some UCS-2 bodies into GSM-7
// ones, so Segments never counts fewer segments than Twilio bills.
func Segments(body string) (encoding string, segments int) {
	widths := make([]int, 0, len(body))
	encoding = GSM7
	for _, r := range body {
		w, ok := gsmWidth[r]
		if !ok {
			encoding = UCS2
			break
		}
		widths = append(widths, w)
	}
	single, part := 160, 153
	if encoding == UCS2 {
		widths = widths[:0]
		for _, r := range body {
			widths = append(widths, utf16.RuneLen(r))
		}
		single, part = 70, 67
	}
	total := 0
	for _, w := range widths {
		total += w
	}
	if total <= single {
		return encoding, 1
	}
	segments, used := 1, 0
	for _, w := range widths {
		if used+w > part {
			segments++
			used = 0
		}
		used += w
	}
	return encoding, segments
}
