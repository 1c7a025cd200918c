package twiliosim

import (
	"strings"
	"unicode"
	"unicode/utf16"

	"github.com/keybrake/keybrake/twilio"
)

// segments counts the SMS segments of body as Twilio's own segment
// calculator (TwilioDevEd/message-segment-calculator) does, apart from
// keybrake's twilio.Segments: the encoding is GSM-7 when every character
// is in its alphabet, and a UCS-2 body is split into parts of 67 UTF-16
// code units only between graphemes, so a grapheme that does not fit a
// part's end moves whole into the next part (one longer than a part takes
// a part of its own). Graphemes are read simply: a character with the
// marks, variation selectors, emoji modifiers and ZWJ-joined characters
// after it.
//
// With smart (SmartEncoded=true) a few characters are first replaced as
// Twilio's Smart Encoding replaces them: a tab by seven spaces, … by three
// full stops, ½ by 1/2, ’ by an apostrophe.
func segments(body string, smart bool) (string, int) {
	if smart {
		body = strings.NewReplacer("\t", "       ", "…", "...", "½", "1/2", "’", "'").Replace(body)
	}
	enc, n := twilio.Segments(body)
	if enc != twilio.UCS2 {
		return enc, n
	}
	var widths []int
	total, joined := 0, false
	for _, r := range body {
		w := utf16.RuneLen(r)
		total += w
		extend := unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc) || r == 0x200D || (0x1F3FB <= r && r <= 0x1F3FF)
		if len(widths) > 0 && (extend || joined) {
			widths[len(widths)-1] += w
		} else {
			widths = append(widths, w)
		}
		joined = r == 0x200D
	}
	if total <= 70 {
		return enc, 1
	}
	n, used := 1, 0
	for _, w := range widths {
		if used > 0 && used+w > 67 {
			n++
			used = 0
		}
		used += w
	}
	return enc, n
}
