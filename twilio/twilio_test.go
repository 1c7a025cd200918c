package twilio_test

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/twilio"
)

const acct = "AC0123456789abcdef0123456789abcdef"

func TestParseOperation(t *testing.T) {
	base := "/2010-04-01/Accounts/" + acct
	sm := "SM0123456789abcdef0123456789abcdef"
	ca := "CA0123456789abcdef0123456789abcdef"
	tests := []struct {
		method, path string
		name         string
		class        twilio.Class
		code         string
	}{
		{"POST", base + "/Messages.json", "messages.create", twilio.ClassPriced, ""},
		{"GET", base + "/Messages.json", "messages.list", twilio.ClassRead, ""},
		{"GET", base + "/Messages/" + sm + ".json", "messages.fetch", twilio.ClassRead, ""},
		{"POST", base + "/Messages/" + sm + ".json", "messages.update", twilio.ClassWrite, ""},
		{"DELETE", base + "/Messages/" + sm + ".json", "messages.delete", twilio.ClassWrite, ""},
		{"POST", base + "/Calls.json", "calls.create", twilio.ClassPriced, ""},
		{"GET", base + "/Calls.json", "calls.list", twilio.ClassRead, ""},
		{"GET", base + "/Calls/" + ca + ".json", "calls.fetch", twilio.ClassRead, ""},
		{"POST", base + "/Calls/" + ca + ".json", "calls.update", twilio.ClassWrite, ""},
		{"GET", base + ".json", "accounts.fetch", twilio.ClassRead, ""},
		{"GET", base + "/IncomingPhoneNumbers.json", "incoming_phone_numbers.list", twilio.ClassRead, ""},
		{"GET", base + "/Balance.json", "balance.fetch", twilio.ClassRead, ""},

		// Default deny: everything else.
		{"POST", base + ".json", "", 0, keybrake.ENOTFOUND},                              // accounts.update (suspend, rename)
		{"POST", base + "/IncomingPhoneNumbers.json", "", 0, keybrake.ENOTFOUND},         // buying a number
		{"DELETE", base + "/Calls/" + ca + ".json", "", 0, keybrake.ENOTFOUND},           // calls.delete
		{"POST", base + "/Calls/" + ca + "/Recordings.json", "", 0, keybrake.ENOTFOUND},  // nested
		{"POST", base + "/Conferences.json", "", 0, keybrake.ENOTFOUND},                  // other resources
		{"POST", base + "/Keys.json", "", 0, keybrake.ENOTFOUND},                         // API keys
		{"GET", base + "/Messages/" + ca + ".json", "", 0, keybrake.ENOTFOUND},           // a call sid as a message
		{"GET", base + "/Messages/" + sm, "", 0, keybrake.ENOTFOUND},                     // without .json
		{"GET", base + "/Messages.xml", "", 0, keybrake.ENOTFOUND},                       // XML answers
		{"POST", "/v1/Services", "", 0, keybrake.ENOTFOUND},                              // another host's API
		{"PUT", base + "/Messages.json", "", 0, keybrake.ENOTFOUND},                      // other methods
		{"GET", "/2010-04-01/Accounts.json", "", 0, keybrake.ENOTFOUND},                  // listing sub-accounts
		{"GET", "/2010-04-01/Accounts/ACnothex/Messages.json", "", 0, keybrake.EINVALID}, // bad account sid
		{"GET", "/2010-04-01/Accounts/" + strings.ToUpper(acct) + ".json", "", 0, keybrake.EINVALID},
		{"GET", base + "/Messages%2Ejson", "", 0, keybrake.EINVALID},   // escapes
		{"GET", base + "/../Messages.json", "", 0, keybrake.ENOTFOUND}, // dot segments
		{"GET", base + "/Messages.json?x=1", "", 0, keybrake.EINVALID}, // a query in the path
		{"GET", base + "/Messages.json\x00", "", 0, keybrake.EINVALID},
		{"GET", base + "/" + strings.Repeat("a", 300), "", 0, keybrake.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			op, err := twilio.ParseOperation(tt.method, tt.path)
			if got := keybrake.ErrorCode(err); got != tt.code {
				t.Fatalf("code = %q, want %q (%v)", got, tt.code, err)
			}
			if err != nil {
				return
			}
			if op.Name != tt.name || op.Class != tt.class || op.Account != acct {
				t.Errorf("op = %+v, want %s %s", op, tt.name, tt.class)
			}
		})
	}
}

func TestParseForm(t *testing.T) {
	tests := []struct {
		name, body string
		code       string
	}{
		{"OK", "To=%2B14155550100&From=%2B14155550199&Body=hi", ""},
		{"OKMediaList", "MediaUrl=https%3A%2F%2Fa&MediaUrl=https%3A%2F%2Fb", ""},
		{"ErrTwoTo", "To=%2B14155550100&To=%2B18765550100", keybrake.EINVALID},
		{"ErrTwoBody", "Body=a&Body=b", keybrake.EINVALID},
		{"ErrBadEscape", "Body=%zz", keybrake.EINVALID},
		{"ErrBadName", "to[0]=x", keybrake.EINVALID},
		{"ErrEmptyName", "=x", keybrake.EINVALID},
		{"ErrInvalidUTF8", "Body=%ff", keybrake.EINVALID},
		{"ErrTooManyMedia", strings.Repeat("MediaUrl=x&", 11), keybrake.EINVALID},
		{"ErrTooMany", strings.Repeat("A=1&", 201), keybrake.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := twilio.ParseForm(tt.body)
			if got := keybrake.ErrorCode(err); got != tt.code {
				t.Fatalf("code = %q, want %q (%v)", got, tt.code, err)
			}
		})
	}
}

