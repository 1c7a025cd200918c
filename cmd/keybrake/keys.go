package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

func init() {
	commands["keys"] = command{"manage vault keys through the admin API: create, list, show, update, revoke, events", runKeys}
}

var keyIDPattern = regexp.MustCompile(`^vk_[0-9A-Za-z]{1,64}$`)

// runKeys is a thin client of the admin API, so an operator needs no curl.
// It prints the API's JSON as it comes.
func runKeys(ctx context.Context, args []string, env Env) error {
	fs := flagSet("keys", `Manages vault keys through a running keybrake's admin API and prints its JSON:

  keybrake keys create '{"label":"billing-2026-11","daily_usd_cap":250,"allowed_endpoints":["/v1/charges"]}'
  keybrake keys list [--limit N] [--starting-after vk_…]
  keybrake keys show vk_…
  keybrake keys update vk_… '{"daily_usd_cap":100}'
  keybrake keys revoke vk_…
  keybrake keys events vk_… [--limit N]

The policy fields are those of POST /vault/keys (README.md, "Admin API").
The vault key is printed once, by create. The admin token comes from
KEYBRAKE_ADMIN_TOKEN.

Usage: keybrake keys [flags] <create|list|show|update|revoke|events> [args]`, env)
	base := fs.String("url", envDefault(env, "KEYBRAKE_URL", "http://127.0.0.1:8080"), "keybrake's base URL (KEYBRAKE_URL)")
	limit := fs.Int("limit", 10, "list, events: page size, 1 to 100")
	after := fs.String("starting-after", "", "list, events: the last id of the previous page")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Flags may also follow the action: keys list --limit 5.
	if fs.NArg() > 0 {
		action := fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
		args = append([]string{action}, fs.Args()...)
	} else {
		args = nil
	}
	token := envDefault(env, "KEYBRAKE_ADMIN_TOKEN", "")
	if token == "" {
		return fmt.Errorf("KEYBRAKE_ADMIN_TOKEN is not set: it is the token keybrake serve was started with (or printed)")
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --url (KEYBRAKE_URL) %q: want keybrake's base URL like http://127.0.0.1:8080", *base)
	}
	if *limit < 1 || *limit > 100 {
		return fmt.Errorf("invalid --limit %d: want 1 to 100", *limit)
	}
	rest := args
	if len(rest) == 0 {
		fs.Usage()
		return fmt.Errorf("keys: no action given")
	}
	page := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *after != "" {
		page.Set("starting_after", *after)
	}
	action, rest := rest[0], rest[1:]
	needID := func(n int) (string, error) {
		if len(rest) != n || !keyIDPattern.MatchString(rest[0]) {
			return "", fmt.Errorf("keys %s: want a key id (vk_…)%s", action, map[bool]string{true: " and a JSON policy", false: ""}[n == 2])
		}
		return rest[0], nil
	}
	var method, path, body string
	switch action {
	case "create":
		if len(rest) != 1 {
			return fmt.Errorf("keys create: want one JSON policy argument")
		}
		method, path, body = "POST", "/vault/keys", rest[0]
	case "list":
		method, path = "GET", "/vault/keys?"+page.Encode()
	case "show", "revoke", "events":
		id, err := needID(1)
		if err != nil {
			return err
		}
		switch action {
		case "show":
			method, path = "GET", "/vault/keys/"+id
		case "revoke":
			method, path = "POST", "/vault/keys/"+id+"/revoke"
		case "events":
			method, path = "GET", "/vault/keys/"+id+"/events?"+page.Encode()
		}
	case "update":
		id, err := needID(2)
		if err != nil {
			return err
		}
		method, path, body = "PATCH", "/vault/keys/"+id, rest[1]
	default:
		return fmt.Errorf("keys: unknown action %q: want create, list, show, update, revoke or events", action)
	}
	if body != "" && !json.Valid([]byte(body)) {
		return fmt.Errorf("keys %s: the policy is not valid JSON", action)
	}
	return adminCall(ctx, env, strings.TrimSuffix(u.String(), "/")+path, method, token, body)
}

// adminCall sends one admin request and prints the answer; an error status
// is an error carrying the API's message.
func adminCall(ctx context.Context, env Env, target, method, token, body string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("keybrake admin API: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message, Param string } `json:"error"`
		}
		if json.Unmarshal(out, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("keybrake admin API: %d %s: %s", resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("keybrake admin API: %d %s", resp.StatusCode, bytes.TrimSpace(out))
	}
	_, err = env.Stdout.Write(out)
	return err
}
