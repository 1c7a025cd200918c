package console_test

import (
	"strings"
	"testing"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// TestKeyPageShowsScope: a Twilio or Resend key's page lists its scope,
// escaped; a key without one shows no scope section.
func TestKeyPageShowsScope(t *testing.T) {
	s := MustConsole(t, nil)
	tw, _ := kbtest.VaultKey(t, s.URL(), `{"vendor":"twilio","twilio_scope":{"allowed_countries":["us"],"allowed_from":["whatsapp:+14155550100"]}}`)
	rs, _ := kbtest.VaultKey(t, s.URL(), `{"vendor":"resend","resend_scope":{"allowed_senders":["Billing@Example.com"],"allowed_recipient_domains":["bücher.example"],"max_recipients":3}}`)
	plain, _ := kbtest.VaultKey(t, s.URL(), `{"vendor":"resend"}`)
	c := newClient(t, s.URL())
	c.signIn()
	for id, want := range map[string][]string{
		tw:    {"Twilio scope", "Destination countries", "<code>US</code>", "<code>whatsapp:&#43;14155550100</code>"},
		rs:    {"Resend scope", "<code>billing@example.com</code>", "<code>xn--bcher-kva.example</code>", "at most 3"},
		plain: nil,
	} {
		_, body := c.do("GET", "/console/keys/"+id, nil, nil)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the page lacks %q", id, w)
			}
		}
		if want == nil && strings.Contains(body, `id="key-scope"`) {
			t.Errorf("%s: a key without scope shows one", id)
		}
	}
}