func TestSegments(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		encoding string
		segments int
	}{
		{"Empty", "", twilio.GSM7, 1},
		{"GSM160", strings.Repeat("a", 160), twilio.GSM7, 1},
		{"GSM161", strings.Repeat("a", 161), twilio.GSM7, 2},
		{"GSM306", strings.Repeat("a", 306), twilio.GSM7, 2},
		{"GSM307", strings.Repeat("a", 307), twilio.GSM7, 3},
		{"GSMAccents", strings.Repeat("é", 160), twilio.GSM7, 1},
		{"ExtensionCountsDouble", strings.Repeat("€", 80), twilio.GSM7, 1},
		{"ExtensionOverflow", strings.Repeat("€", 81), twilio.GSM7, 2},
		{"ExtensionFits", strings.Repeat("a", 152) + "[" + "aaaaaa", twilio.GSM7, 1},
		{"ExtensionNotSplit", strings.Repeat("a", 152) + "[" + "aaaaaaaa", twilio.GSM7, 2},
		{"ExtensionNotSplitAcross", strings.Repeat("a", 152) + "[" + strings.Repeat("a", 152), twilio.GSM7, 3},
		{"UCS70", strings.Repeat("ü", 69) + "ç", twilio.UCS2, 1}, // ç is not GSM-7 (Ç is)
		{"UCS71", strings.Repeat("ж", 71), twilio.UCS2, 2},
		{"UCS134", strings.Repeat("ж", 134), twilio.UCS2, 2},
		{"UCS135", strings.Repeat("ж", 135), twilio.UCS2, 3},
		{"EmojiTwoUnits", strings.Repeat("😀", 35), twilio.UCS2, 1},
		{"EmojiOverflow", strings.Repeat("😀", 36), twilio.UCS2, 2},
		{"SurrogateNotSplit", strings.Repeat("ж", 66) + "😀" + strings.Repeat("ж", 66), twilio.UCS2, 3},
		{"OneEmojiMakesAllUCS", strings.Repeat("a", 70) + "😀", twilio.UCS2, 2},
		{"SmartQuoteIsUCS", "it’s", twilio.UCS2, 1},
		// Twilio never cuts a grapheme cluster across parts (its segment
		// calculator keeps each whole).
		{"ZWJSequenceNotSplit", strings.Repeat("ж", 60) + "👨\u200d👩\u200d👧\u200d👦" + strings.Repeat("ж", 60), twilio.UCS2, 3},
		{"FlagNotSplit", strings.Repeat("ж", 65) + "🇫🇷" + strings.Repeat("ж", 65), twilio.UCS2, 3},
		{"CombiningMarkNotSplit", strings.Repeat("ж", 66) + "e\u0301" + strings.Repeat("ж", 66), twilio.UCS2, 3},
		{"SkinToneNotSplit", strings.Repeat("ж", 66) + "👍🏽" + strings.Repeat("ж", 64), twilio.UCS2, 3},
		{"ViramaJoinsConsonant", strings.Repeat("ж", 65) + "क्ष" + strings.Repeat("ж", 65), twilio.UCS2, 3},
		{"HangulJamoNotSplit", strings.Repeat("ж", 66) + "\u1100\u1161\u11a8" + strings.Repeat("ж", 65), twilio.UCS2, 3},
		{"ClusterLongerThanPart", "a" + strings.Repeat("\u0301", 99) + "ж", twilio.UCS2, 3},
		{"ZalgoOnePerPart", strings.Repeat("a"+strings.Repeat("\u0301", 33), 47), twilio.UCS2, 47},
		{"CRLFStaysGSM", strings.Repeat("a\r\n", 53), twilio.GSM7, 1},
		// Smart Encoding may lengthen a body; the larger count is kept.
		{"SmartTabsLengthen", strings.Repeat("\t", 200), twilio.GSM7, 10},
		{"SmartEllipsisStaysUCS", "ж" + strings.Repeat("…", 100), twilio.UCS2, 5},
		{"SmartShortensNotCounted", strings.Repeat("［", 80), twilio.UCS2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc, n := twilio.Segments(tt.body)
			if enc != tt.encoding || n != tt.segments {
				t.Errorf("Segments = %s %d, want %s %d", enc, n, tt.encoding, tt.segments)
			}
		})
	}
}

func TestCountry(t *testing.T) {
	tests := []struct{ number, country, code string }{
		{"+14155550100", "US", ""},
		{"+16135550100", "CA", ""},
		{"+18765550100", "JM", ""},
		{"+18095550100", "DO", ""},
		{"+17875550100", "PR", ""},
		{"+447700900123", "GB", ""},
		{"+447624123456", "IM", ""}, // a Manx mobile: Twilio prices it as IM, not GB
		{"+447625123456", "GB", ""},
		{"+447797712345", "JE", ""},
		{"+447911112345", "GG", ""},
		{"+447911212345", "GB", ""},
		{"+262639123456", "YT", ""},
		{"+262692123456", "RE", ""},
		{"+5997171234", "BQ", ""},
		{"+59995123456", "CW", ""},
		{"+441624123456", "IM", ""},
		{"+33612345678", "FR", ""},
		{"+77011234567", "KZ", ""},
		{"+79161234567", "RU", ""},
		{"+919812345678", "IN", ""},
		{"+3584571234567", "FI", ""},
		{"+61891641234", "CX", ""},
		{"+61891621234", "CC", ""},
		{"+61891601234", "AU", ""},
		{"+61412345678", "AU", ""},
		{"+590690123456", "GP", ""},               // or BL or MF: see Countries
		{"+78401234567", "", keybrake.EFORBIDDEN}, // Abkhazia, fixed
		{"+79401234567", "", keybrake.EFORBIDDEN}, // Abkhazia, mobile
		{"+79411234567", "RU", ""},
		{"+903921234567", "", keybrake.EFORBIDDEN}, // Northern Cyprus
		{"+902121234567", "TR", ""},
		{"+2821234567", "", keybrake.EFORBIDDEN}, // unassigned code
		{"14155550100", "", keybrake.EINVALID},
		{"+1415555", "", keybrake.EINVALID},
		{"+1415555010012345", "", keybrake.EINVALID},
		{"+1 415 555 0100", "", keybrake.EINVALID},
		{"+04155550100", "", keybrake.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.number, func(t *testing.T) {
			c, err := twilio.Country("To", tt.number)
			if got := keybrake.ErrorCode(err); got != tt.code || c != tt.country {
				t.Fatalf("Country = %q %q, want %q %q (%v)", c, got, tt.country, tt.code, err)
			}
		})
	}
}

