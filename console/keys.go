package console

import (
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// keyRow is one line of the keys table.
type keyRow struct {
	*keyView
	Status  string
	Windows []windowRow
	Ops     []string // the first few allowed operations
	MoreOps int
}

// windowRow is one spend window of a key.
type windowRow struct {
	Name      string
	Cap       *keybrake.Micros
	Spent     keybrake.Micros
	Remaining *keybrake.Micros
	ResetsAt  *time.Time
}

func (c *Console) serveKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := c.allKeys(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	st, label, sortBy := q.Get("status"), strings.TrimSpace(q.Get("q")), q.Get("sort")
	now := c.Now()
	var rows []keyRow
	for i := range keys {
		k := &keys[i]
		s := status(&k.Key, now)
		if st != "" && s != st {
			continue
		}
		if label != "" && !strings.Contains(strings.ToLower(k.Label+" "+k.ID+" "+k.SecretPrefix), strings.ToLower(label)) {
			continue
		}
		full, err := c.key(r.Context(), k.ID) // the budget comes with the single key
		if err != nil {
			c.fail(w, r, err)
			return
		}
		rows = append(rows, newKeyRow(full, now))
	}
	sortRows(rows, sortBy)
	c.render(w, r, http.StatusOK, "keys.html", page{Title: "Keys", Nav: "keys", Data: map[string]any{
		"Rows": rows, "Total": len(keys), "Status": st, "Q": label, "Sort": sortBy,
		"Sorts": []struct{ Value, Label string }{{"", "Newest first"}, {"label", "Label"}, {"spend", "Most spent today"}, {"expires", "Expiring soonest"}, {"status", "Status"}},
	}})
}

func newKeyRow(k *keyView, now time.Time) keyRow {
	row := keyRow{keyView: k, Status: status(&k.Key, now)}
	if b := k.Budget; b != nil {
		if k.PerRequest != nil {
			row.Windows = append(row.Windows, windowRow{Name: "per request", Cap: k.PerRequest, Remaining: k.PerRequest})
		}
		for _, w := range []struct {
			name string
			wb   *windowBudget
		}{{"daily", b.Daily}, {"monthly", b.Monthly}, {"total", b.Total}} {
			if w.wb != nil {
				row.Windows = append(row.Windows, windowRow{Name: w.name, Cap: w.wb.Cap, Spent: w.wb.Spent, Remaining: w.wb.Remaining, ResetsAt: w.wb.ResetsAt})
			}
		}
	}
	ops := k.AllowedEndpoints
	if len(ops) > 3 {
		row.Ops, row.MoreOps = ops[:3], len(ops)-3
	} else {
		row.Ops = ops
	}
	return row
}

// daySpent is what the key spent today, for sorting.
func (r keyRow) daySpent() keybrake.Micros {
	if r.Budget != nil && r.Budget.Daily != nil {
		return r.Budget.Daily.Spent
	}
	return 0
}

func sortRows(rows []keyRow, by string) {
	less := map[string]func(a, b keyRow) bool{
		"label":   func(a, b keyRow) bool { return strings.ToLower(a.Label) < strings.ToLower(b.Label) },
		"spend":   func(a, b keyRow) bool { return a.daySpent() > b.daySpent() },
		"status":  func(a, b keyRow) bool { return a.Status < b.Status },
		"expires": func(a, b keyRow) bool { return expiry(a).Before(expiry(b)) },
	}[by]
	if less == nil {
		less = func(a, b keyRow) bool { return a.CreatedAt.After(b.CreatedAt) }
	}
	sort.SliceStable(rows, func(i, j int) bool { return less(rows[i], rows[j]) })
}

func expiry(r keyRow) time.Time {
	if r.ExpiresAt == nil {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return *r.ExpiresAt
}

// keyPage is the key page's data.
type keyPage struct {
	Row      keyRow
	Overview *overview
	Feed     feed
	Form     keyForm
	Errors   map[string]string
	Error    string
}

func (c *Console) serveKey(w http.ResponseWriter, r *http.Request, id string) {
	c.renderKey(w, r, id, http.StatusOK, nil, nil)
}

// renderKey shows a key; form and err, when set, are an edit that was
// refused, shown with its errors next to the fields.
func (c *Console) renderKey(w http.ResponseWriter, r *http.Request, id string, code int, form *keyForm, err error) {
	k, kerr := c.key(r.Context(), id)
	if kerr != nil {
		c.fail(w, r, kerr)
		return
	}
	ov, oerr := c.overview(r.Context(), id)
	if oerr != nil {
		c.fail(w, r, oerr)
		return
	}
	events, _, eerr := c.events(r.Context(), keybrake.EventFilter{KeyID: id, Limit: 50})
	if eerr != nil {
		c.fail(w, r, eerr)
		return
	}
	p := keyPage{Row: newKeyRow(k, c.Now()), Overview: ov, Feed: feed{Events: events}}
	if form != nil {
		p.Form = *form
	} else {
		p.Form = formFromKey(&k.Key)
	}
	p.Errors, p.Error = fieldErrors(err)
	flash := ""
	if r.URL.Query().Get("saved") == "1" {
		flash = "Saved."
	}
	c.render(w, r, code, "key.html", page{Title: labelOr(k), Nav: "keys", Flash: flash,
		Stream: "/console/keys/" + id + "/stream?after=" + newest(events), Data: p})
}

func labelOr(k *keyView) string {
	if k.Label != "" {
		return k.Label
	}
	return k.ID
}

func (c *Console) serveUpdateKey(w http.ResponseWriter, r *http.Request, id string) {
	form := parseKeyForm(r)
	var k keyView
	if err := c.admin(r.Context(), http.MethodPatch, "/vault/keys/"+id, form.fields(false), &k); err != nil {
		if keybrake.ErrorCode(err) != keybrake.EINVALID {
			c.fail(w, r, err)
			return
		}
		c.renderKey(w, r, id, http.StatusBadRequest, &form, err)
		return
	}
	http.Redirect(w, r, "/console/keys/"+id+"?saved=1", http.StatusSeeOther)
}

func (c *Console) serveRevokeKey(w http.ResponseWriter, r *http.Request, id string) {
	if r.PostFormValue("confirm") != id {
		c.renderKey(w, r, id, http.StatusBadRequest, nil, keybrake.ErrorParam("confirm", "Type the key's ID to confirm the revocation."))
		return
	}
	if err := c.admin(r.Context(), http.MethodPost, "/vault/keys/"+id+"/revoke", nil, nil); err != nil {
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/keys/"+id, http.StatusSeeOther)
}

func (c *Console) serveNewKey(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "newkey.html", page{Title: "New key", Nav: "new", Data: keyPage{Form: keyForm{Timezone: "UTC"}}})
}

// created is the page shown once after creation, with the vault key.
type created struct {
	Key     *keyView
	BaseURL string
}

func (c *Console) serveCreateKey(w http.ResponseWriter, r *http.Request) {
	form := parseKeyForm(r)
	var k keyView
	if err := c.admin(r.Context(), http.MethodPost, "/vault/keys", form.fields(true), &k); err != nil {
		if keybrake.ErrorCode(err) != keybrake.EINVALID {
			c.fail(w, r, err)
			return
		}
		p := keyPage{Form: form}
		p.Errors, p.Error = fieldErrors(err)
		c.render(w, r, http.StatusBadRequest, "newkey.html", page{Title: "New key", Nav: "new", Data: p})
		return
	}
	c.render(w, r, http.StatusCreated, "created.html", page{Title: "Key created", Nav: "keys", Data: created{Key: &k, BaseURL: baseURL(r)}})
}

// baseURL is this server's address as the browser reached it.
func baseURL(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// fieldErrors splits an admin refusal into the field it names and the
// message, for showing next to the field.
func fieldErrors(err error) (map[string]string, string) {
	if err == nil {
		return nil, ""
	}
	msg := keybrake.ErrorMessage(err)
	if p := keybrake.ErrorParamOf(err); p != "" {
		field := p
		if i := strings.IndexByte(field, '['); i > 0 {
			field = field[:i]
		}
		return map[string]string{field: msg}, ""
	}
	return nil, msg
}
