package twilio

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
)

// messageParams are the messages.create parameters keybrake has reviewed:
// none of them moves money beyond the message itself. Any other parameter
// (ContentSid, whose template body keybrake cannot count, ShortenUrls,
// Twilio's next additions) makes the body unpriced.
var messageParams = set("To", "From", "MessagingServiceSid", "Body", "MediaUrl", "SendAsMms",
	"StatusCallback", "ValidityPeriod", "MaxPrice", "ProvideFeedback", "Attempt", "ForceDelivery",
	"SmartEncoded", "ScheduleType", "SendAt", "ContentRetention", "AddressRetention", "PersistentAction",
	"RiskCheck")

// callParams are the calls.create parameters keybrake has reviewed.
// Record, MachineDetection, AsyncAmd, Transcribe and ApplicationSid cost
// extra or run code keybrake cannot see, so they make the body unpriced;
// so does FallbackUrl, whose TwiML Twilio runs when the call's own fails
// and may <Dial> numbers keybrake never sees.
var callParams = set("To", "From", "Url", "Twiml", "Method", "FallbackMethod",
	"StatusCallback", "StatusCallbackEvent", "StatusCallbackMethod", "SendDigits", "Timeout",
	"TimeLimit", "CallerId")

// closedVerbs are the TwiML verbs that cannot start another call, send a
// message or fetch more TwiML: a call whose TwiML uses only them costs its
// own minutes and nothing else.
var closedVerbs = set("Response", "Say", "Play", "Pause", "Hangup", "Reject")

// ssmlTags are the SSML elements Twilio takes inside <Say> (its
// libraries' Ssml… nouns, without a namespace: amazon:effect and the
// like are not read): they change how the text is spoken, never what the
// call does, and Speech counts the text in them and their attribute
// values (sub's alias is spoken in place of its text).
var ssmlTags = set("break", "emphasis", "lang", "p", "phoneme", "prosody", "s", "say-as", "sub", "w")

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// Classify returns op's class for the body form (nil for none) and, when
// it is not op's own class, why. It narrows or widens the cautious class
// ParseOperation gave:
//
//   - messages.create is ClassPriced for reviewed parameters (see
//     messageParams) and ClassUnpriced with any other (ContentSid: a
//     template's body cannot be counted).
//   - messages.update is ClassWrite only to redact (Body="") or to cancel a
//     scheduled message (Status=canceled); anything else is ClassUnpriced.
//   - calls.create is ClassPriced when its TwiML is given inline (Twiml)
//     and uses only Say, Play, Pause, Hangup and Reject. A Url, or TwiML
//     with Dial, Gather, Redirect, Message, Enqueue, Connect…, may start
//     more calls or send messages keybrake never sees: ClassUnpriced. So
//     is a <Say> whose text-to-speech Speech cannot bound (loop="0" with
//     a priced voice, or without voice unless defaultVoice, the
//     account's default voice, is man or woman).
//   - calls.update is ClassWrite only to end the call (Status=completed or
//     canceled, optionally with StatusCallback and StatusCallbackMethod);
//     a new Url, Twiml or TimeLimit is ClassUnpriced.
func Classify(op Operation, form *Form, defaultVoice string) (Class, string) {
	if form == nil {
		form = &Form{}
	}
	switch op.Name {
	case "messages.create":
		if p := form.only(messageParams); p != "" {
			return ClassUnpriced, "keybrake cannot price messages.create with " + p
		}
	case "messages.update":
		body, hasBody := form.Get("Body")
		status, hasStatus := form.Get("Status")
		ok := form.only(set("Body", "Status")) == "" &&
			(hasBody || hasStatus) && (!hasBody || body == "") && (!hasStatus || status == "canceled")
		if !ok {
			return ClassUnpriced, "messages.update is allowed only to redact (Body=\"\") or to cancel (Status=canceled)"
		}
	case "calls.create":
		if p := form.only(callParams); p != "" {
			return ClassUnpriced, "keybrake cannot price calls.create with " + p
		}
		if form.Has("Url") {
			return ClassUnpriced, "the TwiML at Url may <Dial> or message numbers keybrake never sees; give closed Twiml inline"
		}
		twiml, _ := form.Get("Twiml")
		if verb, err := openVerb(twiml); err != nil || verb != "" {
			if err != nil {
				return ClassUnpriced, "keybrake cannot read the Twiml: " + err.Error()
			}
			return ClassUnpriced, "the Twiml uses <" + verb + ">, which may start calls or messages keybrake never sees"
		}
		if _, err := Speech(twiml, defaultVoice); err != nil {
			return ClassUnpriced, "keybrake cannot price the Twiml's text-to-speech: " + err.Error()
		}
	case "calls.update":
		status, _ := form.Get("Status")
		if form.only(set("Status", "StatusCallback", "StatusCallbackMethod")) != "" || (status != "completed" && status != "canceled") {
			return ClassUnpriced, "calls.update is allowed only to end the call (Status=completed or canceled)"
		}
	}
	return op.Class, ""
}

// openVerb returns the first TwiML element of twiml that is not a closed
// verb, or an error if twiml is not well-formed XML with a Response root.
func openVerb(twiml string) (string, error) {
	if strings.TrimSpace(twiml) == "" {
		return "", errors.New("a call needs Url or Twiml")
	}
	dec := xml.NewDecoder(strings.NewReader(twiml))
	depth, root := 0, ""
	say := 0 // the depth of the <Say> being read, 0 outside one
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", errors.New("it is not well-formed XML")
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				if root != "" {
					return "", errors.New("it has more than one root element")
				}
				root = t.Name.Local
				if root != "Response" || t.Name.Space != "" {
					return "", errors.New("its root is not <Response>")
				}
			}
			ssml := say > 0 && ssmlTags[t.Name.Local] && t.Name.Space == ""
			if !ssml && (!closedVerbs[t.Name.Local] || t.Name.Space != "" || (depth > 0 && t.Name.Local == "Response")) {
				return t.Name.Local, nil
			}
			depth++
			if t.Name.Local == "Say" && say == 0 {
				say = depth
			}
		case xml.EndElement:
			if depth == say {
				say = 0
			}
			depth--
		case xml.Directive, xml.ProcInst:
			if p, ok := tok.(xml.ProcInst); ok && p.Target == "xml" && root == "" {
				continue
			}
			return "", errors.New("it has a directive or processing instruction")
		}
	}
	if root == "" {
		return "", errors.New("it has no <Response>")
	}
	return "", nil
}