func mustForm(tb testing.TB, body string) *twilio.Form {
	tb.Helper()
	f, err := twilio.ParseForm(body)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

func mustOp(tb testing.TB, method, path string) twilio.Operation {
	tb.Helper()
	op, err := twilio.ParseOperation(method, "/2010-04-01/Accounts/"+acct+path)
	if err != nil {
		tb.Fatal(err)
	}
	return op
}

func TestClassify(t *testing.T) {
	msg := mustOp(t, "POST", "/Messages.json")
	msgUpd := mustOp(t, "POST", "/Messages/SM0123456789abcdef0123456789abcdef.json")
	call := mustOp(t, "POST", "/Calls.json")
	callUpd := mustOp(t, "POST", "/Calls/CA0123456789abcdef0123456789abcdef.json")
	tests := []struct {
		name  string
		op    twilio.Operation
		body  string
		class twilio.Class
	}{
		{"MessageOK", msg, "To=%2B1&From=%2B1&Body=hi&StatusCallback=https%3A%2F%2Fx", twilio.ClassPriced},
		{"MessageContentSid", msg, "To=%2B1&ContentSid=HX1", twilio.ClassUnpriced},
		{"MessageUnknownParam", msg, "To=%2B1&Body=x&NewTwilioFeature=1", twilio.ClassUnpriced},
		{"Redact", msgUpd, "Body=", twilio.ClassWrite},
		{"CancelScheduled", msgUpd, "Status=canceled", twilio.ClassWrite},
		{"UpdateBody", msgUpd, "Body=new", twilio.ClassUnpriced},
		{"UpdateNothing", msgUpd, "", twilio.ClassUnpriced},
		{"CallClosedTwiml", call, "To=%2B1&From=%2B1&TimeLimit=60&Twiml=" + esc(`<?xml version="1.0"?><Response><Say>Hi</Say><Pause length="1"/><Hangup/></Response>`), twilio.ClassPriced},
		{"CallURL", call, "To=%2B1&From=%2B1&Url=https%3A%2F%2Fx", twilio.ClassUnpriced},
		{"CallDial", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response><Dial>+18765550100</Dial></Response>`), twilio.ClassUnpriced},
		{"CallNestedDial", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response><Say><Dial/></Say></Response>`), twilio.ClassUnpriced},
		{"CallGather", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response><Gather action="https://x"/></Response>`), twilio.ClassUnpriced},
		{"CallTwoRoots", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response/><Response><Dial/></Response>`), twilio.ClassUnpriced},
		{"CallNamespaced", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response xmlns="x"/>`), twilio.ClassUnpriced},
		{"CallEntity", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<!DOCTYPE x><Response/>`), twilio.ClassUnpriced},
		{"CallNotXML", call, "To=%2B1&From=%2B1&Twiml=hello", twilio.ClassUnpriced},
		{"CallNoTwiml", call, "To=%2B1&From=%2B1", twilio.ClassUnpriced},
		{"CallSSML", call, "To=%2B1&From=%2B1&TimeLimit=60&Twiml=" + esc(`<Response><Say voice="Polly.Joanna"><prosody rate="slow">Hi</prosody><break time="1s"/><say-as interpret-as="digits">42</say-as></Say></Response>`), twilio.ClassPriced},
		{"CallSSMLOutsideSay", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response><prosody>Hi</prosody></Response>`), twilio.ClassUnpriced},
		{"CallSSMLNamespaced", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response><Say voice="Polly.Joanna"><amazon:effect name="whispered">Hi</amazon:effect></Say></Response>`), twilio.ClassUnpriced},
		{"CallSSMLHidesDial", call, "To=%2B1&From=%2B1&Twiml=" + esc(`<Response><Say voice="Polly.Joanna"><p><Dial>+18765550100</Dial></p></Say></Response>`), twilio.ClassUnpriced},
		{"CallRecord", call, "To=%2B1&From=%2B1&Record=true&Twiml=%3CResponse%2F%3E", twilio.ClassUnpriced},
		{"EndCall", callUpd, "Status=completed", twilio.ClassWrite},
		{"CancelCall", callUpd, "Status=canceled&StatusCallback=https%3A%2F%2Fx", twilio.ClassWrite},
		{"RedirectCall", callUpd, "Url=https%3A%2F%2Fx", twilio.ClassUnpriced},
		{"EndAndRedirect", callUpd, "Status=completed&Twiml=%3CResponse%2F%3E", twilio.ClassUnpriced},
		{"ExtendCall", callUpd, "TimeLimit=14400", twilio.ClassUnpriced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, why := twilio.Classify(tt.op, mustForm(t, tt.body), "")
			if class != tt.class {
				t.Errorf("Classify = %s (%s), want %s", class, why, tt.class)
			}
			if class == twilio.ClassUnpriced && why == "" {
				t.Error("an unpriced class gives no reason")
			}
		})
	}
}

