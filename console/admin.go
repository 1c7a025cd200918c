package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/keybrake/keybrake"
)

// keyView is a key as the admin API returns it.
type keyView struct {
	keybrake.Key
	VaultKey string   `json:"vault_key"`
	Budget   *budget  `json:"budget"`
	Notices  []string `json:"notices"`
}

// budget is the admin API's spend per window.
type budget struct {
	PerRequest *windowBudget   `json:"per_request"`
	Daily      *windowBudget   `json:"daily"`
	Monthly    *windowBudget   `json:"monthly"`
	Total      *windowBudget   `json:"total"`
	Uncertain  keybrake.Micros `json:"uncertain_usd"`
	Held       keybrake.Micros `json:"held_usd"`
	Timezone   string          `json:"timezone"`
}

type windowBudget struct {
	Cap       *keybrake.Micros `json:"cap_usd"`
	Spent     keybrake.Micros  `json:"spent_usd"`
	Remaining *keybrake.Micros `json:"remaining_usd"`
	ResetsAt  *time.Time       `json:"resets_at"`
}

// adminError is the admin API's error body.
type adminError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Param   string `json:"param"`
	} `json:"error"`
}

// admin sends one request to the admin API in-process and decodes its
// answer into out. A refusal comes back as a *keybrake.Error with the
// admin API's code, message and param, so forms show it by the field.
func (c *Console) admin(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode admin request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://console.invalid"+path, rd)
	if err != nil {
		return fmt.Errorf("admin request: %w", err)
	}
	req.RemoteAddr = "console"
	token := c.AdminToken
	if sess, ok := ctx.Value(sessionKey{}).(*session); ok && sess.adminToken != "" {
		token = sess.adminToken // the operator's own identity and role
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.Admin.ServeHTTP(rec, req)
	if rec.status >= 300 {
		var e adminError
		if json.Unmarshal(rec.body.Bytes(), &e) != nil || e.Error.Message == "" {
			return keybrake.Errorf(keybrake.EINTERNAL, "admin API answered %d", rec.status)
		}
		code := e.Error.Code
		if code == "" {
			code = keybrake.ENOTFOUND // the server's own 404 for a route it does not have
		}
		return &keybrake.Error{Code: code, Message: e.Error.Message, Param: e.Error.Param}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("decode admin answer to %s %s: %w", method, path, err)
	}
	return nil
}

// allKeys pages through every key, oldest first.
func (c *Console) allKeys(ctx context.Context) ([]keyView, error) {
	var keys []keyView
	after := ""
	for {
		var page struct {
			Data    []keyView `json:"data"`
			HasMore bool      `json:"has_more"`
		}
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		if err := c.admin(ctx, http.MethodGet, "/vault/keys?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		keys = append(keys, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			return keys, nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
}

// key returns one key with its budget.
func (c *Console) key(ctx context.Context, id string) (*keyView, error) {
	var k keyView
	if err := c.admin(ctx, http.MethodGet, "/vault/keys/"+id, nil, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// recorder is the ResponseWriter of an in-process admin request.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
