package alert

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/keybrake/keybrake"
)

// Event is the JSON body of a keybrake-format delivery. ID is the alert's
// id: the same on every attempt and every endpoint.
type Event struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "event"
	Type    string `json:"type"`   // "alert." + the alert's kind
	Created int64  `json:"created"`
	Data    Data   `json:"data"`
}

// Data is an event's content: the alert, the key's label and a sentence
// saying what happened.
type Data struct {
	*keybrake.Alert
	KeyLabel     string     `json:"key_label"`
	KeyExpiresAt *time.Time `json:"key_expires_at,omitempty"`
	Message      string     `json:"message"`
	// Approval is set on approval_required alerts.
	Approval *ApprovalInfo `json:"approval,omitempty"`
}

// slackBody is the Slack-compatible body: incoming webhooks of Slack,
// Mattermost, Rocket.Chat and Discord's /slack endpoints take it.
type slackBody struct {
	Text string `json:"text"`
}

// slackEscaper escapes Slack's three control characters, as its
// formatting reference asks of text that is not markup: only these are
// decoded for display.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Body returns the body delivered for a to an endpoint of format, with k
// the alert's key (nil if it is gone).
func Body(format string, a *keybrake.Alert, k *keybrake.Key) ([]byte, error) {
	return BodyWith(format, a, k, nil)
}

// BodyWith is Body with what an approval_required alert says about its
// approval (nil for other kinds, or when the approval is gone).
func BodyWith(format string, a *keybrake.Alert, k *keybrake.Key, ap *ApprovalInfo) ([]byte, error) {
	msg := Message(a, k)
	if ap != nil && ap.Currency == "" && a.Kind == keybrake.AlertApproval {
		// Not priced: keybrake never knew its amount, so "$0.00" would
		// tell the approver nothing moves.
		msg = strings.Replace(msg, " of $"+a.Spent.String()+" on ", " (not priced by keybrake: its amount is in the request's parameters) on ", 1)
	}
	if format == keybrake.FormatSlack {
		// The sentence quotes text the key holder chose (a child key's
		// label, a refusal's detail): as Slack markup, <url|text> in it
		// would be a link next to the genuine ones. The approval lines
		// are keybrake's own links and stay markup.
		msg = slackEscaper.Replace(msg)
		if ap != nil {
			// The parameters are the key holder's too: escaped like the
			// sentence, before keybrake's own links.
			msg += slackEscaper.Replace(paramLines(ap)) + approvalLines(ap)
		}
		return json.Marshal(slackBody{Text: msg})
	}
	if ap != nil {
		msg += paramLines(ap) + approvalLines(ap)
	}
	d := Data{Alert: a, Message: msg, Approval: ap}
	if k != nil {
		d.KeyLabel, d.KeyExpiresAt = k.Label, k.ExpiresAt
	}
	return json.Marshal(Event{ID: a.ID, Object: "event", Type: "alert." + a.Kind, Created: a.CreatedAt.Unix(), Data: d})
}

// Message says in one sentence what a is about.
func Message(a *keybrake.Alert, k *keybrake.Key) string {
	who := "key " + a.KeyID
	if k != nil && k.Label != "" {
		who = fmt.Sprintf("key %q (%s)", k.Label, a.KeyID)
	}
	switch a.Kind {
	case keybrake.AlertThreshold:
		period := a.Bucket
		if a.Window == keybrake.WindowTotal {
			period = "lifetime"
		}
		return fmt.Sprintf("keybrake: %s reached %d%% of its %s cap: $%s of $%s spent or reserved (%s).",
			who, a.Percent, a.Window, a.Spent, a.Cap, period)
	case keybrake.AlertExpiring:
		when := "soon"
		if k != nil && k.ExpiresAt != nil {
			when = "at " + k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("keybrake: %s expires %s (within %d h).", who, when, a.Count)
	case keybrake.AlertRefusalBurst:
		return fmt.Sprintf("keybrake: %s was refused %d times or more within a burst window (last: %s).", who, a.Count, a.Detail)
	case keybrake.AlertUncertain:
		return fmt.Sprintf("keybrake: reservation %s of $%s on %s (%s) has been uncertain for more than %d min; the resolver has not settled it.",
			a.ReservationID, a.Reserved, who, a.Detail, a.Count)
	case keybrake.AlertAmountMismatch:
		return fmt.Sprintf("keybrake: ALARM: upstream moved $%s on reservation %s of %s (%s), above the $%s reserved; counted in full.",
			a.Spent, a.ReservationID, who, a.Detail, a.Reserved)
	case keybrake.AlertApproval:
		return fmt.Sprintf("keybrake: %s of $%s on %s waits for a person's approval (%s).", a.Detail, a.Spent, who, a.ApprovalID)
	case keybrake.AlertDrift:
		if a.KeyID == "" {
			who = "no key (made outside keybrake)"
		}
		return fmt.Sprintf("keybrake: drift (%s) on %s: %s", a.Finding, who, a.Detail)
	case keybrake.AlertTest:
		return fmt.Sprintf("keybrake: test alert for %s. If you can read this, the endpoint works.", a.Detail)
	}
	return fmt.Sprintf("keybrake: %s alert on %s.", a.Kind, who)
}

// approvalLines adds to the message the approval's expiry and links, one a
// line, so a chat message can be acted on.
func approvalLines(ap *ApprovalInfo) string {
	s := "\nExpires " + ap.ExpiresAt.UTC().Format(time.RFC3339) + "."
	if ap.ConsoleURL != "" {
		s += "\nReview: " + ap.ConsoleURL
	}
	if ap.ApproveURL != "" {
		s += "\nApprove: " + ap.ApproveURL + "\nDeny: " + ap.DenyURL
	}
	return s
}

// paramLines adds to the message the request's parameters, one a line, so
// the approver sees where the money or the message goes before following
// a link. Values are quoted (strconv.Quote escapes what is not printable)
// and names lose what is not printable, though the proxy stored both
// escaped already, so nothing adds a line that looks like keybrake's own
// Approve: or Deny: link.
func paramLines(ap *ApprovalInfo) string {
	p := ap.Params
	switch {
	case p == nil:
		return "\nParameters: not recorded (asked for before keybrake kept them)."
	case len(p.List) == 0 && p.More == 0:
		return "\nParameters: none."
	}
	var b strings.Builder
	b.WriteString("\nParameters:")
	for _, kv := range p.List {
		b.WriteString("\n  " + printable(kv.Name) + " = ")
		if kv.Masked {
			b.WriteString("(not shown)")
		} else {
			b.WriteString(strconv.Quote(kv.Value))
		}
	}
	if p.More > 0 {
		fmt.Fprintf(&b, "\n  …and %d more not shown", p.More)
	}
	return b.String()
}

// printable returns s without the characters that are not printable.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
}