func TestSpeech(t *testing.T) {
	tests := []struct {
		name, twiml string
		hundreds    int64
		ok          bool
	}{
		{"NoSay", `<Response><Play>https://x/a.mp3</Play></Response>`, 0, true},
		// A <Say> without voice speaks in the account's default voice:
		// priced unless the operator declares man or woman.
		{"DefaultVoiceUndeclared", `<Response><Say>` + strings.Repeat("a", 500) + `</Say></Response>`, 5, true},
		{"DefaultVoiceUndeclaredLoopZero", `<Response><Say loop="0">a</Say></Response>`, 0, false},
		{"LanguageWithoutVoice", `<Response><Say language="fr-FR" loop="2">` + strings.Repeat("a", 100) + `</Say></Response>`, 2, true},
		{"BasicVoices", `<Response><Say voice="man">a</Say><Say voice="woman" loop="0">b</Say></Response>`, 0, true},
		{"AlicePriced", `<Response><Say voice="alice">c</Say></Response>`, 1, true},
		{"Neural", `<Response><Say voice="Polly.Joanna-Neural">` + strings.Repeat("a", 101) + `</Say></Response>`, 2, true},
		{"StandardPollyPriced", `<Response><Say voice="Polly.Joanna">a</Say></Response>`, 1, true},
		{"EachSayRoundedUp", `<Response><Say voice="Google.en-US-Standard-A">a</Say><Say voice="Polly.Amy">b</Say></Response>`, 2, true},
		{"Loop", `<Response><Say voice="Polly.Joanna-Generative" loop="3">` + strings.Repeat("a", 250) + `</Say></Response>`, 9, true},
		{"EntitiesDecoded", `<Response><Say voice="Polly.Amy">` + strings.Repeat("&amp;", 100) + `</Say></Response>`, 1, true},
		{"EmojiTwoUnits", `<Response><Say voice="Polly.Amy">` + strings.Repeat("😀", 51) + `</Say></Response>`, 2, true},
		{"CaseOfVoiceValue", `<Response><Say voice="Man">a</Say></Response>`, 1, true},
		{"LoopZero", `<Response><Say voice="Polly.Amy" loop="0">a</Say></Response>`, 0, false},
		{"LoopTooMany", `<Response><Say voice="Polly.Amy" loop="101">a</Say></Response>`, 0, false},
		{"LoopLeadingZero", `<Response><Say voice="Polly.Amy" loop="01">a</Say></Response>`, 0, false},
		{"LoopSigned", `<Response><Say voice="Polly.Amy" loop="+2">a</Say></Response>`, 0, false},
		{"VoiceInOtherCase", `<Response><Say Voice="Polly.Amy">a</Say></Response>`, 0, false},
		{"NamespacedAttr", `<Response><Say xmlns:t="x" t:voice="Polly.Amy">a</Say></Response>`, 0, false},
		{"VoiceTwice", `<Response><Say voice="Polly.Amy" voice="man">a</Say></Response>`, 0, false},
		{"SSMLTextCounted", `<Response><Say voice="Polly.Amy"><prosody rate="x-slow">` + strings.Repeat("a", 60) + `</prosody><s>` + strings.Repeat("b", 30) + `</s></Say></Response>`, 1, true},
		{"SSMLAttributesCounted", `<Response><Say voice="Polly.Amy"><sub alias="` + strings.Repeat("c", 150) + `">W3C</sub></Say></Response>`, 2, true},
		{"SayInSSMLInSay", `<Response><Say voice="alice"><p><Say voice="Polly.Amy">a</Say></p></Say></Response>`, 0, false},
		{"SayInSay", `<Response><Say voice="alice"><Say voice="Polly.Amy">a</Say></Say></Response>`, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := twilio.Speech(tt.twiml, "")
			if (err == nil) != tt.ok || n != tt.hundreds {
				t.Fatalf("Speech = %d, %v; want %d, ok %v", n, err, tt.hundreds, tt.ok)
			}
		})
	}
	// Declared defaults: man is free, even looping; Polly is priced.
	voiceless := `<Response><Say loop="0">` + strings.Repeat("a", 500) + `</Say><Say voice="woman">b</Say></Response>`
	if n, err := twilio.Speech(voiceless, "man"); n != 0 || err != nil {
		t.Fatalf("Speech with default man = %d, %v", n, err)
	}
	if _, err := twilio.Speech(voiceless, "Polly.Salli"); err == nil || !strings.Contains(err.Error(), "Polly.Salli") {
		t.Fatalf("Speech with default Polly.Salli, loop 0 = %v", err)
	}
	if n, err := twilio.Speech(`<Response><Say>`+strings.Repeat("a", 101)+`</Say></Response>`, "Polly.Salli"); n != 2 || err != nil {
		t.Fatalf("Speech with default Polly.Salli = %d, %v", n, err)
	}
	call := mustOp(t, "POST", "/Calls.json")
	form := mustForm(t, "To=%2B14155550100&From=%2B14155550101&TimeLimit=61&Twiml="+esc(`<Response><Say voice="Polly.Amy" loop="2">hi</Say></Response>`))
	if class, why := twilio.Classify(call, form, ""); class != twilio.ClassPriced {
		t.Fatalf("Classify = %s (%s)", class, why)
	}
	p := &twilio.Pricer{Rates: twilio.Rates{"US": {Voice: 14_000}}, SpeechPer100: 1_000}
	c, err := p.Price(call, form)
	if err != nil || c.Micros != 2*14_000+2*1_000 || c.Speech != 2 || c.SpeechMicros != 2_000 {
		t.Fatalf("Price = %+v, %v", c, err)
	}
	p.SpeechPer100 = 0
	if c, _ := p.Price(call, form); c.SpeechMicros != 2*twilio.DefaultSpeechPer100 {
		t.Fatalf("default rate: %+v", c)
	}
	loop0 := mustForm(t, "To=%2B14155550100&From=%2B14155550101&TimeLimit=60&Twiml="+esc(`<Response><Say voice="Polly.Amy" loop="0">hi</Say></Response>`))
	if class, _ := twilio.Classify(call, loop0, "man"); class != twilio.ClassUnpriced {
		t.Fatalf("loop 0: %s", class)
	}
	voiceless0 := mustForm(t, "To=%2B14155550100&From=%2B14155550101&TimeLimit=60&Twiml="+esc(`<Response><Say loop="0">hi</Say></Response>`))
	if class, _ := twilio.Classify(call, voiceless0, ""); class != twilio.ClassUnpriced {
		t.Fatalf("loop 0 in an undeclared default voice: %s", class)
	}
	if class, why := twilio.Classify(call, voiceless0, "woman"); class != twilio.ClassPriced {
		t.Fatalf("loop 0 in a declared basic default voice: %s (%s)", class, why)
	}
}

func esc(s string) string {
	r := strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", "=", "%3D", " ", "+", "#", "%23")
	return r.Replace(s)
}

