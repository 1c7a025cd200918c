package twilio

import (
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/keybrake/keybrake"
)

// DefaultSpeechPer100 is what keybrake reserves, in USD micros, for every
// started 100 characters a <Say> with a priced voice speaks, when the
// operator sets no rate: $0.05, above every per-character text-to-speech
// price keybrake knows of (Amazon's own list price for Polly's dearest
// engine, long-form, is $0.01 per 100 characters; Twilio bills its
// markup, and third-party voices, on top). Set your own with
// Pricer.SpeechPer100.
const DefaultSpeechPer100 keybrake.Micros = 50_000

// MaxSayLoop is the largest loop a priced <Say> may repeat; a larger one,
// or loop="0" (repeat until the call ends), is unpriced.
const MaxSayLoop = 100

// basicVoices are the voices Twilio synthesizes at no charge beyond the
// call's minutes. Every other voice (Polly.…, Polly.…-Neural,
// Polly.…-Generative, Google.…, ElevenLabs and whatever Twilio adds) is
// billed per character, so keybrake prices it; so is alice, which
// Twilio's <Say> reference no longer lists beside man and woman, and
// which keybrake cannot show to be free.
var basicVoices = set("man", "woman")

// sayAttrs are the <Say> attributes keybrake reads; any other (Voice in
// another case, an attribute in a namespace) might be read by Twilio as a
// voice keybrake did not price.
var sayAttrs = set("voice", "language", "loop")

// Speech returns how many hundreds of characters the <Say> verbs of twiml
// with a priced voice speak, each <Say> rounded up to whole hundreds and
// multiplied by its loop: what Twilio bills per character on top of the
// call's minutes. A <Say> with man or woman is not counted. A <Say>
// without voice speaks in defaultVoice, the account's default voice as
// the operator declares it (Twilio's Console sets it, and keybrake cannot
// read it): when that is "" (not declared) or a priced voice, such a
// <Say> is counted like any priced one.
//
// Characters are counted in UTF-16 code units (an emoji is two), never
// fewer than Twilio counts: the text of SSML elements inside a <Say>, and
// their attribute values too (a <sub alias> is spoken in place of its
// text; a <break time> is counted though it is not spoken). Returns an error, for Classify to make the
// call unpriced, for a priced <Say> with loop="0" (it repeats until the
// call ends) or a loop keybrake does not read as Twilio does, for a <Say>
// attribute other than voice, language and loop, or one given twice, and
// for a <Say> inside a <Say>. twiml must already have passed openVerb.
func Speech(twiml, defaultVoice string) (int64, error) {
	dec := xml.NewDecoder(strings.NewReader(twiml))
	var total int64
	var say *saySpan
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return 0, errors.New("it is not well-formed XML")
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Local != "Say" {
				if say != nil { // an SSML element (openVerb): its attribute values may be spoken
					for _, a := range t.Attr {
						say.units += int64(len(utf16.Encode([]rune(a.Value))))
					}
				}
				continue
			}
			if say != nil {
				return 0, errors.New("it has a <Say> inside a <Say>")
			}
			s := &saySpan{voice: defaultVoice, priced: !basicVoices[defaultVoice]}
			seen := map[string]bool{}
			for _, a := range t.Attr {
				if a.Name.Space != "" || !sayAttrs[a.Name.Local] {
					return 0, errors.New("its <Say> has attribute " + printable(a.Name.Local) + ", which keybrake does not read")
				}
				// encoding/xml keeps both of a repeated attribute, and
				// keybrake would read the last while another parser may
				// read the first: voice="Polly.Amy" voice="man".
				if seen[a.Name.Local] {
					return 0, errors.New("its <Say> gives " + a.Name.Local + " twice")
				}
				seen[a.Name.Local] = true
				switch a.Name.Local {
				case "voice":
					s.priced = !basicVoices[a.Value]
					s.voice, s.given = a.Value, true
				case "loop":
					s.loopText = a.Value
				}
			}
			say = s
		case xml.CharData:
			if say != nil {
				say.units += int64(len(utf16.Encode([]rune(string(t)))))
			}
		case xml.EndElement:
			if t.Name.Local != "Say" || say == nil {
				continue
			}
			if say.priced {
				loop := 1
				if say.loopText != "" {
					n, err := strconv.Atoi(say.loopText)
					switch {
					case say.loopText == "0":
						return 0, errors.New("its " + say.describe() + " has loop=\"0\", which repeats the priced speech until the call ends")
					case err != nil || n < 1 || n > MaxSayLoop || strconv.Itoa(n) != say.loopText:
						return 0, errors.New("its <Say> has loop=\"" + printable(say.loopText) + "\": keybrake prices loops of 1 to " + strconv.Itoa(MaxSayLoop) + " for a priced voice")
					}
					loop = n
				}
				total += (say.units + 99) / 100 * int64(loop)
			}
			say = nil
		}
	}
}

// saySpan is a <Say> being read.
type saySpan struct {
	voice, loopText string
	given           bool // voice is the <Say>'s own, not the account's default
	priced          bool
	units           int64 // UTF-16 code units of its text
}

// describe names the <Say> in an error: by its voice, or as speaking in
// the account's default voice.
func (s *saySpan) describe() string {
	if s.given {
		return "<Say voice=\"" + printable(s.voice) + "\">"
	}
	if s.voice == "" {
		return "<Say> without voice (the account's default voice, which keybrake is not told: --twilio-default-voice)"
	}
	return "<Say> without voice (the account's default voice, " + printable(s.voice) + ")"
}
