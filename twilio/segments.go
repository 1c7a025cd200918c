package twilio

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Encodings of a message body.
const (
	GSM7 = "GSM-7" // the GSM 03.38 alphabet: 160 characters in one segment, 153 per part when split
	UCS2 = "UCS-2" // any other character: 70 UTF-16 code units in one segment, 67 per part
	UTF8 = "UTF-8" // RCS: text billed in segments of 160 UTF-8 bytes (RCSSegments)
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
// Twilio bills for it, never fewer: a body entirely in the GSM-7 alphabet
// fits 160 septets in one segment, and is otherwise split into parts of
// 153 (a User Data Header takes the rest), with each extension-table
// character (^ { } \ [ ~ ] | € and form feed) taking two septets that are
// never split across parts; any other body is UCS-2, 70 UTF-16 code units
// in one segment or parts of 67. A UCS-2 body is split only between
// grapheme clusters, as Twilio's own segment calculator
// (TwilioDevEd/message-segment-calculator) splits it: an emoji sequence
// joined by ZWJ, a flag, a letter with its combining marks is never cut,
// so each cluster near a part's end pushes the whole cluster into the next
// part. keybrake's clusters (see cluster) are never smaller than Unicode's,
// so it never counts fewer parts; a cluster longer than a part is counted
// as the parts it fills on its own. An empty body is one segment.
//
// Twilio's Smart Encoding (SmartEncoded=true, or a Messaging Service's
// setting, which keybrake cannot read) replaces some characters before
// the body is encoded: it can make a UCS-2 body GSM-7, but a replacement
// can also be longer than the character it replaces (a tab becomes seven
// spaces), so Segments returns the larger of the counts with and without
// it (see smartEncoded).
func Segments(body string) (encoding string, segments int) {
	encoding, segments = count(body)
	if s, ok := smartEncoded(body); ok {
		if e, n := count(s); n > segments {
			return e, n
		}
	}
	return encoding, segments
}

// count counts the segments of body as sent, without Smart Encoding.
func count(body string) (encoding string, segments int) {
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
		widths = clusterWidths(body, widths[:0])
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
		if w > part {
			// A cluster no part holds: counted as the parts it fills,
			// alone, and the next cluster starts a part of its own.
			if used > 0 {
				segments++
			}
			segments += (w+part-1)/part - 1
			used = part
			continue
		}
		if used+w > part {
			segments++
			used = 0
		}
		used += w
	}
	return encoding, segments
}

// clusterWidths appends to dst the UTF-16 length of each cluster of body
// (see cluster).
func clusterWidths(body string, dst []int) []int {
	prev, w := rune(-1), 0
	for _, r := range body {
		if prev >= 0 && !joins(prev, r) {
			dst = append(dst, w)
			w = 0
		}
		w += utf16.RuneLen(r)
		prev = r
	}
	if prev >= 0 {
		dst = append(dst, w)
	}
	return dst
}

// joins reports whether keybrake keeps a and the rune b after it in one
// cluster, never splitting them across segments. It keeps together at
// least what Unicode's grapheme cluster rules (UAX #29) do, and more where
// keeping less would need the full tables: a break is allowed only where
// UAX #29 surely breaks, so keybrake's clusters are unions of Unicode's and
// its count of parts is never below one made on Unicode's clusters.
//
//   - CR LF (GB3).
//   - before any mark (Mn, Mc, Me), ZWNJ, ZWJ, emoji modifier, tag
//     character, half-width voiced sound mark, Thai and Lao AM (GB9, GB9a:
//     Extend, ZWJ, SpacingMark), and before a code point Go's tables do not
//     know (a mark of a later Unicode version).
//   - after ZWJ (GB11, emoji ZWJ sequences), after a Prepend character
//     (GB9b), and after a mark of an Indic script (GB9c: a virama joins the
//     consonant after it).
//   - between Hangul jamo and syllables (GB6 to GB8) and between regional
//     indicators (GB12, GB13: a run of flags is kept whole).
func joins(a, b rune) bool {
	switch {
	case a == '\r' && b == '\n':
		return true
	case extendLike(b), a == 0x200D, prepend(a):
		return true
	case 0x0900 <= a && a <= 0x0DFF && unicode.In(a, unicode.Mn, unicode.Mc):
		return true
	case hangul(a) && hangul(b):
		return true
	case regional(a) && regional(b):
		return true
	}
	return false
}

func extendLike(r rune) bool {
	switch {
	case unicode.In(r, unicode.Mn, unicode.Mc, unicode.Me):
		return true
	case r == 0x200C, r == 0x200D, r == 0x0E33, r == 0x0EB3, 0xFF9E <= r && r <= 0xFF9F,
		0x1F3FB <= r && r <= 0x1F3FF, 0xE0020 <= r && r <= 0xE007F:
		return true
	}
	// Unassigned in Go's tables: perhaps a mark Unicode added since.
	return !unicode.In(r, unicode.L, unicode.N, unicode.P, unicode.S, unicode.Z,
		unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
}

// prepend reports whether r is a Prepend character of UAX #29 (Unicode
// 15.1), which joins the character after it.
func prepend(r rune) bool {
	switch {
	case 0x0600 <= r && r <= 0x0605, r == 0x06DD, r == 0x070F, r == 0x0890, r == 0x0891, r == 0x08E2,
		r == 0x0D4E, r == 0x110BD, r == 0x110CD, r == 0x111C2, r == 0x111C3, r == 0x1193F, r == 0x11941,
		r == 0x11A3A, 0x11A84 <= r && r <= 0x11A89, r == 0x11D46, r == 0x11F02:
		return true
	}
	return false
}

func hangul(r rune) bool {
	return 0x1100 <= r && r <= 0x11FF || 0xA960 <= r && r <= 0xA97F || 0xD7B0 <= r && r <= 0xD7FF || 0xAC00 <= r && r <= 0xD7A3
}

func regional(r rune) bool { return 0x1F1E6 <= r && r <= 0x1F1FF }

// RCSSegments returns the number of segments Twilio bills for body sent
// as an RCS text message in the United States: "counted in segments of
// 160 UTF-8 bytes, similar to SMS" (Twilio, "Calculating Character Count
// of RCS Messages"), at the SMS segment's price. A character is never
// split across segments, so a segment may hold fewer than 160 bytes. An
// empty body is one segment.
//
// UTF-8 counts differently from SMS: é is one GSM-7 septet but two bytes,
// あ or € one UTF-16 unit but three bytes, so an RCS message can cost up to
// twice its SMS segments.
func RCSSegments(body string) int {
	segments, used := 1, 0
	for _, r := range body {
		w := utf8.RuneLen(r)
		if w < 0 {
			w = 3 // an invalid rune is sent as U+FFFD
		}
		if used+w > 160 {
			segments++
			used = 0
		}
		used += w
	}
	return segments
}
