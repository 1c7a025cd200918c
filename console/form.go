package console

import (
	"net/http"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// keyForm is the key form as typed: the admin API's fields as text. It
// is turned into the admin API's JSON unvalidated, so the admin API's own
// parsing decides and its messages are shown.
type keyForm struct {
	Label            string
	PerRequest       string
	Daily            string
	Monthly          string
	Total            string
	Endpoints        string
	Customers        string
	Accounts         string
	Currencies       string
	ExpiresAt        string // datetime-local, in UTC
	Timezone         string
	AllowUnpriced    bool
	AllowSecretReads bool
}

func parseKeyForm(r *http.Request) keyForm {
	v := func(name string) string { return strings.TrimSpace(r.PostFormValue(name)) }
	return keyForm{
		Label: v("label"), PerRequest: v("per_request_usd_cap"), Daily: v("daily_usd_cap"),
		Monthly: v("monthly_usd_cap"), Total: v("total_usd_cap"),
		Endpoints: v("allowed_endpoints"), Customers: v("allowed_customers"),
		Accounts: v("allowed_accounts"), Currencies: v("allowed_currencies"),
		ExpiresAt: v("expires_at"), Timezone: v("timezone"),
		AllowUnpriced: r.PostFormValue("allow_unpriced") == "on", AllowSecretReads: r.PostFormValue("allow_secret_reads") == "on",
	}
}

// formFromKey fills the edit form with the key's current policy.
func formFromKey(k *keybrake.Key) keyForm {
	cap := func(m *keybrake.Micros) string {
		if m == nil {
			return ""
		}
		return m.String()
	}
	f := keyForm{
		Label: k.Label, PerRequest: cap(k.PerRequest), Daily: cap(k.Daily), Monthly: cap(k.Monthly), Total: cap(k.Total),
		Endpoints: strings.Join(k.AllowedEndpoints, "\n"), Customers: strings.Join(k.AllowedCustomers, "\n"),
		Accounts: strings.Join(k.AllowedAccounts, "\n"), Currencies: strings.Join(k.AllowedCurrencies, "\n"),
		Timezone: k.Timezone, AllowUnpriced: k.AllowUnpriced, AllowSecretReads: k.AllowSecretReads,
	}
	if k.ExpiresAt != nil {
		f.ExpiresAt = k.ExpiresAt.UTC().Format("2006-01-02T15:04")
	}
	return f
}

// fields is the form as the admin API's JSON object. On creation an empty
// field is left out (the admin API's default applies); on an edit an
// empty cap, list or expiry removes it.
func (f keyForm) fields(create bool) map[string]any {
	out := map[string]any{}
	text := func(name, v string) {
		if v != "" {
			out[name] = v
		} else if !create {
			out[name] = nil
		}
	}
	if f.Label != "" || !create {
		out["label"] = f.Label
	}
	text("per_request_usd_cap", f.PerRequest)
	text("daily_usd_cap", f.Daily)
	text("monthly_usd_cap", f.Monthly)
	text("total_usd_cap", f.Total)
	for _, l := range []struct{ name, v string }{
		{"allowed_endpoints", f.Endpoints}, {"allowed_customers", f.Customers},
		{"allowed_accounts", f.Accounts}, {"allowed_currencies", f.Currencies},
	} {
		list := splitList(l.v)
		switch {
		case len(list) > 0:
			out[l.name] = list
		case l.name == "allowed_endpoints" && !create:
			out[l.name] = []string{} // refused by the admin API, with its message
		case !create:
			out[l.name] = nil
		}
	}
	text("expires_at", expiresAt(f.ExpiresAt))
	if create && f.Timezone != "" {
		out["timezone"] = f.Timezone
	}
	if f.AllowUnpriced || !create {
		out["allow_unpriced"] = f.AllowUnpriced
	}
	if f.AllowSecretReads || !create {
		out["allow_secret_reads"] = f.AllowSecretReads
	}
	return out
}

// splitList reads one entry per line or comma.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ',' || r == '\r' }) {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// expiresAt turns a datetime-local value, which has no zone, into RFC
// 3339 in UTC, as the form labels it. Anything else is passed on for the
// admin API to refuse with its message.
func expiresAt(v string) string {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t.Format(time.RFC3339)
		}
	}
	return v
}

// formField describes one field of the key form.
type formField struct {
	Name, Label, Hint string
	Rows              int
}

var capFields = []formField{
	{Name: "per_request_usd_cap", Label: "Per request"},
	{Name: "daily_usd_cap", Label: "Per day"},
	{Name: "monthly_usd_cap", Label: "Per month"},
	{Name: "total_usd_cap", Label: "Lifetime total"},
}

var listFields = []formField{
	{Name: "allowed_endpoints", Label: "Allowed operations", Rows: 5, Hint: "charges.create\n/v1/payment_intents\n* for every operation — left empty at creation: the default payments set"},
	{Name: "allowed_customers", Label: "Allowed customers (empty = any)", Rows: 2, Hint: "cus_…"},
	{Name: "allowed_accounts", Label: "Allowed connected accounts (empty = any)", Rows: 2, Hint: "acct_…"},
	{Name: "allowed_currencies", Label: "Allowed currencies (empty = any)", Rows: 2, Hint: "usd\neur"},
}

// value is the typed text of the named field.
func (f keyForm) value(name string) string {
	return map[string]string{
		"label": f.Label, "per_request_usd_cap": f.PerRequest, "daily_usd_cap": f.Daily,
		"monthly_usd_cap": f.Monthly, "total_usd_cap": f.Total,
		"allowed_endpoints": f.Endpoints, "allowed_customers": f.Customers,
		"allowed_accounts": f.Accounts, "allowed_currencies": f.Currencies,
		"expires_at": f.ExpiresAt, "timezone": f.Timezone,
	}[name]
}