func TestPrice(t *testing.T) {
	rates, err := twilio.ParseRates("US sms=0.0079 mms=0.02 voice=0.014\nJM sms=0.12 voice=0.30\nGB sms=0.05")
	if err != nil {
		t.Fatal(err)
	}
	withAny := twilio.Rates{"US": rates["US"], twilio.AnyCountry: {SMS: 250_000}}
	msg := mustOp(t, "POST", "/Messages.json")
	call := mustOp(t, "POST", "/Calls.json")
	long := strings.Repeat("a", 161)
	tests := []struct {
		name     string
		pricer   twilio.Pricer
		op       twilio.Operation
		body     string
		micros   keybrake.Micros
		segments int
		minutes  int
		add      bool
		code     string
	}{
		{"SMS", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B14155550199&Body=hi", 7900, 1, 0, false, ""},
		{"SMSTwoSegments", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1&Body=" + long, 15800, 2, 0, false, ""},
		{"SMSUnicode", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&MessagingServiceSid=MG0123456789abcdef0123456789abcdef&Body=" + strings.Repeat("%D0%B6", 71), 15800, 2, 0, false, ""},
		{"SMSJamaicaNotUS", twilio.Pricer{Rates: rates}, msg, "To=%2B18765550100&From=%2B1&Body=hi", 120000, 1, 0, false, ""},
		{"MMS", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1&MediaUrl=https%3A%2F%2Fx&Body=" + long, 20000, 2, 0, false, ""},
		{"SendAsMms", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1&SendAsMms=true&Body=x", 20000, 1, 0, false, ""},
		// MMS Converter: 1000 UCS-2 characters and a link are 16 SMS segments.
		{"MMSConvertedLongBody", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1&MediaUrl=x&Body=" + strings.Repeat("%D0%B6", 1000), 16 * 7900, 16, 0, false, ""},
		{"ErrSendAsMmsSpelling", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1&SendAsMms=True&Body=x", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrMMSNoRate", twilio.Pricer{Rates: rates}, msg, "To=%2B447700900123&From=%2B1&MediaUrl=x", 0, 0, 0, false, keybrake.EFORBIDDEN},
		{"ErrUnknownCountry", twilio.Pricer{Rates: rates}, msg, "To=%2B33612345678&From=%2B1&Body=x", 0, 0, 0, false, keybrake.EFORBIDDEN},
		{"AnyCountryAllowed", twilio.Pricer{Rates: withAny}, msg, "To=%2B33612345678&From=%2B1&Body=x", 250000, 1, 0, false, ""},
		{"ErrWhatsApp", twilio.Pricer{Rates: rates}, msg, "To=whatsapp%3A%2B14155550100&From=%2B1&Body=x", 0, 0, 0, false, keybrake.EFORBIDDEN},
		{"ErrNoTo", twilio.Pricer{Rates: rates}, msg, "From=%2B1&Body=x", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrNoFrom", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&Body=x", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrNoBody", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrTooLong", twilio.Pricer{Rates: rates}, msg, "To=%2B14155550100&From=%2B1&Body=" + strings.Repeat("a", 1601), 0, 0, 0, false, keybrake.EINVALID},
		{"Call", twilio.Pricer{Rates: rates}, call, "To=%2B14155550100&From=%2B1&TimeLimit=61", 28000, 0, 2, false, ""},
		{"CallJamaica", twilio.Pricer{Rates: rates}, call, "To=%2B18765550100&From=%2B1&TimeLimit=600", 3_000_000, 0, 10, false, ""},
		{"CallDefault4h", twilio.Pricer{Rates: rates}, call, "To=%2B14155550100&From=%2B1", 3_360_000, 0, 240, false, ""},
		{"CallMaxInjected", twilio.Pricer{Rates: rates, MaxCallSeconds: 300}, call, "To=%2B14155550100&From=%2B1", 70000, 0, 5, true, ""},
		{"ErrCallAboveMax", twilio.Pricer{Rates: rates, MaxCallSeconds: 300}, call, "To=%2B14155550100&From=%2B1&TimeLimit=301", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrCallBadLimit", twilio.Pricer{Rates: rates}, call, "To=%2B14155550100&From=%2B1&TimeLimit=-1", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrCallLimitAbove4h", twilio.Pricer{Rates: rates}, call, "To=%2B14155550100&From=%2B1&TimeLimit=14401", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrCallLeadingZero", twilio.Pricer{Rates: rates}, call, "To=%2B14155550100&From=%2B1&TimeLimit=060", 0, 0, 0, false, keybrake.EINVALID},
		{"ErrCallSIP", twilio.Pricer{Rates: rates}, call, "To=sip%3Aa%40b&From=%2B1&TimeLimit=60", 0, 0, 0, false, keybrake.EFORBIDDEN},
		{"ErrCallNoVoiceRate", twilio.Pricer{Rates: rates}, call, "To=%2B447700900123&From=%2B1&TimeLimit=60", 0, 0, 0, false, keybrake.EFORBIDDEN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.pricer.Price(tt.op, mustForm(t, tt.body))
			if got := keybrake.ErrorCode(err); got != tt.code {
				t.Fatalf("code = %q, want %q (%v)", got, tt.code, err)
			}
			if err != nil {
				return
			}
			if c.Micros != tt.micros || c.Segments != tt.segments || c.Minutes != tt.minutes || c.AddTimeLimit != tt.add {
				t.Errorf("cost = %+v, want %d micros, %d segments, %d minutes, add %v", c, tt.micros, tt.segments, tt.minutes, tt.add)
			}
			if c.Messages+c.Calls != 1 {
				t.Errorf("cost counts %d messages and %d calls, want one of them", c.Messages, c.Calls)
			}
		})
	}
}

func TestParseRates(t *testing.T) {
	for _, bad := range []string{"USA sms=1", "US", "US sms=0", "US fax=1", "US sms=1 sms=2", "US sms=1\nus voice=1", "US sms=1.0000001", "US sms=-1"} {
		if _, err := twilio.ParseRates(bad); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Errorf("ParseRates(%q) = %v, want EINVALID", bad, err)
		}
	}
	r, err := twilio.ParseRates("# comment\nus sms=0.0079 voice=0.014; * sms=0.5\n")
	if err != nil {
		t.Fatal(err)
	}
	again, err := twilio.ParseRates(r.String())
	if err != nil || again.String() != r.String() {
		t.Errorf("round trip: %q → %q (%v)", r.String(), again.String(), err)
	}
	if r["US"].SMS != 7900 || r["*"].SMS != 500_000 {
		t.Errorf("rates = %+v", r)
	}
	if len(twilio.DefaultRates()) == 0 {
		t.Error("no default rates")
	}
}

func TestParsePrice(t *testing.T) {
	s := func(v string) *string { return &v }
	tests := []struct {
		name   string
		price  *string
		unit   string
		micros keybrake.Micros
		known  bool
		code   string
	}{
		{"Null", nil, "USD", 0, false, ""},
		{"Negative", s("-0.00790"), "USD", 7900, true, ""},
		{"Positive", s("0.0079"), "USD", 7900, true, ""},
		{"RoundsUp", s("-0.0000001"), "USD", 1, true, ""},
		{"TrailingZeros", s("-0.00790000"), "usd", 7900, true, ""},
		{"Call", s("-1.40000"), "USD", 1_400_000, true, ""},
		{"ErrEUR", s("-0.05"), "EUR", 0, false, keybrake.EFORBIDDEN},
		{"ErrGarbage", s("-0.0x"), "USD", 0, false, keybrake.EINVALID},
		{"ErrTwoDots", s("1.2.3"), "USD", 0, false, keybrake.EINVALID},
		{"ErrExponent", s("1e3"), "USD", 0, false, keybrake.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, known, err := twilio.ParsePrice(tt.price, tt.unit)
			if got := keybrake.ErrorCode(err); got != tt.code || m != tt.micros || known != tt.known {
				t.Errorf("ParsePrice = %d %v %q, want %d %v %q", m, known, got, tt.micros, tt.known, tt.code)
			}
		})
	}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestParseAuth(t *testing.T) {
	sk := "SK0123456789abcdef0123456789abcdef"
	tests := []struct {
		name, header string
		user, code   string
	}{
		{"AccountSid", basic(acct, "vaultkeyABC"), acct, ""},
		{"APIKey", basic(sk, "vault_key_ABC"), sk, ""},
		{"LowerScheme", "basic " + base64.StdEncoding.EncodeToString([]byte(acct+":x")), acct, ""},
		{"ErrMissing", "", "", keybrake.EUNAUTHORIZED},
		{"ErrBearer", "Bearer vault_key_ABC", "", keybrake.EUNAUTHORIZED},
		{"ErrNotBase64", "Basic !!!", "", keybrake.EUNAUTHORIZED},
		{"ErrNoPassword", basic(acct, ""), "", keybrake.EUNAUTHORIZED},
		{"ErrNoColon", "Basic " + base64.StdEncoding.EncodeToString([]byte(acct)), "", keybrake.EUNAUTHORIZED},
		{"ErrUserNotSid", basic("bob", "x"), "", keybrake.EUNAUTHORIZED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := twilio.ParseAuth(tt.header)
			if got := keybrake.ErrorCode(err); got != tt.code || c.Username != tt.user {
				t.Fatalf("ParseAuth = %+v %q, want %q %q", c, got, tt.user, tt.code)
			}
			if err != nil && strings.Contains(keybrake.ErrorMessage(err), "vault") && strings.Contains(keybrake.ErrorMessage(err), "ABC") {
				t.Error("the error repeats the password")
			}
		})
	}
	if k, ok := twilio.VaultKey("vaultkeyAb3"); !ok || k != "vault_key_Ab3" {
		t.Errorf("VaultKey(alnum) = %q %v", k, ok)
	}
	if k, ok := twilio.VaultKey("vault_key_Ab3"); !ok || k != "vault_key_Ab3" {
		t.Errorf("VaultKey(canonical) = %q %v", k, ok)
	}
	for _, bad := range []string{"vaultkey", "vaultkeyA_b", "authtoken123", "vault_key_"} {
		if _, ok := twilio.VaultKey(bad); ok {
			t.Errorf("VaultKey(%q) accepted", bad)
		}
	}
	if got := twilio.AlnumVaultKey("vault_key_Ab3"); got != "vaultkeyAb3" {
		t.Errorf("AlnumVaultKey = %q", got)
	}
}

func TestErrorFor(t *testing.T) {
	tests := []struct {
		err          error
		code, status int
	}{
		{keybrake.Errorf(keybrake.EOVERCAP, "over"), 20429, 429},
		{keybrake.Errorf(keybrake.EUNAUTHORIZED, "who"), 20003, 401},
		{keybrake.Errorf(keybrake.EFORBIDDEN, "no"), 20403, 403},
		{keybrake.ErrorParam("To", "bad"), 21211, 400},
		{keybrake.Errorf(keybrake.ENOTFOUND, "none"), 20404, 404},
		{keybrake.Errorf(keybrake.EUNAVAILABLE, "down"), 20503, 503},
		{errPlain{}, 20500, 500},
	}
	for _, tt := range tests {
		e := twilio.ErrorFor(tt.err)
		if e.Code != tt.code || e.Status != tt.status || !strings.HasSuffix(e.MoreInfo, "/errors/"+itoa(tt.code)) {
			t.Errorf("ErrorFor(%v) = %+v", tt.err, e)
		}
		if _, ok := tt.err.(errPlain); ok && strings.Contains(e.Message, "secret") {
			t.Error("an internal error leaks its text")
		}
	}
}

type errPlain struct{}

func (errPlain) Error() string { return "secret internals" }

func itoa(n int) string {
	b := []byte{}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

func TestScopePolicy(t *testing.T) {
	const mg, mg2 = "MG0123456789abcdef0123456789abcdef", "MGffffffffffffffffffffffffffffffff"
	msg := mustOp(t, "POST", "/Messages.json")
	call := mustOp(t, "POST", "/Calls.json")
	dest := twilio.Policy{Countries: []string{"US", "CA"}, NumberPrefixes: []string{"+1415", "+1604", "+1876"}}
	from := twilio.Policy{From: []string{"+14155550199", "whatsapp:+14155550199"}}
	svc := twilio.Policy{MessagingServices: []string{mg}}
	both := twilio.Policy{From: []string{"+14155550199"}, MessagingServices: []string{mg}}
	tests := []struct {
		name string
		p    twilio.Policy
		op   twilio.Operation
		body string
		rule string // "" when allowed
	}{
		{"OK", dest, msg, "To=%2B14155550100&From=%2B1", ""},
		{"OKCanada", dest, msg, "To=%2B16045550100&From=%2B1", ""},
		{"ErrCountryJamaicaInPrefix", dest, msg, "To=%2B18765550100&From=%2B1", "twilio_scope.allowed_countries"},
		{"ErrPrefix", dest, msg, "To=%2B12125550100&From=%2B1", "twilio_scope.allowed_number_prefixes"},
		{"ErrSpaces", dest, msg, "To=%2B1+415+555+0100&From=%2B1", "twilio_scope.allowed_countries"},
		{"ErrDashes", dest, msg, "To=%2B1-415-555-0100&From=%2B1", "twilio_scope.allowed_countries"},
		{"ErrNoPlus", dest, msg, "To=14155550100&From=%2B1", "twilio_scope.allowed_countries"},
		{"ErrLeadingSpace", dest, msg, "To=+%2B14155550100&From=%2B1", "twilio_scope.allowed_countries"},
		{"OKWhatsAppNumber", dest, msg, "To=whatsapp%3A%2B14155550100&From=%2B1", ""},
		{"ErrWhatsAppCountry", dest, msg, "To=WhatsApp%3A%2B447700900123&From=%2B1", "twilio_scope.allowed_countries"},
		{"ErrMessenger", dest, msg, "To=messenger%3A1234567890&From=%2B1", "twilio_scope.allowed_countries"},
		{"ErrNoTo", dest, msg, "From=%2B1&Body=x", "twilio_scope.allowed_countries"},
		{"ErrLowercaseTo", dest, msg, "To=%2B14155550100&to=%2B447700900123", ""},
		{"ErrCallCountry", dest, call, "To=%2B447700900123&From=%2B14155550199", "twilio_scope.allowed_countries"},
		{"OKCall", dest, call, "To=%2B14155550100&From=%2B14155550199", ""},

		{"OKFrom", from, msg, "To=%2B447700900123&From=%2B14155550199", ""},
		{"ErrFrom", from, msg, "To=%2B14155550100&From=%2B14155550000", "twilio_scope.allowed_from"},
		{"ErrFromSpace", from, msg, "To=%2B14155550100&From=+%2B14155550199", "twilio_scope.allowed_from"},
		{"ErrFromTrailingSpace", from, msg, "To=%2B14155550100&From=%2B14155550199+", "twilio_scope.allowed_from"},
		{"ErrFromDashes", from, msg, "To=%2B14155550100&From=%2B1-415-555-0199", "twilio_scope.allowed_from"},
		{"OKFromWhatsApp", from, msg, "To=whatsapp%3A%2B14155550100&From=WHATSAPP%3A%2B14155550199", ""},
		{"ErrFromMessenger", from, msg, "To=%2B14155550100&From=messenger%3A%2B14155550199", "twilio_scope.allowed_from"},
		{"ErrFromUppercase", from, msg, "To=%2B14155550100&FROM=%2B14155550000&From=%2B14155550199", ""},
		{"ErrPoolSender", from, msg, "To=%2B14155550100&MessagingServiceSid=" + mg, "twilio_scope.allowed_from"},
		{"OKFromAndService", from, msg, "To=%2B14155550100&From=%2B14155550199&MessagingServiceSid=" + mg, ""},
		{"ErrCallFrom", from, call, "To=%2B14155550100&From=%2B14155550000", "twilio_scope.allowed_from"},
		{"ErrCallerId", from, call, "To=%2B14155550100&From=%2B14155550199&CallerId=%2B14155550000", "twilio_scope.allowed_from"},

		{"OKService", svc, msg, "To=%2B14155550100&MessagingServiceSid=" + mg, ""},
		{"ErrService", svc, msg, "To=%2B14155550100&MessagingServiceSid=" + mg2, "twilio_scope.allowed_messaging_services"},
		{"ErrServiceUppercase", svc, msg, "To=%2B14155550100&MessagingServiceSid=MG0123456789ABCDEF0123456789ABCDEF", "twilio_scope.allowed_messaging_services"},
		{"ErrNoService", svc, msg, "To=%2B14155550100&From=%2B14155550199", "twilio_scope.allowed_messaging_services"},
		{"OKCallWithoutService", svc, call, "To=%2B14155550100&From=%2B14155550199", ""},
		{"OKBoth", both, msg, "To=%2B14155550100&MessagingServiceSid=" + mg, ""},
		{"ErrBothFrom", both, msg, "To=%2B14155550100&From=%2B14155550000&MessagingServiceSid=" + mg, "twilio_scope.allowed_from"},

		{"OKNoScope", twilio.Policy{}, msg, "To=garbage&to=x", ""},
		{"OKNotACreate", dest, mustOp(t, "GET", "/Messages.json"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Check(twilio.ScopeOf(tt.op, mustForm(t, tt.body)))
			wantErr := tt.rule != "" || strings.Contains(tt.name, "Err")
			switch {
			case !wantErr && err != nil:
				t.Fatalf("Check = %v, want allowed", err)
			case wantErr && keybrake.ErrorCode(err) != keybrake.EFORBIDDEN:
				t.Fatalf("Check = %v, want EFORBIDDEN", err)
			case wantErr && tt.rule != "" && !strings.Contains(keybrake.ErrorMessage(err), tt.rule):
				t.Fatalf("Check = %v, want the rule %s named", err, tt.rule)
			}
		})
	}
}

func TestNormalizePolicy(t *testing.T) {
	got, err := twilio.NormalizePolicy(keybrake.TwilioScope{
		Countries: []string{"us", "CA", "US"}, NumberPrefixes: []string{"+1415"},
		From: []string{"+14155550199", "WhatsApp:+14155550199", "ACME Ltd", "12345"}, MessagingServices: []string{"MG0123456789abcdef0123456789abcdef"},
	})
	if err != nil || strings.Join(got.Countries, ",") != "US,CA" || got.From[1] != "whatsapp:+14155550199" {
		t.Fatalf("NormalizePolicy = %+v, %v", got, err)
	}
	for _, bad := range []keybrake.TwilioScope{
		{Countries: []string{"XX"}}, {Countries: []string{"USA"}}, {Countries: []string{""}},
		{NumberPrefixes: []string{"1415"}}, {NumberPrefixes: []string{"+1 415"}}, {NumberPrefixes: []string{"+"}}, {NumberPrefixes: []string{"+0"}},
		{From: []string{" +14155550199"}}, {From: []string{"+1-415-555-0199"}}, {From: []string{"sip:+14155550199"}}, {From: []string{"A VERY LONG NAME"}}, {From: []string{""}},
		{MessagingServices: []string{"MG0123"}}, {MessagingServices: []string{"PN0123456789abcdef0123456789abcdef"}},
	} {
		if _, err := twilio.NormalizePolicy(bad); keybrake.ErrorCode(err) != keybrake.EINVALID || !strings.Contains(keybrake.ErrorMessage(err), "twilio_scope.") {
			t.Errorf("NormalizePolicy(%+v) = %v, want EINVALID naming the field", bad, err)
		}
	}
}

func TestRedact(t *testing.T) {
	acc := mustOp(t, "GET", ".json")
	out, ok := twilio.Redact(acc, []byte(`{"sid":"`+acct+`","auth_token":"s3cret","status":"active"}`))
	if !ok || strings.Contains(string(out), "s3cret") || !strings.Contains(string(out), `"status":"active"`) {
		t.Errorf("Redact = %s %v", out, ok)
	}
	if _, ok := twilio.Redact(acc, []byte(`not json s3cret`)); ok {
		t.Error("an unreadable account answer was passed on")
	}
	msg := mustOp(t, "GET", "/Messages.json")
	if out, ok := twilio.Redact(msg, []byte(`{"messages":[]}`)); !ok || string(out) != `{"messages":[]}` {
		t.Errorf("Redact changed a message list: %s", out)
	}
}

func TestCallingCode(t *testing.T) {
	for number, want := range map[string]string{
		"+14155550100": "1", "+447700900123": "44", "+4407700900123": "44", "+77012345678": "7",
		"+35312345678": "353", "+390612345678": "39", "+2120612345678": "212",
		"14155550100": "", "+999123456": "", "+1": "",
	} {
		got, ok := twilio.CallingCode(number)
		if got != want || ok != (want != "") {
			t.Errorf("CallingCode(%q) = %q, %v; want %q", number, got, ok, want)
		}
	}
}

// TestScopeListPolicy: a key with allowed_from lists messages and calls
// only through Twilio's From filter naming one of its senders.
func TestScopeListPolicy(t *testing.T) {
	p := twilio.Policy{From: []string{"+14155550100", "whatsapp:+14155550101"}}
	list := func(name string) twilio.Operation {
		op, err := twilio.ParseOperation("GET", "/2010-04-01/Accounts/"+acct+"/"+name+".json")
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	for _, tc := range []struct {
		policy twilio.Policy
		op     string
		query  string
		ok     bool
	}{
		{p, "Messages", "From=%2B14155550100&PageSize=20", true},
		{p, "Calls", "From=%2B14155550100", true},
		{p, "Messages", "From=WhatsApp:%2B14155550101", true},
		{p, "Messages", "", false},
		{p, "Calls", "To=%2B14155550100", false},
		{p, "Messages", "From=%2B14155550199", false},
		{p, "Messages", "From=%2B14155550100&From=%2B14155550199", false},
		{p, "Messages", "From=%2B14155550100&from=%2B14155550199", false},
		{twilio.Policy{}, "Messages", "", true},
		{twilio.Policy{}, "Messages", "FROM=%2B1", true},
		{twilio.Policy{Countries: []string{"US"}}, "Calls", "", true},
	} {
		q, _ := url.ParseQuery(tc.query)
		err := tc.policy.CheckList(list(tc.op), q)
		if (err == nil) != tc.ok || (err != nil && keybrake.ErrorCode(err) != keybrake.EFORBIDDEN) {
			t.Errorf("%+v %s ?%s: %v, want ok=%v", tc.policy, tc.op, tc.query, err, tc.ok)
		}
	}
	// Any other operation is not a list.
	if err := p.CheckList(list("IncomingPhoneNumbers"), nil); err != nil {
		t.Errorf("incoming_phone_numbers.list: %v", err)
	}
}

func TestRCSSegments(t *testing.T) {
	for _, tt := range []struct {
		body string
		want int
	}{
		{"", 1}, {strings.Repeat("a", 160), 1}, {strings.Repeat("a", 161), 2},
		{strings.Repeat("é", 80), 1}, {strings.Repeat("é", 81), 2}, {strings.Repeat("é", 1600), 20},
		{strings.Repeat("a", 159) + "€", 2}, // a character is not split
		{strings.Repeat("あ", 1600), 31},     // 53 a segment
	} {
		if got := twilio.RCSSegments(tt.body); got != tt.want {
			t.Errorf("RCSSegments(%d bytes) = %d, want %d", len(tt.body), got, tt.want)
		}
	}
	// Priced at the larger count only when the message may go out as RCS.
	rates, _ := twilio.ParseRates("US sms=0.01")
	p := &twilio.Pricer{Rates: rates}
	op, _ := twilio.ParseOperation("POST", "/2010-04-01/Accounts/AC"+strings.Repeat("0", 32)+"/Messages.json")
	for from, want := range map[string]int{"+14155550100": 11, "55555": 11, "rcs:agent": 20, "MG" + strings.Repeat("0", 32): 20} {
		form, _ := twilio.ParseForm("To=%2B14155550123&From=" + strings.ReplaceAll(from, "+", "%2B") + "&Body=" + strings.Repeat("%C3%A9", 1600))
		c, err := p.Price(op, form)
		if err != nil || c.Segments != want {
			t.Errorf("From %s: %d segments, %v; want %d", from, c.Segments, err, want)
		}
	}
}
